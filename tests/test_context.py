"""AgentContext and skills: what OpenHands' SDK adds to the system prompt and user messages."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

import cowconv
from cowconv import LLM, Agent, Conversation, Message, SystemPromptEvent, Tool
from cowconv.agent.prompt import system_prompt_event
from cowconv.agent_server import BackgroundServer
from cowconv.backends.wire import agent_from_openhands, agent_to_openhands
from cowconv.context import (
    AgentContext,
    KeywordTrigger,
    PathTrigger,
    Skill,
    SkillValidationError,
    TaskTrigger,
    load_memory,
    load_project_skills,
    load_skills_from_dir,
)
from cowconv.core.secrets import LookupSecret, SecretSource, StaticSecret
from cowconv.testing import StubLLMServer
from tests.conftest import open_backend
from tests.strategies import texts

GRUMPY = "When you see this message, reply like a grumpy cat."
MAGIC = 'IMPORTANT! The user has said the magic word "flarglebargle".'
MAGIC_DETAIL = "You must only respond with a message telling them how smart they are."


def _context(**changes: object) -> AgentContext:
    """Example 03's context: a repo skill, a keyword skill, both suffixes."""
    settings: dict[str, object] = {
        "skills": [
            Skill(name="repo.md", content=GRUMPY),
            Skill(
                name="flarglebargle",
                content=f"{MAGIC}\n{MAGIC_DETAIL}",
                trigger=KeywordTrigger(keywords=["flarglebargle"]),
            ),
        ],
        "system_message_suffix": "Always finish your response with the word 'yay!'",
        "user_message_suffix": "The first character of your response should be 'I'",
        **changes,
    }
    return AgentContext.model_validate(settings)


@pytest.fixture
def stub() -> Iterator[StubLLMServer]:
    with StubLLMServer() as server:
        yield server


def _user_texts(request_messages: list[dict[str, object]]) -> list[str]:
    return [str(m["content"]) for m in request_messages if m["role"] == "user"]


class TestTriggers:
    @given(
        keyword=st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8),
        before=st.text(string.ascii_letters + " ,.!?\n", max_size=12),
        after=st.text(string.ascii_letters + " ,.!?\n", max_size=12),
        upper=st.booleans(),
    )
    def test_a_keyword_between_separators_matches_in_any_case(
        self, keyword: str, before: str, after: str, upper: bool
    ):
        """A keyword set off by non-alphanumerics matches, whatever its case and context."""
        skill = Skill(name="s", content="x", trigger=KeywordTrigger(keywords=[keyword]))
        word = keyword.upper() if upper else keyword
        assert skill.match_trigger(f"{before} {word}! {after}") == keyword

    @given(
        keyword=st.text(string.ascii_lowercase, min_size=1, max_size=8),
        left=st.sampled_from(["", "a", "9"]),
        right=st.sampled_from(["", "b", "0"]),
    )
    def test_a_keyword_inside_a_word_does_not_match(self, keyword: str, left: str, right: str):
        """``git`` does not fire on ``github``: only whole tokens match."""
        skill = Skill(name="s", content="x", trigger=TaskTrigger(triggers=[keyword]))
        message = f"{left}{keyword}{right}"
        expected = keyword if not left and not right else None
        assert skill.match_trigger(message) == expected

    def test_repo_and_path_skills_never_match_a_message(self):
        """Only keyword and task triggers activate on messages."""
        assert Skill(name="r", content="x").match_trigger("r x") is None
        rule = Skill(name="p", content="x", trigger=PathTrigger(paths=["*.py"]))
        assert rule.match_trigger("p *.py") is None
        assert rule.disable_model_invocation is True


class TestSkill:
    def test_json_is_openhands_shape_and_round_trips(self):
        """A skill dumps every field OpenHands' 1.58.2 dumps, and loads back equal."""
        skill = Skill(name="k", content="K", trigger=KeywordTrigger(keywords=["flarg"]))
        data = skill.model_dump(mode="json")
        assert data == {
            "name": "k",
            "content": "K",
            "trigger": {"type": "keyword", "keywords": ["flarg"]},
            "source": None,
            "mcp_tools": None,
            "inputs": [],
            "is_agentskills_format": False,
            "version": "1.0.0",
            "description": None,
            "license": None,
            "compatibility": None,
            "metadata": None,
            "allowed_tools": None,
            "disable_model_invocation": False,
            "resources": None,
        }
        assert Skill.model_validate_json(json.dumps(data)) == skill

    def test_a_task_skill_with_variables_asks_for_them(self):
        """OpenHands appends its 'ask for the variables' text to a task skill that has some."""
        skill = Skill(name="t", content="T ${x}", trigger=TaskTrigger(triggers=["/t"]))
        assert skill.content.endswith(
            "ask the user to provide them first before the agent can proceed with the task."
        )
        assert Skill.model_validate(skill.model_dump()).content == skill.content

    def test_frozen(self):
        """A skill is immutable, like the agent holding it."""
        skill = Skill(name="s", content="x")
        with pytest.raises(ValidationError):
            skill.content = "y"  # type: ignore[misc]


_skills = st.lists(
    st.builds(
        Skill,
        name=st.text(string.ascii_letters + "-_.", min_size=1, max_size=10),
        content=texts,
        trigger=st.none()
        | st.builds(KeywordTrigger, keywords=st.lists(texts, min_size=1, max_size=3))
        | st.builds(TaskTrigger, triggers=st.lists(texts, min_size=1, max_size=3)),
        description=st.none() | texts,
    ),
    max_size=4,
    unique_by=lambda skill: skill.name,
)


class TestRoundTrip:
    @given(
        skills=_skills,
        suffix=st.none() | texts,
        user_suffix=st.none() | texts,
        when=st.none() | st.datetimes(timezones=st.timezones()) | texts,
    )
    def test_any_context_survives_json_and_says_the_same(
        self,
        skills: list[Skill],
        suffix: str | None,
        user_suffix: str | None,
        when: object,
    ):
        """A context dumped to JSON and loaded back (from text or from a dict) is equal and
        builds the same prompts."""
        context = AgentContext(
            skills=skills,
            system_message_suffix=suffix,
            user_message_suffix=user_suffix,
            current_datetime=when,
        )
        text = context.model_dump_json()
        for again in (
            AgentContext.model_validate_json(text),
            AgentContext.model_validate(json.loads(text)),
        ):
            assert again.get_system_message_suffix() == context.get_system_message_suffix()
            assert again.skills == context.skills


class TestMemory:
    @given(
        body=st.lists(st.text(string.ascii_letters + " -", max_size=40), max_size=60),
        budget=st.integers(min_value=120, max_value=2000),
    )
    def test_an_index_is_cut_from_the_top_to_fit_the_budget(
        self, body: list[str], budget: int, tmp_path_factory: pytest.TempPathFactory
    ):
        """The memory text fits the budget, keeps its header, and ends with the newest line."""
        work = tmp_path_factory.mktemp("memory")
        index = work / ".openhands" / "memory" / "MEMORY.md"
        index.parent.mkdir(parents=True)
        lines = [f"{n}: {text}" for n, text in enumerate(body)]
        index.write_text("\n".join(lines))
        memory = load_memory(work, char_budget=budget)
        if not lines:
            assert memory is None or "Project memory" not in memory
            return
        assert memory is not None
        project = memory[memory.index("# Project memory") :]
        assert len(project) <= budget
        assert project.splitlines()[-1] == lines[-1].strip() or len(lines[-1]) > budget // 2


class TestLoading:
    def test_skills_of_a_directory_by_kind(self, tmp_path: Path):
        """Repo, knowledge, task and AgentSkills skills load from their files; a bad one is
        skipped."""
        (tmp_path / "style.md").write_text("---\nname: style\n---\nUse tabs.\n")
        (tmp_path / "nested").mkdir()
        (tmp_path / "nested" / "deploy.md").write_text("---\ntriggers:\n- deploy\n---\nmake\n")
        (tmp_path / "release.md").write_text(
            "---\ninputs:\n- name: version\n  description: v\n---\nRelease ${version}\n"
        )
        (tmp_path / "broken.md").write_text("---\ntriggers: [unclosed\n---\nx\n")
        (tmp_path / "README.md").write_text("not a skill")
        (tmp_path / "pdf-tools").mkdir()
        (tmp_path / "pdf-tools" / "SKILL.md").write_text(
            "---\ndescription: Read PDFs\nallowed-tools: terminal file_editor\n---\nSteps.\n"
        )
        (tmp_path / "pdf-tools" / "scripts").mkdir()
        (tmp_path / "pdf-tools" / "scripts" / "run.sh").write_text("echo")
        repo, knowledge, agent = load_skills_from_dir(tmp_path)
        assert sorted(repo) == ["style"] and repo["style"].content == "Use tabs."
        assert sorted(knowledge) == ["nested/deploy", "release"]
        assert knowledge["nested/deploy"].trigger == KeywordTrigger(keywords=["deploy"])
        assert knowledge["release"].trigger == TaskTrigger(triggers=["/release"])
        assert [item.name for item in knowledge["release"].inputs] == ["version"]
        pdf = agent["pdf-tools"]
        assert pdf.is_agentskills_format and pdf.allowed_tools == ("terminal", "file_editor")
        assert pdf.resources is not None and pdf.resources.scripts == ("run.sh",)

    def test_a_skill_md_name_must_be_its_directory(self, tmp_path: Path):
        """Strict AgentSkills naming refuses a name other than the directory's."""
        (tmp_path / "tools").mkdir()
        (tmp_path / "tools" / "SKILL.md").write_text("---\nname: Other_Name\n---\nx")
        with pytest.raises(SkillValidationError, match="does not match directory"):
            Skill.load(tmp_path / "tools" / "SKILL.md")
        assert Skill.load(tmp_path / "tools" / "SKILL.md", strict=False).name == "Other_Name"

    def test_project_skills_from_the_workspace_and_the_git_root(self, tmp_path: Path):
        """AGENTS.md and .openhands/skills of the working directory and its git root; the
        working directory wins."""
        (tmp_path / ".git").mkdir()
        (tmp_path / "AGENTS.md").write_text("root agents")
        (tmp_path / ".openhands" / "skills").mkdir(parents=True)
        (tmp_path / ".openhands" / "skills" / "lint.md").write_text("root lint")
        work = tmp_path / "sub"
        (work / ".openhands" / "microagents").mkdir(parents=True)
        (work / ".openhands" / "microagents" / "lint.md").write_text("sub lint")
        (work / "CLAUDE.md").write_text("sub claude")
        skills = {skill.name: skill.content for skill in load_project_skills(work)}
        assert skills == {"claude": "sub claude", "agents": "root agents", "lint": "sub lint"}


class TestPrompts:
    def test_system_message_suffix_is_openhands_text(self):
        """The dynamic context has OpenHands' sections, in its order and words."""
        context = _context(secrets={"API_KEY": "k"}, current_datetime="2026-01-02T03:04")
        text = context.get_system_message_suffix()
        assert text is not None
        starts = [
            text.index(tag)
            for tag in (
                "<REPO_CONTEXT>",
                "[BEGIN context from [repo.md]]\n" + GRUMPY + "\n[END Context]",
                "<SKILLS>",
                "<name>flarglebargle</name>",
                "Always finish your response with the word 'yay!'",
                "<CUSTOM_SECRETS>",
                "* **$API_KEY**",
                "<CURRENT_DATETIME>\nThe current date and time is: 2026-01-02T03:04",
            )
        ]
        assert starts == sorted(starts)
        # A knowledge skill is listed (its first line describes it), not included.
        assert MAGIC_DETAIL not in text

    def test_user_message_suffix_is_openhands_text(self):
        """The knowledge block and the suffix, byte for byte as OpenHands 1.58.2 writes them."""
        skill = Skill(
            name="k", content="K", trigger=KeywordTrigger(keywords=["flarg"]), source="/s/k.md"
        )
        context = AgentContext(skills=[skill], user_message_suffix=" U ")
        added = context.get_user_message_suffix(Message(role="user", content="hi flarg"), [])
        assert added is not None
        assert added[1] == ["k"]
        assert added[0].text == (
            "<EXTRA_INFO>\n"
            'The following information has been included based on a keyword match for "flarg".\n'
            "It may or may not be relevant to the user's request.\n"
            "\nSkill location: /s/k.md\n"
            "(Use this path to resolve relative file references in the skill content below)\n"
            "\n\nK\n</EXTRA_INFO>\nU"
        )

    def test_claude_and_gemini_repo_skills_only_for_their_models(self):
        """A repo skill named claude reaches Claude models only (OpenHands' model gating)."""
        context = AgentContext(
            skills=[Skill(name="claude", content="CLAUDE ONLY")], current_datetime=None
        )
        assert "CLAUDE ONLY" in (context.get_system_message_suffix("anthropic/claude-x") or "")
        assert context.get_system_message_suffix("openai/gpt-4o") is None


class TestConversation:
    def test_the_llm_receives_repo_skills_suffixes_and_a_triggered_skill_once(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        """Through litellm to a stub: the system message carries the repo skill and suffix;
        the matching user message carries the knowledge skill, and only the first time."""
        agent = Agent(llm=LLM(**stub.llm_settings()), agent_context=_context())
        conversation = Conversation(agent=agent, workspace=tmp_path)
        for text in ("Hey are you a grumpy cat?", "flarglebargle!", "flarglebargle again"):
            conversation.send_message(text)
            conversation.run()
        last = stub.requests[-1].messages
        assert last[0]["role"] == "system"
        assert GRUMPY in last[0]["content"] and "'yay!'" in last[0]["content"]
        users = _user_texts(last)
        suffix = "The first character of your response should be 'I'"
        assert all(text.endswith(suffix) for text in users)
        assert [MAGIC in text for text in users] == [False, True, False]
        messages = [
            event
            for event in conversation.state.events
            if isinstance(event, cowconv.MessageEvent) and event.source == "user"
        ]
        assert [event.activated_skills for event in messages] == [(), ("flarglebargle",), ()]
        assert conversation.state.activated_knowledge_skills == ("flarglebargle",)
        prompts = [e for e in conversation.state.events if isinstance(e, SystemPromptEvent)]
        assert len(prompts) == 1 and prompts[0].dynamic_context is not None

    def test_a_fork_remembers_activated_skills_and_takes_a_new_context(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        """A fork shares what was activated; ``fork(agent=...)`` records its new prompt."""
        agent = Agent(llm=LLM(**stub.llm_settings()), agent_context=_context())
        source = Conversation(agent=agent, workspace=tmp_path)
        source.send_message("flarglebargle")
        fork = source.fork()
        event = fork.send_message("flarglebargle once more")
        assert event.activated_skills == ()
        other = agent.model_copy(
            update={"agent_context": _context(system_message_suffix="Sign as Bob.")}
        )
        swapped = source.fork(agent=other)
        swapped.send_message("hello")
        prompts = [e for e in swapped.state.events if isinstance(e, SystemPromptEvent)]
        assert len(prompts) == 2
        assert prompts[-1].dynamic_context is not None
        assert "Sign as Bob." in prompts[-1].dynamic_context.text
        assert all(
            "Sign as Bob." not in (e.dynamic_context.text if e.dynamic_context else "")
            for e in source.state.events
            if isinstance(e, SystemPromptEvent)
        )

    def test_a_skill_activated_by_hand_is_not_added_again(self, tmp_path: Path):
        """activate_skill() marks a skill as activated, as a message naming it would."""
        agent = Agent(llm=LLM(model="openai/gpt-4o"), agent_context=_context())
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.activate_skill("flarglebargle")
        assert conversation.send_message("flarglebargle").activated_skills == ()

    def test_update_secrets_gives_the_terminal_a_secret(self, stub: StubLLMServer, tmp_path: Path):
        """update_secrets() on a local conversation: listed in the prompt, exported, hidden."""

        class FromCallable(SecretSource):
            def get_value(self) -> str:
                return "callable-based-secret"

        agent = Agent(llm=LLM(**stub.llm_settings()), tools=[Tool(name="terminal")])
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.update_secrets(
            {"SECRET_TOKEN": "my-secret-token-value", "SECRET_FUNCTION_TOKEN": FromCallable()}
        )
        conversation.send_message("just `echo $SECRET_TOKEN $SECRET_FUNCTION_TOKEN`")
        conversation.run()
        output = next(
            e.output for e in conversation.state.events if isinstance(e, cowconv.ObservationEvent)
        )
        assert output.strip() == "<secret-hidden> <secret-hidden>"
        system = str(stub.requests[0].messages[0]["content"])
        assert "* **$SECRET_TOKEN**" in system and "my-secret-token-value" not in system
        with pytest.raises(cowconv.InvalidTypeError):
            conversation.update_secrets({"BAD": 3})

    def test_no_workspace_given_is_openhands_default_made_if_missing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ):
        """Conversation(agent) works in workspace/project, made as OpenHands' SDK makes it;
        a workspace that is given must still exist."""
        monkeypatch.chdir(tmp_path)
        conversation = Conversation(Agent(llm=LLM(model="openai/gpt-4o")))
        assert (tmp_path / "workspace" / "project").is_dir()
        assert conversation.workspace.working_dir == "workspace/project"
        with pytest.raises(ValueError, match="does not exist"):
            Conversation(Agent(llm=LLM(model="openai/gpt-4o")), workspace=tmp_path / "missing")

    def test_project_skills_and_memory_from_the_workspace(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        """load_project_skills and load_memory read the workspace when the prompt is built."""
        (tmp_path / "AGENTS.md").write_text("Run tests with make check.")
        skills = tmp_path / ".openhands" / "skills"
        skills.mkdir(parents=True)
        (skills / "db.md").write_text("---\ntriggers: [database]\n---\nUse SQLite.\n")
        memory = tmp_path / ".openhands" / "memory" / "MEMORY.md"
        memory.parent.mkdir(parents=True)
        memory.write_text("- We use uv.\n")
        context = AgentContext(load_project_skills=True, load_memory=True)
        agent = Agent(llm=LLM(**stub.llm_settings()), agent_context=context)
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.send_message("Which database?")
        conversation.run()
        request = stub.requests[-1].messages
        system = str(request[0]["content"])
        assert "Run tests with make check." in system
        assert "<MEMORY_CONTEXT>" in system and "- We use uv." in system
        assert "Use SQLite." in _user_texts(request)[0]
        assert load_memory(tmp_path) is not None
        # The agent as stored keeps only what the user gave, not what the workspace held.
        assert conversation.state.agent.agent_context == context


class TestStorage:
    def test_agent_json_round_trips_and_matches_openhands_keys(self):
        """The agent's context dumps OpenHands' AgentContext keys and loads back equal."""
        agent = Agent(llm=LLM(model="openai/gpt-4o"), agent_context=_context())
        data = json.loads(agent.model_dump_json())
        assert set(data["agent_context"]) == {
            "skills",
            "system_message_suffix",
            "user_message_suffix",
            "load_user_skills",
            "load_public_skills",
            "marketplace_path",
            "registered_marketplaces",
            "load_project_skills",
            "load_memory",
            "disabled_skills",
            "secrets",
            "current_datetime",
        }
        assert Agent.model_validate_json(agent.model_dump_json()) == agent
        openhands = agent_to_openhands(data)
        assert openhands["agent_context"] == data["agent_context"]
        back = Agent.model_validate(agent_from_openhands(openhands))
        assert back.agent_context == agent.agent_context

    def test_sqlite_store_keeps_the_context(self, tmp_path: Path):
        """Another process reading the SQLite file finds the agent's context and the events."""
        backend = open_backend("sqlite", tmp_path, None)
        try:
            agent = Agent(llm=LLM(model="openai/gpt-4o"), agent_context=_context())
            conversation = backend.new(agent)
            conversation.send_message("flarglebargle")
            state = backend.reload(conversation)
        finally:
            backend.close()
        assert state.agent.agent_context == agent.agent_context
        assert [e.activated_skills for e in state.events if e.kind == "MessageEvent"] == [
            ("flarglebargle",)
        ]

    def test_agent_server_over_uvicorn_applies_the_context(
        self, agent_server: BackgroundServer, stub: StubLLMServer, tmp_path: Path
    ):
        """Sent to a real agent server, the agent keeps its context and the server applies it."""
        backend = open_backend("remote", tmp_path, agent_server)
        try:
            agent = Agent(llm=LLM(**stub.llm_settings()), agent_context=_context())
            conversation = backend.new(agent)
            conversation.send_message("flarglebargle!")
            conversation.run()
            state = backend.reload(conversation)
        finally:
            backend.close()
        assert state.agent.agent_context is not None
        assert state.agent.agent_context.skills == agent.agent_context.skills  # type: ignore[union-attr]
        users = _user_texts(stub.requests[-1].messages)
        assert MAGIC in users[0]
        message = next(e for e in state.events if e.kind == "MessageEvent")
        assert message.activated_skills == ("flarglebargle",)


class TestSecrets:
    def test_values_are_masked_in_json_unless_exposed(self):
        """Secret values never appear in a default dump; expose_secrets writes them."""
        context = AgentContext(
            secrets={"TOKEN": "t0k", "OTHER": StaticSecret(value=SecretStr("v"), description="d")}
        )
        masked = context.model_dump(mode="json")["secrets"]
        assert masked == {
            "TOKEN": "**********",
            "OTHER": {"description": "d", "value": "**********", "kind": "StaticSecret"},
        }
        exposed = context.model_dump(mode="json", context={"expose_secrets": True})
        again = AgentContext.model_validate(exposed)
        assert again.secrets is not None
        other = again.secrets["OTHER"]
        assert isinstance(other, StaticSecret) and other.get_value() == "v"
        assert context.get_secret_infos() == [
            {"name": "TOKEN", "description": None},
            {"name": "OTHER", "description": "d"},
        ]

    def test_the_terminal_gets_a_named_secret_and_hides_its_value(
        self, stub: StubLLMServer, tmp_path: Path
    ):
        """A command naming a secret runs with it exported; its value never reaches the model."""

        class Fetched(SecretSource):
            def get_value(self) -> str:
                return "fetched-value-42"

        context = AgentContext(
            secrets={"API_TOKEN": "t0k-secret-value", "OTHER_KEY": Fetched()},
            current_datetime=None,
        )
        agent = Agent(
            llm=LLM(**stub.llm_settings()), tools=[Tool(name="terminal")], agent_context=context
        )
        conversation = Conversation(agent=agent, workspace=tmp_path)
        conversation.send_message(
            "Run `echo $API_TOKEN > token.txt; echo got $API_TOKEN` and "
            "`echo ${#OTHER_KEY} $other_key $OTHER_KEY` and `echo [$UNNAMED]`"
        )
        conversation.run()
        assert (tmp_path / "token.txt").read_text() == "t0k-secret-value\n"
        outputs = [
            e.output for e in conversation.state.events if isinstance(e, cowconv.ObservationEvent)
        ]
        assert outputs[0].strip() == "got <secret-hidden>"
        assert outputs[1].strip() == "16 <secret-hidden>"
        assert outputs[2].strip() == "[]"
        sent = json.dumps([r.body for r in stub.requests])
        assert "t0k-secret-value" not in sent and "fetched-value-42" not in sent
        assert "$API_TOKEN" in str(stub.requests[0].messages[0]["content"])

    def test_a_source_of_unknown_kind_is_refused(self):
        """JSON naming no known secret source is an error, not a silent loss."""
        with pytest.raises(ValueError, match="no secret source of kind"):
            SecretSource.model_validate({"kind": "Nope"})
        lookup = SecretSource.model_validate({"kind": "LookupSecret", "url": "http://x"})
        assert isinstance(lookup, LookupSecret)


class TestErrors:
    def test_duplicate_skill_names_are_refused(self):
        """Two skills of one name are an error, as in OpenHands' SDK."""
        with pytest.raises(ValidationError, match="Duplicate skill name"):
            AgentContext(skills=[Skill(name="a", content="1"), Skill(name="a", content="2")])

    def test_disabled_skills_are_left_out(self):
        """disabled_skills drops the skills it names; unknown names are harmless."""
        context = _context(disabled_skills=["flarglebargle", "absent"])
        assert [skill.name for skill in context.skills] == ["repo.md"]

    def test_system_prompt_event_json_omits_an_absent_dynamic_context(self):
        """An agent without context records the prompt event as before (no new key)."""
        event = system_prompt_event(Agent(llm=LLM(model="openai/gpt-4o")))
        assert "dynamic_context" not in event.model_dump(mode="json")


class TestSecurityPolicyFile:
    def test_a_custom_policy_reaches_the_system_prompt(self, tmp_path):
        """A custom policy file's text follows the system prompt in the event the model gets."""
        from cowconv import LLM, Agent, Conversation

        policy = tmp_path / "policy.md"
        policy.write_text("# Custom Security Risk Policy\nEscalate network access.\n")
        agent = Agent(llm=LLM(model="openai/gpt-4o"), security_policy_filename=str(policy))
        assert agent.static_system_message.endswith("Escalate network access.\n")
        conversation = Conversation(agent=agent, workspace=tmp_path, visualizer=None)
        conversation.send_message("hi")
        prompt = conversation.state.events[0]
        assert "# Custom Security Risk Policy" in prompt.system_prompt
        default = Agent(llm=LLM(model="openai/gpt-4o"))
        assert default.security_policy_filename == "security_policy.j2"
        assert default.static_system_message == default.system_prompt
        assert (
            Agent(llm=LLM(model="m"), security_policy_filename=None).security_policy_filename == ""
        )

    def test_a_policy_file_that_cannot_be_read_is_a_clear_error(self, tmp_path):
        """A missing policy file is an InvalidValueError naming it, when the prompt is built."""
        from cowconv import LLM, Agent, InvalidValueError

        agent = Agent(llm=LLM(model="m"), security_policy_filename=str(tmp_path / "missing.md"))
        with pytest.raises(InvalidValueError, match="missing.md"):
            _ = agent.static_system_message
