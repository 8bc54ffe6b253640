"""The agent server's settings (OpenHands' ``Config`` names, plus cowconv's security settings).

:func:`~cowconv.agent_server.create_app` builds one from its arguments and
keeps it in ``app.state.config``.

>>> Config(session_api_keys=["s3cret"]).session_api_key
's3cret'
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from cowconv.agent_server.security import DEFAULT_MAX_BODY_SIZE

__all__ = ["Config"]


class Config(BaseModel):
    """What the server was started with.

    ``session_api_keys``: the keys a client may send in ``X-Session-API-Key``
    (none: no key needed; cowconv takes one). ``static_files_path`` and
    ``secret_key`` are OpenHands' settings, taken and unused (cowconv serves
    no static files and stores no encrypted secrets). ``host``,
    ``allowed_hosts``, ``allowed_origins``, ``allow_unauthenticated`` and
    ``max_body_size`` are cowconv's security settings (``docs/server.md``).

    ``named_conversations``: whether a conversation id may be any text
    (``"sales-report"``) or must be a UUID, as on OpenHands' agent server,
    where any other id in a path, in ``ids`` or in a create or fork body is a
    422. The default is OpenHands' rule; :func:`~cowconv.agent_server.create_app`
    allows names unless told otherwise.

    >>> Config().named_conversations, Config(named_conversations=True).named_conversations
    (False, True)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_api_keys: list[str] = []
    static_files_path: Path | None = None
    secret_key: SecretStr | None = None
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    allow_unauthenticated: bool = False
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    named_conversations: bool = False

    @property
    def session_api_key(self) -> str | None:
        """The one session key cowconv checks (the first given), or ``None``."""
        return self.session_api_keys[0] if self.session_api_keys else None
