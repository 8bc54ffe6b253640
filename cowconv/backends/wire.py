"""The HTTP API between a remote backend and the agent server: header names and change routes.

Both sides read this module: the server declares its change routes with
these paths, and :class:`~cowconv.backends.remote.RemoteBackend` sends each
named change (:mod:`cowconv.core.changes`) through :data:`CHANGE_ROUTES`,
one request per change.

>>> from cowconv.core.changes import SetTag
>>> route = CHANGE_ROUTES[SetTag]
>>> route.method, route.path, route.body(SetTag("owner", "ci"))
('PATCH', '/tags', {'owner': 'ci'})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cowconv.core.changes import ActivateSkill, AppendEvent, NavigateTo, SetTag, UpdateAgentState
from cowconv.core.frozen import thaw

__all__ = [
    "CHANGE_ROUTES",
    "SESSION_API_KEY_HEADER",
    "SYSTEM_PROMPT_AT_HEADER",
    "ChangeRoute",
]

SESSION_API_KEY_HEADER = "X-Session-API-Key"
"""The header carrying the agent server's session API key (OpenHands' SDK's name)."""

SYSTEM_PROMPT_AT_HEADER = "X-Cowconv-System-Prompt-At"
"""Set on a ``POST /messages`` answer when the server recorded the system prompt first:
its position in the history (the message follows it)."""


@dataclass(frozen=True)
class ChangeRoute:
    """Where a named change goes: ``method`` on the conversation's ``path``, with ``body``.

    >>> ChangeRoute("POST", "/skills", lambda change: {"name": change.name}).method
    'POST'
    """

    method: str
    path: str
    """Below ``/api/conversations/{id}``."""
    body: Callable[[Any], Any]
    """The JSON body of the request, from the change."""


CHANGE_ROUTES: Mapping[type, ChangeRoute] = {
    AppendEvent: ChangeRoute("POST", "/events", lambda c: c.event.model_dump(mode="json")),
    SetTag: ChangeRoute("PATCH", "/tags", lambda c: {c.key: c.value}),
    UpdateAgentState: ChangeRoute("PATCH", "/agent_state", lambda c: thaw(c.changes)),
    NavigateTo: ChangeRoute("POST", "/navigate", lambda c: {"event_id": c.event_id}),
    ActivateSkill: ChangeRoute("POST", "/skills", lambda c: {"name": c.name}),
}
"""Every change a remote conversation can make, by type (the server has a route for each)."""
