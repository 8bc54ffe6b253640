"""Writes the cowconv 0.1 fixtures in this directory, with cowconv 0.1 (main at 52c20eb).

Run with an interpreter where cowconv 0.1 imports (not this tree's cowconv):
``/work/venvs/cc312/bin/python tests/data/make_legacy_0_1.py``. The files it writes
are committed; the tests load them with today's cowconv (old data must still load).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import cowconv
from cowconv import (
    LLM,
    ActionEvent,
    Agent,
    AgentErrorEvent,
    CondensationEvent,
    Conversation,
    ImageContent,
    LLMSummarizingCondenser,
    MessageEvent,
    ObservationEvent,
    PauseEvent,
    SQLiteStore,
    SystemPromptEvent,
    TextContent,
    Tool,
)
from cowconv.testing import StubLLMServer, StubReply

HERE = Path(__file__).resolve().parent


def every_kind() -> list[dict]:
    events = [
        SystemPromptEvent(
            system_prompt="Be brief.",
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "terminal",
                        "description": "Run.",
                        "parameters": {"type": "object"},
                    },
                }
            ],
        ),
        MessageEvent(source="user", role="user", content="List files."),
        MessageEvent(
            source="user",
            role="user",
            content=(
                TextContent(text="Look:"),
                ImageContent(image_urls=("https://example.com/a.png",)),
            ),
        ),
        ActionEvent(
            tool_name="terminal",
            tool_call_id="c1",
            arguments={"command": "ls"},
            thought="Listing.",
            llm_response_id="r1",
        ),
        ActionEvent(
            tool_name="terminal",
            tool_call_id="c2",
            arguments={"command": "pwd"},
            llm_response_id="r1",
        ),
        ActionEvent(
            tool_name="terminal",
            tool_call_id="c3",
            arguments={"__invalid_json__": "{not json"},
            llm_response_id="r2",
        ),
        ActionEvent(tool_name="other", tool_call_id="c4", arguments={"x": [1, {"y": None}]}),
        ObservationEvent(
            tool_name="terminal",
            tool_call_id="c1",
            output="a.py\n",
            exit_code=0,
            extra={"timed_out": False, "output_bytes": 5, "cwd": "/tmp"},
        ),
        ObservationEvent(
            tool_name="terminal",
            tool_call_id="c3",
            output="Error: bad",
            extra={"error": "invalid_arguments"},
        ),
        ObservationEvent(tool_name="other", tool_call_id="c4", output="done"),
        AgentErrorEvent(error="tool 'terminal' crashed", tool_call_id="c2", tool_name="terminal"),
        AgentErrorEvent(error="LLM call failed"),
        PauseEvent(),
        CondensationEvent(
            forgotten_event_ids=("e1", "e2"),
            summary="Listed.",
            summary_offset=1,
            llm_response_id="r9",
        ),
        CondensationEvent(),
        MessageEvent(source="agent", role="assistant", content="Done."),
    ]
    return [json.loads(event.model_dump_json()) for event in events]


def main() -> None:
    assert cowconv.__version__ == "0.1.0", cowconv.__version__
    (HERE / "events-0.1.json").write_text(json.dumps(every_kind(), indent=1) + "\n")
    with StubLLMServer() as stub, tempfile.TemporaryDirectory() as workspace:
        stub.script(
            StubReply.tool_call("terminal", command="cd / && echo hi"),
            StubReply.tool_calls_of([("terminal", {"command": "pwd"}), ("terminal", "{bad")]),
            StubReply.text("All done."),
            StubReply.text("Summary of the start."),
            StubReply.text("Second answer."),
        )
        llm = LLM(**stub.llm_settings(), retry_min_wait=0, retry_max_wait=0)
        agent = Agent(
            llm=llm,
            tools=[Tool(name="terminal")],
            condenser=LLMSummarizingCondenser(
                llm=llm.model_copy(update={"usage_id": "condenser"}), max_size=8, keep_first=2
            ),
        )
        path = HERE / "store-0.1.sqlite"
        path.unlink(missing_ok=True)
        with SQLiteStore(path) as store:
            conversation = Conversation(
                agent=agent,
                workspace=workspace,
                store=store,
                conversation_id="legacy-source",
                visualizer=None,
            )
            conversation.send_message("Say hi from /.")
            conversation.run()
            conversation.send_message("And again.")
            conversation.run()
            fork = conversation.fork(conversation_id="legacy-fork", title="Fork")
            fork.send_message("In the fork.")
            (HERE / "export-0.1.json").write_text(store.export_conversation("legacy-source"))
            kinds = [event.kind for event in conversation.state.events]
            print(kinds, file=sys.stderr)
            conversation.close()
            fork.close()


if __name__ == "__main__":
    main()
