"""Fixtures shared by the test suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# The suite starts hundreds of processes that make an LLM and never call it; each would
# import litellm in the background (seconds of CPU). tests/test_llm.py turns it back on
# where the preload itself is tested.
os.environ.setdefault("COWCONV_PRELOAD_LITELLM", "0")

from cowconv import LLM, Agent, Tool
from cowconv.testing import StubLLMServer


@pytest.fixture
def stub() -> Iterator[StubLLMServer]:
    """An OpenAI-compatible stub LLM server on 127.0.0.1, stopped after the test."""
    with StubLLMServer() as server:
        yield server


@pytest.fixture
def caching_stub() -> Iterator[StubLLMServer]:
    """A stub that reports cached tokens for message prefixes it has seen, like a provider."""
    with StubLLMServer(prompt_cache=True) as server:
        yield server


@pytest.fixture
def stub_llm(stub: StubLLMServer) -> LLM:
    """An LLM pointed at the stub, retrying without waiting."""
    return LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)


@pytest.fixture
def stub_agent(stub_llm: LLM) -> Agent:
    """An agent with the terminal tool, thinking through the stub."""
    return Agent(llm=stub_llm, tools=[Tool(name="terminal")])
