"""``BrowserToolSet``: OpenHands' browser tool set, which cowconv has no browser to back.

>>> BrowserToolSet.name
'browser_tool_set'
>>> BrowserToolSet.is_usable()
False
>>> BrowserToolSet.create()
[]

OpenHands' SDK gives an agent fourteen browser tools (navigate, click,
type...) driving a Chromium it starts; when that browser cannot start, its
``BrowserToolSet.create`` logs a warning and answers no tools, and the agent
works on with the rest. cowconv runs no browser, so its tool set always
answers that way: an agent that asks for ``Tool(name="browser_tool_set")``
(OpenHands' default agent outside CLI mode does) runs, without browser
tools, and the model is never offered one. The warning is logged once per
process on the ``cowconv.tools.browser_use`` logger.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from cowconv.agent.tools import ToolDefinition, register_tool
from cowconv.core.schema import Action, Observation

__all__ = ["BrowserToolSet"]

logger = logging.getLogger("cowconv.tools.browser_use")

_warned = threading.Event()


class BrowserToolSet(ToolDefinition[Action, Observation]):
    """OpenHands' browser tool set: registered, and without tools in cowconv (no browser).

    >>> from cowconv import LLM, Agent, Tool
    >>> agent = Agent(llm=LLM(model="openai/gpt-4o"), tools=[Tool(name="browser_tool_set")])
    >>> BrowserToolSet.create(None)
    []
    """

    name = "browser_tool_set"
    #: One line for catalogues of tools (OpenHands' SDK's attribute).
    catalog_description: ClassVar[str] = (
        "Browse the web: navigate pages, click, type and read content."
    )

    @classmethod
    def is_usable(cls) -> bool:
        """Whether the browser tools can run here: never in cowconv (it starts no browser)."""
        return False

    @classmethod
    def create(  # type: ignore[override]
        cls, conv_state: Any = None, params: Mapping[str, Any] | None = None, **options: Any
    ) -> list[ToolDefinition[Any, Any]]:
        """No tools, as OpenHands' SDK answers when its browser cannot start (a warning logged).

        Settings (OpenHands' executor options) are accepted and unused.
        """
        if not _warned.is_set():
            _warned.set()
            logger.warning(
                "Browser tools are unavailable: cowconv runs no browser. Continuing without them."
            )
        return []


register_tool(BrowserToolSet.name, BrowserToolSet)
