"""Small helpers of the agent server (OpenHands' ``openhands.agent_server.utils`` names).

>>> utc_now().tzinfo is not None
True
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utc_now"]


def utc_now() -> datetime:
    """Now, as an aware UTC datetime (the time stamps of conversations)."""
    return datetime.now(UTC)
