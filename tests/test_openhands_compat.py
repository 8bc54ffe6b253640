"""Code written for OpenHands' SDK runs on cowconv with only its imports renamed.

The first part ports OpenHands' own fork tests (``tests/sdk/conversation/local/
test_fork.py`` of OpenHands' software-agent-sdk) and its documented "What gets copied" table;
the rest checks each OpenHands name and idiom cowconv offers (docs/migration.md).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid

import pytest

from cowconv import (
    LLM,
    Agent,
    Conversation,
    ConversationExecutionStatus,
    ConversationVisualizerBase,
    DefaultConversationVisualizer,
    ExecutionStatus,
    MessageEvent,
    RemoteConversation,
    RemoteError,
    RemoteWorkspace,
    Usage,
)
from cowconv.agent_server import BackgroundServer, create_app
from tests.conftest import message_texts


def _agent() -> Agent:
    return Agent(llm=LLM(model="gpt-4o-mini", api_key="test-key", usage_id="test"), tools=[])


def _msg(event_id: str, text: str = "hi") -> MessageEvent:
    return MessageEvent(id=event_id, role="user", content=text, source="user")


@pytest.fixture(params=["memory", "sqlite", "remote"])
def make(request, tmp_path):
    """Build a source conversation the way OpenHands' tests do: in memory, persisted, remote."""
    made = []
    server = None
    if request.param == "remote":
        server = BackgroundServer(create_app(data_dir=tmp_path / "data")).__enter__()

    def build(**kwargs):
        if request.param == "sqlite":
            kwargs.setdefault("persistence_dir", tmp_path)
        workspace = str(tmp_path)
        if server is not None:
            workspace = RemoteWorkspace(host=server.url, working_dir=str(tmp_path))
        made.append(Conversation(agent=_agent(), workspace=workspace, **kwargs))
        return made[-1]

    yield build
    for conversation in made:
        conversation.close()
    if server is not None:
        server.__exit__(None, None, None)


@pytest.fixture(params=["memory", "sqlite"])
def make_local(request, tmp_path):
    """Like make, for what only a local conversation offers (set stats, agent state, skills)."""

    def build(**kwargs):
        if request.param == "sqlite":
            kwargs.setdefault("persistence_dir", tmp_path)
        return Conversation(agent=_agent(), workspace=str(tmp_path), **kwargs)

    return build


# -- OpenHands' test_fork.py, ported ----------------------------------------------------


class TestOpenHandsForkTests:
    def test_fork_creates_new_id(self, make):
        """A fork has a distinct id, a uuid.UUID (OpenHands: test_fork_creates_new_id)."""
        src = make()
        fork = src.fork()
        assert fork.id != src.id
        assert isinstance(fork.id, uuid.UUID)

    def test_fork_with_explicit_id(self, make):
        """An explicit UUID conversation_id is honoured (OpenHands: test_fork_with_explicit_id)."""
        custom_id = uuid.uuid4()
        src = make()
        fork = src.fork(conversation_id=custom_id)
        assert fork.id == custom_id

    def test_fork_copies_events(self, make):
        """Events appended with state.events.append appear in the fork."""
        src = make()
        src.state.events.append(_msg("evt-1", "hello"))
        src.state.events.append(_msg("evt-2", "world"))
        fork = src.fork()
        fork_ids = [e.id for e in fork.state.events]
        assert "evt-1" in fork_ids
        assert "evt-2" in fork_ids

    def test_fork_source_unmodified(self, make):
        """Appending to the fork does not grow the source."""
        src = make()
        src.state.events.append(_msg("src-evt"))
        src_event_count = len(src.state.events)
        fork = src.fork()
        fork.state.events.append(_msg("fork-only"))
        assert len(src.state.events) == src_event_count
        assert len(fork.state.events) == src_event_count + 1

    def test_fork_execution_status_is_idle(self, make):
        """A fork starts idle, compared with OpenHands' enum name."""
        fork = make().fork()
        assert fork.state.execution_status == ConversationExecutionStatus.IDLE

    def test_fork_resets_metrics_by_default(self, make):
        """get_combined_metrics() of a fresh fork costs nothing."""
        fork = make().fork()
        assert fork.state.stats.get_combined_metrics().accumulated_cost == 0

    def test_fork_preserves_metrics_when_requested(self, make_local):
        """reset_metrics=False carries the cost over (stats set through a run's path)."""
        src = make_local()
        usage = Usage(accumulated_cost=1.5, prompt_tokens=3)
        src._commit(lambda s: s._replace(stats=s.stats.record("test", usage)))
        combined = src.fork(reset_metrics=False).state.stats.get_combined_metrics()
        assert combined.accumulated_cost == pytest.approx(1.5)
        assert combined.accumulated_token_usage.prompt_tokens == 3

    def test_fork_copies_agent_state(self, make_local):
        """agent_state is carried to the fork; changing the fork's leaves the source alone."""
        src = make_local()
        src.update_agent_state({"key": "value"})
        fork = src.fork()
        assert fork.state.agent_state == {"key": "value"}
        fork.update_agent_state({"new": True})
        assert "new" not in src.state.agent_state

    def test_fork_accepts_replacement_agent(self, make_local):
        """fork(agent=) replaces the agent on the fork only."""
        src = make_local()
        alt = Agent(llm=LLM(model="gpt-4o", api_key="other-key", usage_id="alt"), tools=[])
        fork = src.fork(agent=alt)
        assert fork.agent.llm.model == "gpt-4o"
        assert src.agent.llm.model == "gpt-4o-mini"

    def test_fork_with_tags_and_title(self, make):
        """Tags pass through; title is the 'title' tag."""
        fork = make().fork(tags={"env": "test"}, title="My Fork")
        assert fork.state.tags.get("env") == "test"
        assert fork.state.tags.get("title") == "My Fork"

    def test_fork_shares_workspace(self, make):
        """The fork uses the source's workspace."""
        src = make()
        assert src.fork().workspace.working_dir == src.workspace.working_dir

    def test_fork_persisted_events_survive_reload(self, tmp_path):
        """A persisted fork reopens by its UUID id with its events (OpenHands: same name)."""
        evt_id_1, evt_id_2 = uuid.uuid4().hex, uuid.uuid4().hex
        src = Conversation(agent=_agent(), persistence_dir=tmp_path, workspace=str(tmp_path))
        src.state.events.append(_msg(evt_id_1, "hello"))
        src.state.events.append(_msg(evt_id_2, "world"))
        fork = src.fork()
        fork_id = fork.id
        assert len(fork.state.events) == 2
        fork.close()
        resumed = Conversation(
            agent=_agent(),
            persistence_dir=tmp_path,
            workspace=str(tmp_path),
            conversation_id=fork_id,
        )
        assert resumed.id == fork_id
        assert [e.id for e in resumed.state.events] == [evt_id_1, evt_id_2]


# -- OpenHands' documented "What gets copied" table -------------------------------------


class TestWhatGetsCopied:
    def test_every_row(self, make_local):
        """Events, agent, workspace, agent state, skills, stats, tags, status, id: as documented."""
        src = make_local(tags={"owner": "ci"})
        src.send_message("Analyse the sales report.")
        src.update_agent_state({"step": 2})
        src.activate_skill("sql")
        src._commit(lambda s: s._replace(stats=s.stats.record("test", Usage(accumulated_cost=2))))
        fork = src.fork()
        assert list(fork.state.events) == list(src.state.events)  # events
        assert fork.agent == src.agent  # agent (shared: it is immutable)
        assert fork.workspace == src.workspace  # workspace shared
        assert fork.state.agent_state == {"step": 2}  # agent state
        assert fork.state.activated_knowledge_skills == ("sql",)  # skills
        assert fork.state.stats.get_combined_metrics().accumulated_cost == 0  # reset
        assert dict(fork.state.tags) == {}  # tags: fresh from kwargs
        assert fork.state.execution_status is ExecutionStatus.IDLE
        assert isinstance(fork.id, uuid.UUID) and fork.id != src.id


# -- item 2: nothing is silently lost -----------------------------------------------------


class TestOpenHandsIdiomsOnSnapshots:
    def test_events_append_records_on_the_conversation(self, make):
        """conversation.state.events.append(e) records e (callbacks and store included)."""
        seen = []
        src = make(callbacks=[seen.append])
        snapshot = src.state
        event = _msg("e-1")
        snapshot.events.append(event)
        assert list(src.state.events) == [event] and seen == [event]
        assert len(snapshot.events) == 0  # the snapshot itself never changes

    def test_events_extend_records_every_event(self, make):
        """state.events.extend([...]) records them all, in order."""
        src = make()
        src.state.events.extend([_msg("a"), _msg("b")])
        assert [e.id for e in src.state.events] == ["a", "b"]

    @pytest.mark.parametrize(
        ("write", "hint"),
        [
            (lambda s: s.tags.__setitem__("k", "v"), "set_tag"),
            (lambda s: s.tags.update({"k": "v"}), "set_tag"),
            (lambda s: s.tags.pop("k"), "set_tag"),
            (lambda s: s.agent_state.__setitem__("k", 1), "update_agent_state"),
            (lambda s: s.agent_state.update({"k": 1}), "update_agent_state"),
            (lambda s: s.agent_state.clear(), "update_agent_state"),
        ],
    )
    def test_mapping_writes_raise_naming_the_call(self, make_local, write, hint):
        """Writing to state.tags / state.agent_state raises TypeError naming the right call."""
        src = make_local()
        with pytest.raises(TypeError, match=hint):
            write(src.state)
        assert dict(src.state.tags) == {} and dict(src.state.agent_state) == {}

    def test_setting_a_field_raises(self, make_local):
        """state.field = value raises AttributeError pointing at the methods."""
        src = make_local()
        with pytest.raises(AttributeError, match="immutable snapshot"):
            src.state.agent_state = {"k": 1}  # type: ignore[misc]


# -- item 3: names -----------------------------------------------------------------------


class TestOpenHandsNames:
    def test_execution_status_is_the_same_enum(self):
        """ConversationExecutionStatus is ExecutionStatus, with OpenHands' eight values."""
        assert ConversationExecutionStatus is ExecutionStatus
        assert {s.value for s in ConversationExecutionStatus} == {
            "idle",
            "running",
            "paused",
            "waiting_for_confirmation",
            "finished",
            "error",
            "stuck",
            "deleting",
        }
        assert ConversationExecutionStatus.FINISHED.is_terminal()
        assert not ConversationExecutionStatus.IDLE.is_terminal()

    def test_stuck_detection_is_accepted(self, make_local):
        """Conversation(stuck_detection=...) takes OpenHands' flag."""
        assert make_local(stuck_detection=False).state.execution_status is ExecutionStatus.IDLE
        with pytest.raises(TypeError):
            make_local(stuck_detection="yes")


# -- item 6: the visualiser ------------------------------------------------------------


class TestVisualizer:
    def test_explicit_visualizer_prints_each_event(self, make):
        """visualizer=instance prints every recorded event."""
        out = io.StringIO()
        src = make(visualizer=DefaultConversationVisualizer(file=out, width=60))
        src.send_message("Analyse the sales report.")
        assert "Message from User" in out.getvalue()
        assert "Analyse the sales report." in out.getvalue()

    def test_a_class_is_instantiated_and_none_turns_it_off(self, make_local):
        """visualizer=Class makes one; visualizer=None shows nothing."""

        class Recorder(ConversationVisualizerBase):
            made = []

            def __init__(self):
                super().__init__()
                self.events = []
                Recorder.made.append(self)

            def on_event(self, event):
                self.events.append(event)

        source = make_local(visualizer=Recorder)
        source.send_message("hi")
        assert message_texts(Recorder.made[0].events) == ["hi"]
        assert Recorder.made[0].conversation_stats is not None
        make_local(visualizer=None).send_message("quiet")
        assert len(Recorder.made) == 1
        fork = source.fork()  # as OpenHands: a new visualiser of the same kind
        fork.send_message("on the fork")
        assert message_texts(Recorder.made[1].events) == ["on the fork"]
        assert message_texts(Recorder.made[0].events) == ["hi"]

    def test_default_is_on_in_a_terminal_and_off_when_piped(self, tmp_path):
        """Left out, the visualiser prints when stdout is a terminal, nothing when piped."""
        script = (
            "import cowconv\n"
            "c = cowconv.Conversation(agent=cowconv.Agent(llm=cowconv.LLM(model='m')),"
            " workspace='.')\n"
            "c.send_message('hello there')\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        piped = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
        )
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout == ""
        import pty

        leader, follower = pty.openpty()
        try:
            shown = subprocess.run(
                [sys.executable, "-c", script],
                stdout=follower,
                stderr=subprocess.PIPE,
                env=env,
                timeout=120,
            )
            os.close(follower)
            output = b""
            while True:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
        finally:
            os.close(leader)
        assert shown.returncode == 0, shown.stderr
        assert b"hello there" in output and b"Message from User" in output


# -- item 7: LLM settings from the environment -------------------------------------------


class TestLLMFromEnv:
    def test_reads_the_openhands_variables(self, monkeypatch):
        """LLM.from_env() reads LLM_MODEL, LLM_API_KEY, LLM_BASE_URL (and other fields)."""
        monkeypatch.setenv("LLM_MODEL", "openai/gpt-4o")
        monkeypatch.setenv("LLM_API_KEY", "sk-env")
        monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
        monkeypatch.setenv("LLM_TIMEOUT", "12.5")
        llm = LLM.from_env()
        assert (llm.model, llm.api_key.get_secret_value(), llm.base_url, llm.timeout) == (
            "openai/gpt-4o",
            "sk-env",
            "http://127.0.0.1:9/v1",
            12.5,
        )
        assert LLM.load_from_env() == llm  # OpenHands' name

    def test_explicit_arguments_win_and_plain_llm_ignores_the_environment(self, monkeypatch):
        """Arguments beat variables; LLM(...) itself never reads the environment."""
        monkeypatch.setenv("LLM_MODEL", "openai/from-env")
        monkeypatch.setenv("LLM_API_KEY", "sk-env")
        assert LLM.from_env(model="openai/explicit").model == "openai/explicit"
        assert LLM(model="openai/explicit").api_key is None

    def test_bad_value_names_the_variable(self, monkeypatch):
        """A value that does not fit is a ValueError naming the variable."""
        monkeypatch.setenv("LLM_MODEL", "m")
        monkeypatch.setenv("LLM_TIMEOUT", "soon")
        with pytest.raises(ValueError, match="LLM_TIMEOUT"):
            LLM.from_env()

    def test_empty_variables_are_unset(self, monkeypatch):
        """An empty LLM_BASE_URL leaves the default, like os.getenv(..., None) in the examples."""
        monkeypatch.setenv("LLM_MODEL", "m")
        monkeypatch.setenv("LLM_BASE_URL", "")
        assert LLM.from_env().base_url is None


class TestAliases:
    def test_openhands_names_are_ours(self):
        """LocalConversation is Conversation; RemoteWorkspace is a Workspace that needs a host."""
        import cowconv

        assert cowconv.LocalConversation is Conversation
        assert issubclass(cowconv.RemoteWorkspace, cowconv.Workspace)
        remote = cowconv.RemoteWorkspace(host="http://127.0.0.1:9", working_dir="/tmp")
        assert remote.is_remote
        with pytest.raises(ValueError):
            cowconv.RemoteWorkspace(working_dir="/tmp")


class TestLineage:
    def test_whole_fork_names_no_event_but_keeps_the_count(self, make):
        """As OpenHands: forked_from_event_id is None for a whole fork; the count is kept."""
        src = make()
        src.send_message("one")
        second = src.send_message("two")
        whole = src.fork()
        early = src.fork(from_event_id=second.id)
        assert whole.state.forked_from_event_id is None
        assert whole.state.forked_from_event_count == 3  # the system prompt, "one", "two"
        assert whole.state.forked_from_conversation_id == src.id
        assert early.state.forked_from_event_id == second.id


class TestRemoteClientTolerance:
    def test_reads_an_openhands_shaped_conversation_info(self):
        """Unknown fields are ignored; a missing event_count or unreadable stats are tolerated."""
        from cowconv.backends.remote import read_info

        info = read_info(
            {
                "id": "0b9f8f4e-2f5c-4a37-9e4b-5d3c1b3e2a10",
                "execution_status": "waiting_for_confirmation",
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
                "stats": {"usage_to_metrics": {"agent": {"accumulated_cost": 1}}},
                "workspace": {"kind": "LocalWorkspace"},
                "persistence_dir": "workspace/conversations",
                "leaf_event_id": "evt-7",
                "confirmation_policy": {"kind": "NeverConfirm"},
            }
        )
        assert info.id == uuid.UUID("0b9f8f4e-2f5c-4a37-9e4b-5d3c1b3e2a10")
        assert info.event_count is None and info.leaf_event_id == "evt-7"
        assert info.execution_status is ConversationExecutionStatus.WAITING_FOR_CONFIRMATION

    def test_still_refuses_a_summary_without_an_id(self):
        """A summary without its required fields is an error, not a silent default."""
        from pydantic import ValidationError

        from cowconv.backends.remote import read_info

        with pytest.raises(ValidationError):
            read_info({"execution_status": "idle"})


class TestIdsEverywhere:
    def test_a_uuid_or_its_text_is_the_same_id(self, make):
        """Conversation(conversation_id=UUID) and fork(conversation_id=str(UUID)) give UUID ids."""
        chosen, fork_id = uuid.uuid4(), uuid.uuid4()
        src = make(conversation_id=chosen)
        assert src.id == chosen and isinstance(src.id, uuid.UUID)
        fork = src.fork(conversation_id=str(fork_id))
        assert fork.id == fork_id and {fork.id: "f"}[fork_id] == "f"
        assert f"{fork.id}" == str(fork_id)
        assert fork.state.forked_from_conversation_id == chosen

    def test_other_string_ids_keep_working(self, make):
        """A non-UUID id stays the string it was given."""
        src = make(conversation_id="my-conversation")
        fork = src.fork(conversation_id="my-fork-1")
        assert (src.id, fork.id) == ("my-conversation", "my-fork-1")
        assert fork.state.forked_from_conversation_id == "my-conversation"

    def test_resume_and_load_by_uuid(self, tmp_path):
        """A store takes a UUID wherever it takes an id."""
        from cowconv import SQLiteStore

        src = Conversation(agent=_agent(), workspace=".", persistence_dir=tmp_path)
        src.send_message("hi")
        with SQLiteStore(tmp_path / "cowconv.db") as store:
            assert store.exists(src.id) and store.info(src.id).id == src.id
            assert Conversation.resume(store, src.id).id == src.id


class TestRemoteFork:
    def test_agent_is_not_supported(self, tmp_path):
        """RemoteConversation.fork(agent=...) raises NotImplementedError saying "not supported"."""
        with BackgroundServer(create_app()) as server:
            workspace = RemoteWorkspace(host=server.url, working_dir=str(tmp_path))
            src = Conversation(agent=_agent(), workspace=workspace)
            assert isinstance(src, RemoteConversation)
            with pytest.raises(NotImplementedError, match="not supported"):
                src.fork(agent=_agent())
            with pytest.raises(RemoteError) as raised:
                src.fork(from_event_id="nope")
            assert raised.value.status_code == 404
            src.close()

    def test_fork_body_is_openhands(self, tmp_path):
        """The fork request body is id, title, tags, reset_metrics, from_event_id (UUID id)."""
        import httpx

        with BackgroundServer(create_app()) as server:
            workspace = RemoteWorkspace(host=server.url, working_dir=str(tmp_path))
            src = Conversation(agent=_agent(), workspace=workspace)
            first = src.send_message("one")
            fork_id = uuid.uuid4()
            body = {
                "id": str(fork_id),
                "title": "T",
                "tags": {"k": "v"},
                "reset_metrics": True,
                "from_event_id": first.id,
            }
            answer = httpx.post(f"{server.url}/api/conversations/{src.id}/fork", json=body)
            assert answer.status_code == 201
            assert answer.json()["id"] == str(fork_id)
            assert answer.json()["forked_from_event_id"] == first.id
            assert RemoteConversation.attach(server.url, fork_id).state.tags["k"] == "v"
            src.close()
