"""What kind of failure an error is, in the small vocabulary OpenHands' SDK publishes.

A :class:`~cowconv.ConversationErrorEvent` carries an
:class:`ErrorClassification` so that a client (a UI, an orchestrator) can
react to a failed run without reading provider text: ask for new settings
(``auth``, ``quota``, ``config``), retry later (``rate_limit``,
``transient``), or report a bug (``internal``). :func:`classify_error`
derives it from the error's code (usually its exception class name) and,
for generic codes, from its detail text; the detail itself is never copied
into the classification.

>>> classify_error("LLMAuthenticationError").kind
<FailureKind.AUTH: 'auth'>
>>> c = classify_error("APIError", "Error code: 429 - rate limit reached")
>>> c.kind.value, c.retryable, c.user_action
('rate_limit', True, 'retry')
>>> classify_error("SomethingElse", "no idea").kind.value
'unknown'
"""

from enum import StrEnum
from typing import Literal, TypeAlias

from cowconv.core.kinds import FrozenValue

__all__ = ["ErrorClassification", "FailureAction", "FailureKind", "classify_error"]


class FailureKind(StrEnum):
    """The kinds of failure (OpenHands' ``FailureKind``)."""

    AUTH = "auth"
    QUOTA = "quota"
    RATE_LIMIT = "rate_limit"
    CONFIG = "config"
    TRANSIENT = "transient"
    AGENT_ACTION = "agent_action"
    INTERNAL = "internal"
    UNKNOWN = "unknown"


FailureAction: TypeAlias = Literal["none", "retry", "settings"]
"""What the user can do about a failure."""


class ErrorClassification(FrozenValue):
    """A failure's kind, whether trying again may help, and what the user can do.

    >>> ErrorClassification(kind="quota", retryable=False, user_action="settings").kind
    <FailureKind.QUOTA: 'quota'>
    """

    kind: FailureKind
    retryable: bool
    user_action: FailureAction = "none"
    error_id: str | None = None


def _of(kind: FailureKind, action: FailureAction = "none") -> ErrorClassification:
    retryable = kind in (FailureKind.RATE_LIMIT, FailureKind.TRANSIENT) or (
        kind is FailureKind.AGENT_ACTION and action == "retry"
    )
    return ErrorClassification(kind=kind, retryable=retryable, user_action=action)


# Codes whose name alone says what happened: checked before the detail text.
_BY_CODE: dict[str, tuple[FailureKind, FailureAction]] = {
    "LLMAuthenticationError": (FailureKind.AUTH, "settings"),
    "ACPAuthRequired": (FailureKind.AUTH, "settings"),
    "LLMRateLimitError": (FailureKind.RATE_LIMIT, "retry"),
    "MaxBudgetReached": (FailureKind.QUOTA, "settings"),
    "LLMBadRequestError": (FailureKind.CONFIG, "settings"),
    "NotFoundError": (FailureKind.CONFIG, "settings"),
    "LLMContextWindowExceedError": (FailureKind.AGENT_ACTION, "retry"),
    "LLMMalformedConversationHistoryError": (FailureKind.AGENT_ACTION, "retry"),
    "MaxIterationsReached": (FailureKind.AGENT_ACTION, "none"),
    "KeyError": (FailureKind.INTERNAL, "none"),
    "AssertionError": (FailureKind.INTERNAL, "none"),
    "AttributeError": (FailureKind.INTERNAL, "none"),
    "TypeError": (FailureKind.INTERNAL, "none"),
}

# Phrases in the detail of a generic error, in the order they are tried.
_BY_DETAIL: tuple[tuple[tuple[str, ...], FailureKind, FailureAction], ...] = (
    (
        (
            "invalid api key",
            "incorrect api key",
            "api key is missing",
            "unauthorized",
            "authentication required",
            "error code: 401",
        ),
        FailureKind.AUTH,
        "settings",
    ),
    (
        ("insufficient balance", "daily quota", "usage limit", "budget has been exceeded"),
        FailureKind.QUOTA,
        "settings",
    ),
    (("rate limit", "error code: 429"), FailureKind.RATE_LIMIT, "retry"),
    (
        ("model not found", "provider not provided", "invalid params"),
        FailureKind.CONFIG,
        "settings",
    ),
    (
        (
            "timeout",
            "timed out",
            "connection error",
            "connection closed",
            "service temporarily unavailable",
            "bad gateway",
            "error code: 5",
        ),
        FailureKind.TRANSIENT,
        "retry",
    ),
)

# Generic wrapper codes: transient unless their detail said otherwise.
_TRANSIENT_CODES = frozenset(
    {
        "LLMServiceUnavailableError",
        "LLMTimeoutError",
        "LLMNoResponseError",
        "ReadTimeout",
        "TimeoutError",
        "HTTPStatusError",
        "RequestError",
        "APIError",
        "OpenAIError",
        "BadGatewayError",
    }
)


def classify_error(code: str, detail: str = "") -> ErrorClassification:
    """The :class:`ErrorClassification` of an error with ``code`` and ``detail``.

    >>> classify_error("KeyError", "invalid api key").kind.value  # the code decides first
    'internal'
    >>> classify_error("OpenAIError", "Connection error.").kind.value
    'transient'
    """
    known = _BY_CODE.get(code)
    if known is not None:
        return _of(*known)
    text = detail.casefold()
    for phrases, kind, action in _BY_DETAIL:
        if any(phrase in text for phrase in phrases):
            return _of(kind, action)
    if code in _TRANSIENT_CODES:
        return _of(FailureKind.TRANSIENT, "retry")
    return _of(FailureKind.UNKNOWN)
