"""Run branch suites on other processes or machines: Ray, Dask, or worker processes.

>>> from cowconv import LLM, Agent, Conversation, run_branches
>>> from cowconv.testing import StubLLMServer, StubReply
>>> with StubLLMServer() as stub:
...     stub.script(StubReply.text("Plan A."), StubReply.text("Plan B."))
...     llm = LLM(model="openai/stub-model", base_url=stub.base_url, api_key="stub-key")
...     source = Conversation(agent=Agent(llm=llm), workspace=".")
...     _ = source.send_message("Propose a plan.")
...     forks = run_branches(source, ["Be bold.", "Be careful."], executor=PicklingExecutor())
>>> sorted(f.state.events[-1].text for f in forks)
['Plan A.', 'Plan B.']

``run_branches(source, branches, executor=...)`` forks here in O(1), ships
the shared history once per worker and each branch as its header and
message, and commits what each run appended back to its fork here. With
``workspace="copy"`` the forks' files go too, as one snapshot that travels
with the shared history (:func:`snapshot_loads` counts its unpacking), and
each branch's changed files come back to its fork's directory.

- :class:`RayExecutor` (``pip install 'cowconv[ray]'``): the Ray cluster of
  ``ray.init(...)``.
- :class:`DaskExecutor` (``pip install 'cowconv[dask]'``): a
  ``distributed.Client``.
- :class:`ProcessExecutor`: worker processes on this machine (stdlib).
- :class:`PicklingExecutor`: threads of this process, through the same
  bytes; checks that a suite can travel.

See ``docs/distributed.md`` for what travels, secrets and the pitfalls.
"""

from cowconv.distributed.dask import DaskExecutor
from cowconv.distributed.process import PicklingExecutor, ProcessExecutor
from cowconv.distributed.ray import RayExecutor
from cowconv.distributed.worker import prefix_loads
from cowconv.workspaces.transfer import snapshot_loads

__all__ = [
    "DaskExecutor",
    "PicklingExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "prefix_loads",
    "snapshot_loads",
]
