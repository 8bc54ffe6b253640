"""Branch suites of a RemoteConversation: forks, runs and results on the agent server.

Real parts only: cowconv's agent server on uvicorn (127.0.0.1) or OpenHands'
1.58.2 agent server started from its own environment; the LLM is the stub
of cowconv.testing, reached by the server through litellm's HTTP path; the
executors are this process's threads or real worker processes; the caller
killed mid-suite is a real process SIGKILLed. Each branch has its own model
and system prompt, and the stub's requests say which were used: one LLM call
per branch, however the suite was cut.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cowconv import (
    LLM,
    Agent,
    Branch,
    Conversation,
    InvalidValueError,
    RemoteConversation,
    SuiteExistsError,
    Workspace,
    resume_suite,
    run_branches,
)
from cowconv.agent_server import BackgroundServer, create_app
from cowconv.branches.remote import BRANCH_TAG, SUITE_TAG, suite_fork_id
from cowconv.distributed import ProcessExecutor
from cowconv.testing import StubLLMServer, StubReply
from tests.clusters import local_cluster

SIZE = 20
# Seconds the stub takes per answer: the caller is killed while branches run (it is killed
# once 3 of 20 were asked, and at most 4 run at a time: 2.5 s at least), and branches overlap.
DELAY = 0.5
SUITE = "reviews"
WAIT = 600.0  # generous: two cores shared by several test runs


def _message(index: int) -> str:
    return f"Write review {index} of the plan."


def _model(index: int) -> str:
    return f"openai/reviewer-{index % 4}"


def _prompt(index: int) -> str:
    return f"You are reviewer number {index}; be brief."


def _agent(stub: StubLLMServer, index: int) -> Agent:
    llm = LLM(model=_model(index), base_url=stub.base_url, api_key="stub-key")
    return Agent(llm=llm, system_prompt=_prompt(index))


def _branches(stub: StubLLMServer, size: int = SIZE) -> list[Branch]:
    return [
        Branch(_message(i), agent=_agent(stub, i), title=f"review {i}", tags={"variant": str(i)})
        for i in range(size)
    ]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _seen(stub: StubLLMServer) -> list[tuple[str, str, str]]:
    """(model, system prompt, last user message) of every agent step the stub was asked for.

    OpenHands' server also asks a conversation's LLM for a title when its first
    message comes and it has none: those requests are not a branch's run.
    """
    seen = []
    for request in stub.requests:
        messages = request.messages
        system = next((_text(m["content"]) for m in messages if m["role"] == "system"), "")
        user = next(_text(m["content"]) for m in reversed(messages) if m["role"] == "user")
        if user.startswith("Generate a title"):
            continue
        seen.append((str(request.body.get("model")), system, user))
    return seen


def _branch_of(user: str) -> int | None:
    """The branch whose message ends ``user`` (OpenHands joins consecutive user messages)."""
    for index in range(SIZE):
        if user.endswith(_message(index)):
            return index
    return None


class SlowBrain:
    """Answers with a text naming the message, after ``DELAY`` seconds (a slow provider)."""

    def __call__(self, request: dict[str, Any]) -> StubReply:
        messages = request.get("messages") or []
        said = next((_text(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
        if said.startswith("Generate a title"):
            return StubReply.text("A title")  # OpenHands' server titling a conversation
        return StubReply.text(f"Done: {said}", delay=DELAY)


@pytest.fixture
def slow_stub() -> Iterator[StubLLMServer]:
    with StubLLMServer(brain=SlowBrain()) as server:
        yield server


@pytest.fixture
def cowconv_server(tmp_path: Path) -> Iterator[str]:
    with BackgroundServer(create_app(data_dir=tmp_path / "data")) as server:
        yield server.url


@pytest.fixture(params=["cowconv", "openhands"])
def server_url(request: pytest.FixtureRequest) -> str:
    """The URL of an agent server: cowconv's, or OpenHands' 1.58.2."""
    name = "cowconv_server" if request.param == "cowconv" else "openhands_server"
    url: str = request.getfixturevalue(name)
    return url


def _source(url: str, stub: StubLLMServer, working_dir: Path) -> Conversation:
    llm = LLM(model="openai/source-model", base_url=stub.base_url, api_key="stub-key")
    source = Conversation(
        agent=Agent(llm=llm, system_prompt="You plan."),
        workspace=Workspace(host=url, working_dir=str(working_dir)),
    )
    source.send_message("Plan the release.")
    return source


def _check_every_branch_ran_once_as_asked(stub: StubLLMServer, size: int = SIZE) -> None:
    seen = _seen(stub)
    by_branch: dict[int | None, list[tuple[str, str]]] = {}
    for model, system, user in seen:
        by_branch.setdefault(_branch_of(user), []).append((model, system))
    for index in range(size):
        calls = by_branch.get(index, [])
        assert len(calls) == 1, (index, calls)
        model, system = calls[0]
        assert model == _model(index).removeprefix("openai/")
        assert system.startswith(_prompt(index))
    assert len(seen) == size


def _check_on_the_server(url: str, forks: list[Conversation], working_dir: Path) -> None:
    """Each fork, read by a new client from the server: finished, its own answer kept."""
    for index, fork in enumerate(forks):
        again = RemoteConversation.attach(url, str(fork.id), working_dir=str(working_dir))
        try:
            state = again.state
            assert state.execution_status.value == "finished"
            assert state.events[-1].text.startswith("Done: ")
            assert state.events[-1].text.endswith(_message(index))
            assert state.agent.llm.model == _model(index)
            assert state.tags.get("variant") == str(index)
        finally:
            again.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_a_suite_varying_model_and_system_prompt_keeps_every_result_on_the_server(
    server_url: str, slow_stub: StubLLMServer, tmp_path: Path, engine: str
) -> None:
    source = _source(server_url, slow_stub, tmp_path)
    executor = ProcessExecutor(max_workers=2, progress=False) if engine == "processes" else None
    heard: list[str] = []

    def hear(event: Any) -> None:
        if getattr(event, "source", None) == "agent" and hasattr(event, "text"):
            heard.append(event.text)

    forks = run_branches(
        source, _branches(slow_stub), executor=executor, max_workers=4, callbacks=[hear]
    )
    try:
        assert [f.state.execution_status.value for f in forks] == ["finished"] * SIZE
        assert len({str(f.id) for f in forks} | {str(source.id)}) == SIZE + 1
        _check_every_branch_ran_once_as_asked(slow_stub)
        _check_on_the_server(server_url, forks, tmp_path)
        if engine == "processes":
            assert all(worker for worker in forks.workers)
        for index in range(SIZE):  # every answer heard here, once
            assert sum(text.endswith(_message(index)) for text in heard) == 1, heard
        assert source.state.events[-1].text == "Plan the release."  # the source is untouched
    finally:
        for fork in forks:
            fork.close()
        source.close()


CALLER = textwrap.dedent(
    """
    import sys

    from cowconv import LLM, Agent, Branch, RemoteConversation, run_branches


    def main():
        url, source_id, working_dir, base_url, engine, suite, size = sys.argv[1:8]
        source = RemoteConversation.attach(url, source_id, working_dir=working_dir)
        branches = []
        for i in range(int(size)):
            llm = LLM(model=f"openai/reviewer-{i % 4}", base_url=base_url, api_key="stub-key")
            agent = Agent(llm=llm, system_prompt=f"You are reviewer number {i}; be brief.")
            branches.append(Branch(f"Write review {i} of the plan.", agent=agent,
                                   title=f"review {i}", tags={"variant": str(i)}))
        executor = None
        if engine == "processes":
            from cowconv.distributed import ProcessExecutor

            executor = ProcessExecutor(max_workers=2, progress=False)
        run_branches(source, branches, executor=executor, max_workers=4, suite_id=suite)
        print("the suite ended before it was killed", flush=True)


    if __name__ == "__main__":
        main()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_the_caller_killed_mid_suite_another_process_finishes_it_once_per_branch(
    server_url: str, slow_stub: StubLLMServer, tmp_path: Path, engine: str
) -> None:
    source = _source(server_url, slow_stub, tmp_path)
    # A suite id of this test's own: the module's tests share one OpenHands server, where a
    # resume by id finds every source's suite of that name (two are a SuiteExistsError).
    suite = f"{SUITE}-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "caller.py"
    script.write_text(CALLER)
    caller = subprocess.Popen(
        [sys.executable, str(script), server_url, str(source.id), str(tmp_path),
         slow_stub.base_url, engine, suite, str(SIZE)],
        cwd=tmp_path,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT
        while len(_seen(slow_stub)) < 3:  # some branches answered or answering, most not
            assert caller.poll() is None, "the caller ended before it could be killed"
            assert time.monotonic() < deadline, "the suite never started"
            time.sleep(0.05)
        os.kill(caller.pid, signal.SIGKILL)
        assert caller.wait(60) == -signal.SIGKILL
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait(60)
    assert len(_seen(slow_stub)) < SIZE
    executor = ProcessExecutor(max_workers=2, progress=False) if engine == "processes" else None
    where = Workspace(host=server_url, working_dir=str(tmp_path))
    forks = resume_suite(where, suite, executor=executor, max_workers=4)
    try:
        assert [str(f.id) for f in forks] == [
            suite_fork_id(source.id, suite, i) for i in range(SIZE)
        ]
        assert [f.state.execution_status.value for f in forks] == ["finished"] * SIZE
        _check_every_branch_ran_once_as_asked(slow_stub)
        _check_on_the_server(server_url, forks, tmp_path)
        for index, fork in enumerate(forks):
            assert fork.state.tags[SUITE_TAG] == suite
            assert fork.state.tags[BRANCH_TAG] == f"{index}/{SIZE}"
        # Done: a second resume, or the same call again with resume=True, runs nothing.
        again = run_branches(source, _branches(slow_stub), suite_id=suite, resume=True)
        assert [str(f.id) for f in again] == [str(f.id) for f in forks]
        assert len(_seen(slow_stub)) == SIZE
        for fork in again:
            fork.close()
    finally:
        for fork in forks:
            fork.close()
        source.close()


def test_a_suite_id_taken_on_the_server_is_refused_before_any_llm_call(
    cowconv_server: str, stub: StubLLMServer, tmp_path: Path
) -> None:
    source = _source(cowconv_server, stub, tmp_path)
    try:
        first = run_branches(source, ["One.", "Two."], suite_id="s")
        calls = len(stub.requests)
        with pytest.raises(SuiteExistsError, match="resume it") as refused:
            run_branches(source, ["One.", "Two."], suite_id="s")
        assert "\n" not in str(refused.value) and len(str(refused.value)) < 300
        assert len(stub.requests) == calls
        for fork in first:
            fork.close()
    finally:
        source.close()


def test_time_limits_and_worker_directories_are_refused_in_one_line(
    cowconv_server: str, stub: StubLLMServer, tmp_path: Path
) -> None:
    source = _source(cowconv_server, stub, tmp_path)
    try:
        for options in ({"branch_timeout": 5.0}, {"timeout": 5.0}, {"workspace": "/w/{index}"}):
            with pytest.raises(InvalidValueError) as refused:
                run_branches(source, ["One."], **options)  # type: ignore[arg-type]
            text = str(refused.value)
            assert "\n" not in text and len(text) < 300 and "leave" in text
        assert stub.requests == []
        assert len(source.state.events) == 2  # no fork made, nothing sent
    finally:
        source.close()


def test_a_branch_with_another_agent_on_cowconvs_server(
    cowconv_server: str, stub: StubLLMServer, tmp_path: Path
) -> None:
    source = _source(cowconv_server, stub, tmp_path)
    try:
        with pytest.raises(NotImplementedError, match="not supported"):
            source.fork(agent=_agent(stub, 7))  # as in OpenHands' SDK
        (fork,) = run_branches(source, [Branch(_message(7), agent=_agent(stub, 7))])
        model, system, user = _seen(stub)[-1]
        assert (model, user) == ("reviewer-3", _message(7))
        assert system.startswith(_prompt(7))
        served = RemoteConversation.attach(cowconv_server, str(fork.id), working_dir=".")
        assert served.state.agent.system_prompt == _prompt(7)
        assert served.state.agent.llm.model == _model(7)
        served.close()
        fork.close()
    finally:
        source.close()


def test_the_fork_route_publishes_its_agent_field(cowconv_server: str) -> None:
    import httpx

    schema = httpx.get(f"{cowconv_server}/openapi.json", timeout=30).json()
    fork = schema["components"]["schemas"]["ForkConversationRequest"]
    assert "agent" in fork["properties"]
    assert json.dumps(fork["properties"]["agent"]).count("OpenHands' Agent") >= 1


def test_openhands_server_refuses_another_system_prompt_after_the_agent_spoke_in_one_line(
    openhands_server: str,
    stub: StubLLMServer,
    tmp_path: Path,
) -> None:
    source = _source(openhands_server, stub, tmp_path)
    try:
        source.run()
        calls = len(_seen(stub))
        with pytest.raises(InvalidValueError) as refused:
            run_branches(source, [Branch("Again.", agent=_agent(stub, 1))], suite_id="late")
        text = str(refused.value)
        assert "\n" not in text and len(text) < 300 and "cowconv's agent server" in text
        assert len(_seen(stub)) == calls
        # Another model only: a fork, then OpenHands' switch_llm.
        llm_only = source.agent.model_copy(update={"llm": _agent(stub, 2).llm})
        forks = run_branches(source, [Branch("Again.", agent=llm_only)])
        assert _seen(stub)[-1][0] == "reviewer-2"
        assert forks[0].state.execution_status.value == "finished"
        forks[0].close()
    finally:
        source.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["dask", "ray"])
def test_dask_and_ray_workers_run_a_remote_suite_on_the_server(
    cowconv_server: str,
    stub: StubLLMServer,
    tmp_path: Path,
    engine: str,
    request: pytest.FixtureRequest,
) -> None:
    """The same jobs travel to a Dask or Ray worker: it attaches to its fork and runs it there."""
    size = 6
    if engine == "dask":
        distributed = pytest.importorskip("distributed")
        from cowconv.distributed import DaskExecutor

        cluster = local_cluster()
        client = distributed.Client(cluster)
        executor: Any = DaskExecutor(client, max_in_flight=2, progress=False)
    else:
        from cowconv.distributed import RayExecutor

        request.getfixturevalue("ray_session")  # the session's local Ray instance
        executor = RayExecutor(max_in_flight=2, progress=False)
    source = _source(cowconv_server, stub, tmp_path)
    try:
        forks = run_branches(source, _branches(stub, size), executor=executor, suite_id="s")
        assert [f.state.execution_status.value for f in forks] == ["finished"] * size
        _check_every_branch_ran_once_as_asked(stub, size)
        assert all(worker and ":" in worker for worker in forks.workers)
        for fork in forks:
            fork.close()
    finally:
        source.close()
        if engine == "dask":
            client.close()
            cluster.close()


def test_iter_branches_and_the_report_of_a_remote_suite(
    cowconv_server: str, stub: StubLLMServer, tmp_path: Path
) -> None:
    from cowconv import iter_branches

    source = _source(cowconv_server, stub, tmp_path)
    try:
        heard: list[str] = []
        results = list(
            iter_branches(source, _branches(stub, 3), callbacks=[lambda e: heard.append(e.kind)])
        )
        assert sorted(r.index for r in results) == [0, 1, 2]
        assert all(r.ok and r.status == "finished" for r in results)
        assert heard.count("MessageEvent") >= 6  # each fork's message and answer, heard here
        runs = run_branches(source, _branches(stub, 2))
        rows = json.loads(runs.report().to_json())
        assert [row["status"] for row in rows] == ["finished", "finished"]
        assert [row["model"] for row in rows] == [_model(0), _model(1)]
        for fork in [*(r.fork for r in results), *runs]:
            fork.close()
    finally:
        source.close()
