"""LLMProfileStore and FallbackStrategy: profiles on disk, and calls that fall back to them
when the primary model fails (two stub servers, through litellm's real HTTP path)."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cowconv import (
    LLM,
    FallbackStrategy,
    FileMissingError,
    InvalidValueError,
    LLMError,
    LLMProfileStore,
)
from cowconv.testing import StubLLMServer, StubReply

HELLO = [{"role": "user", "content": "Hello"}]

# A profile as OpenHands' SDK 1.58.2 writes it (its example 37's fast.json): settings cowconv's
# LLM does not have, and the masked key of a save without secrets.
OPENHANDS_PROFILE = {
    "model": "gpt-5.5",
    "api_key": "**********",
    "openrouter_site_url": "https://docs.all-hands.dev/",
    "openrouter_app_name": "OpenHands",
    "num_retries": 5,
    "retry_multiplier": 8.0,
    "retry_min_wait": 8,
    "retry_max_wait": 64,
    "timeout": 300,
    "temperature": 0.0,
    "max_output_tokens": 64000,
    "stream": False,
    "drop_params": True,
    "caching_prompt": True,
    "log_completions": False,
    "log_completions_folder": "logs/completions",
    "reasoning_effort": "high",
    "usage_id": "fast",
    "litellm_extra_body": {},
}

profile_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True).filter(
    lambda name: not name.endswith(".json")
)
llms = st.builds(
    LLM,
    model=st.sampled_from(["openai/gpt-4o", "anthropic/claude-sonnet-4-5", "gemini/flash"]),
    api_key=st.none()
    | st.text(alphabet="abcdefXYZ0123-", max_size=20).map(lambda text: f"sk-secret-{text}"),
    base_url=st.none() | st.just("http://127.0.0.1:9/v1"),
    usage_id=st.text(alphabet="abcxyz-_", min_size=1, max_size=10),
    temperature=st.none() | st.floats(0, 2),
    max_output_tokens=st.none() | st.integers(1, 100_000),
    num_retries=st.integers(0, 9),
    stream=st.booleans(),
    fallback_strategy=st.none()
    | st.builds(FallbackStrategy, fallback_llms=st.lists(st.sampled_from(["a", "b"]), max_size=2)),
)


class TestSaveAndLoad:
    @given(llm=llms, name=profile_names)
    def test_saved_with_secrets_loads_equal(self, tmp_path_factory, llm, name):
        """A profile saved with its secrets loads back equal to the LLM saved."""
        store = LLMProfileStore(tmp_path_factory.mktemp("profiles"))
        store.save(name, llm, include_secrets=True)
        assert store.load(name) == llm
        assert store.list() == [f"{name}.json"]

    @given(llm=llms)
    def test_saved_without_secrets_loads_equal_but_keyless(self, tmp_path_factory, llm):
        """A default save masks the key: the file never holds it, the profile loads keyless."""
        store = LLMProfileStore(tmp_path_factory.mktemp("profiles"))
        store.save("main", llm)
        text = (store.base_dir / "main.json").read_text()
        if llm.api_key is not None:
            assert llm.api_key.get_secret_value() not in text
            assert json.loads(text)["api_key"] == "**********"
        assert store.load("main") == llm.model_copy(update={"api_key": None})

    def test_profile_file_is_private(self, tmp_path):
        """A profile file (it may hold a key) is readable by its owner only."""
        store = LLMProfileStore(tmp_path)
        store.save("main", LLM(model="openai/gpt-4o", api_key="sk-1"), include_secrets=True)
        mode = stat.S_IMODE(os.stat(tmp_path / "main.json").st_mode)
        assert mode & 0o077 == 0

    def test_openhands_profile_loads(self, tmp_path, caplog):
        """A profile OpenHands' SDK wrote loads: its masked key as no key, the settings cowconv
        has kept, the others left out with a warning naming them."""
        (tmp_path / "fast.json").write_text(json.dumps(OPENHANDS_PROFILE))
        with caplog.at_level(logging.WARNING, logger="cowconv.llm"):
            fast = LLMProfileStore(tmp_path).load("fast")
        assert (fast.model, fast.usage_id, fast.temperature, fast.api_key) == (
            "gpt-5.5",
            "fast",
            0.0,
            None,
        )
        assert (fast.num_retries, fast.timeout, fast.max_output_tokens) == (5, 300, 64000)
        assert "drop_params" in caplog.text and "reasoning_effort" in caplog.text

    def test_name_with_json_suffix_is_the_same_profile(self, tmp_path):
        """'fast.json' and 'fast' name one profile, as in OpenHands' SDK."""
        store = LLMProfileStore(tmp_path)
        store.save("fast.json", LLM(model="openai/gpt-4o-mini"))
        assert store.load("fast").model == "openai/gpt-4o-mini"

    @pytest.mark.parametrize("name", ["", "../escape", ".hidden", "a/b", "x" * 65, "sp ace"])
    def test_bad_names_are_refused(self, tmp_path, name):
        """Names that could leave the directory, hide a file or are empty are refused."""
        store = LLMProfileStore(tmp_path)
        with pytest.raises(InvalidValueError, match="invalid profile name"):
            store.save(name, LLM(model="openai/gpt-4o"))
        assert list(tmp_path.iterdir()) == []

    def test_missing_profile_is_file_not_found(self, tmp_path):
        """Loading a profile that is not there is a FileNotFoundError naming those there."""
        store = LLMProfileStore(tmp_path)
        store.save("fast", LLM(model="openai/gpt-4o"))
        with pytest.raises(FileNotFoundError, match="fast.json") as raised:
            store.load("slow")
        assert isinstance(raised.value, FileMissingError)

    def test_a_broken_file_is_a_clear_error(self, tmp_path):
        """A profile file that is not JSON, or not an LLM, is an InvalidValueError."""
        (tmp_path / "bad.json").write_text("{not json")
        (tmp_path / "list.json").write_text("[1, 2]")
        (tmp_path / "nomodel.json").write_text('{"temperature": 1}')
        store = LLMProfileStore(tmp_path)
        for name in ("bad", "list", "nomodel"):
            with pytest.raises(InvalidValueError, match=name):
                store.load(name)


class TestManage:
    def test_rename_and_delete(self, tmp_path):
        """rename() moves a profile to a free name; delete() removes it (and is quiet after)."""
        store = LLMProfileStore(tmp_path)
        store.save("a", LLM(model="openai/gpt-4o"))
        store.save("b", LLM(model="openai/gpt-4o-mini"))
        with pytest.raises(InvalidValueError, match="already exists"):
            store.rename("a", "b")
        store.rename("a", "c")
        assert store.list() == ["b.json", "c.json"]
        assert store.load("c").model == "openai/gpt-4o"
        with pytest.raises(FileMissingError):
            store.rename("a", "d")
        store.delete("c")
        store.delete("c")
        assert store.list() == ["b.json"]

    def test_max_profiles_counts_new_names_only(self, tmp_path):
        """With max_profiles a new profile over the limit is refused; replacing one is not."""
        store = LLMProfileStore(tmp_path)
        store.save("a", LLM(model="openai/gpt-4o"), max_profiles=1)
        store.save("a", LLM(model="openai/gpt-4o-mini"), max_profiles=1)
        with pytest.raises(InvalidValueError, match="limit is 1"):
            store.save("b", LLM(model="openai/gpt-4o"), max_profiles=1)
        assert store.list() == ["a.json"]

    def test_summaries_read_files_without_building_llms(self, tmp_path):
        """list_summaries() reports name, model, base URL and whether a key is in the file,
        and skips files that are not profiles."""
        store = LLMProfileStore(tmp_path)
        store.save("keyed", LLM(model="openai/gpt-4o", api_key="sk-1"), include_secrets=True)
        store.save("masked", LLM(model="openai/gpt-4o", api_key="sk-1", base_url="http://h/v1"))
        (tmp_path / "broken.json").write_text("{")
        assert store.list_summaries() == [
            {"name": "keyed", "model": "openai/gpt-4o", "base_url": None, "api_key_set": True},
            {
                "name": "masked",
                "model": "openai/gpt-4o",
                "base_url": "http://h/v1",
                "api_key_set": False,
            },
        ]


def _stub_llm(stub: StubLLMServer, model: str, **settings: object) -> LLM:
    return LLM(
        model=model,
        base_url=stub.base_url,
        api_key="stub-key",
        num_retries=0,
        retry_min_wait=0,
        usage_id=model.rpartition("/")[2],
        **settings,  # type: ignore[arg-type]
    )


class TestFallback:
    def test_falls_back_to_the_next_server(self, tmp_path):
        """A primary that answers 500 is replaced by the fallback profile's server; the answer,
        its model and its tokens are recorded, counted in the primary's metrics."""
        with StubLLMServer() as primary_server, StubLLMServer() as backup_server:
            primary_server.script(StubReply.error(500))
            backup_server.script(StubReply.text("From the backup."))
            store = LLMProfileStore(tmp_path)
            store.save("backup", _stub_llm(backup_server, "openai/backup"), include_secrets=True)
            primary = _stub_llm(
                primary_server,
                "openai/primary",
                fallback_strategy=FallbackStrategy(
                    fallback_llms=["backup"], profile_store_dir=tmp_path
                ),
            )
            response = primary.completion(HELLO)
            assert (response.content, response.model) == ("From the backup.", "openai/backup")
            assert [u.model for u in primary.metrics.token_usages] == ["openai/backup"]
            assert primary.metrics.prompt_tokens == response.prompt_tokens > 0
            assert len(primary_server.requests) == len(backup_server.requests) == 1
            # Per call: the next one starts with the primary again.
            primary_server.script(StubReply.text("Primary is back."))
            again = primary.completion(HELLO)
            assert (again.content, again.model) == ("Primary is back.", "openai/primary")
            assert len(backup_server.requests) == 1

    def test_no_fallback_for_errors_another_model_cannot_fix(self, tmp_path):
        """A 401 (bad key) is raised at once: the fallback is not asked."""
        with StubLLMServer() as primary_server, StubLLMServer() as backup_server:
            primary_server.script(StubReply.error(401, "bad key"))
            store = LLMProfileStore(tmp_path)
            store.save("backup", _stub_llm(backup_server, "openai/backup"), include_secrets=True)
            strategy = FallbackStrategy(fallback_llms=["backup"], profile_store_dir=str(tmp_path))
            primary = _stub_llm(primary_server, "openai/primary", fallback_strategy=strategy)
            with pytest.raises(LLMError, match="401"):
                primary.completion(HELLO)
            assert backup_server.requests == []

    def test_when_all_fail_the_primary_error_is_raised(self, tmp_path, caplog):
        """Every fallback failing (or missing) raises the primary's error; each is logged."""
        with StubLLMServer() as primary_server, StubLLMServer() as backup_server:
            primary_server.script(StubReply.error(503, "primary down"))
            backup_server.script(StubReply.error(500, "backup down"))
            store = LLMProfileStore(tmp_path)
            store.save("backup", _stub_llm(backup_server, "openai/backup"), include_secrets=True)
            strategy = FallbackStrategy(
                fallback_llms=["missing", "backup"], profile_store_dir=str(tmp_path)
            )
            primary = _stub_llm(primary_server, "openai/primary", fallback_strategy=strategy)
            with caplog.at_level(logging.WARNING, logger="cowconv.llm"):
                with pytest.raises(LLMError, match="primary down"):
                    primary.completion(HELLO)
            assert "'missing' cannot be loaded" in caplog.text
            assert "backup down" in caplog.text
            assert primary.metrics.token_usages == ()

    def test_strategy_survives_a_profile_round_trip(self, tmp_path):
        """An LLM with a fallback strategy saves and loads with it (the JSON OpenHands writes)."""
        store = LLMProfileStore(tmp_path)
        strategy = FallbackStrategy(fallback_llms=["b", "c"], profile_store_dir=Path(tmp_path))
        store.save("a", LLM(model="openai/gpt-4o", fallback_strategy=strategy))
        data = json.loads((tmp_path / "a.json").read_text())
        assert data["fallback_strategy"] == {
            "fallback_llms": ["b", "c"],
            "profile_store_dir": str(tmp_path),
        }
        assert store.load("a").fallback_strategy == strategy

    @settings(max_examples=15)
    @given(chain=st.integers(0, 3), failing=st.integers(0, 5))
    def test_the_first_healthy_model_answers_and_is_recorded(
        self, tmp_path_factory, chain, failing
    ):
        """With the primary and `chain` fallbacks on one stub whose first `failing` answers
        are 503s, the model asked in position `failing` answers (or, past the chain, the
        primary's error is raised), and the answer records which model it was."""
        directory = tmp_path_factory.mktemp("profiles")
        with StubLLMServer() as server:
            store = LLMProfileStore(directory)
            names = [f"fb{index}" for index in range(chain)]
            for name in names:
                store.save(name, _stub_llm(server, f"openai/{name}"), include_secrets=True)
            strategy = FallbackStrategy(fallback_llms=names, profile_store_dir=str(directory))
            primary = _stub_llm(server, "openai/primary", fallback_strategy=strategy)
            server.script(*[StubReply.error(503)] * failing, StubReply.text("healthy"))
            models = ["openai/primary", *(f"openai/{name}" for name in names)]
            if failing < len(models):
                response = primary.completion(HELLO)
                assert response.model == models[failing]
                assert [u.model for u in primary.metrics.token_usages] == [models[failing]]
                assert len(server.requests) == failing + 1
            else:
                with pytest.raises(LLMError, match="503"):
                    primary.completion(HELLO)
                assert len(server.requests) == len(models)


class TestSwitchProfile:
    def test_conversation_switches_to_a_saved_profile(self, tmp_path):
        """As example 44: after switch_profile(name) the next run calls the profile's server,
        and the stats count its calls under 'profile:<name>'."""
        from cowconv import Agent, Conversation, Tool

        with StubLLMServer() as first, StubLLMServer() as second:
            store = LLMProfileStore(tmp_path / "profiles")
            store.save("gpt", _stub_llm(second, "openai/gpt"), include_secrets=True)
            agent = Agent(llm=_stub_llm(first, "openai/first"), tools=[Tool(name="terminal")])
            conversation = Conversation(agent=agent, workspace=tmp_path, visualizer=None)
            conversation.send_message("Say hello in one sentence.")
            conversation.run()
            conversation.switch_profile("gpt", profile_store=store)
            assert conversation.agent.llm.model == "openai/gpt"
            conversation.send_message("Say goodbye in one sentence.")
            conversation.run()
            assert (len(first.requests), len(second.requests)) == (1, 1)
            assert set(conversation.state.stats.usage_to_metrics) == {"first", "profile:gpt"}
            with pytest.raises(FileNotFoundError):
                conversation.switch_profile("missing", profile_store=store)
            assert conversation.agent.llm.model == "openai/gpt"


class TestStrategyIsAValue:
    def test_an_llm_with_a_strategy_pickles_and_copies(self):
        """Branch workers pickle and deep-copy agents: an LLM with a fallback strategy survives
        both, equal and with an equal hash."""
        import copy
        import pickle

        llm = LLM(
            model="openai/gpt-4o",
            fallback_strategy=FallbackStrategy(fallback_llms=["a", "b"], profile_store_dir="/p"),
        )
        for copied in (pickle.loads(pickle.dumps(llm)), copy.deepcopy(llm)):
            assert copied == llm and hash(copied) == hash(llm)
            assert copied.fallback_strategy.fallback_llms == ("a", "b")
