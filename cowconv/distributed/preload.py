"""What every :class:`~cowconv.distributed.ProcessExecutor` worker needs, imported once.

The fork server that starts the workers imports this module before it forks any (see
:class:`~cowconv.distributed.ProcessExecutor`): cowconv's worker, and litellm the way
cowconv imports it (its price list read from the package, never fetched). A worker forked
from it starts with both loaded. An install without litellm (``--no-deps``) still starts
workers: they import it, and fail, only when a branch calls a model.

>>> import sys
>>> "cowconv.distributed.worker" in sys.modules
True
"""

from __future__ import annotations

import contextlib

import cowconv.distributed.worker  # noqa: F401  (what a branch run loads)
from cowconv._exceptions import LLMError
from cowconv.core.llm import LLM

__all__: list[str] = []

with contextlib.suppress(LLMError):
    LLM.preload()
