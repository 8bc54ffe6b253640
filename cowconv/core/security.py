"""Security risk levels and confirmation policies, under OpenHands' SDK's names.

A confirmation policy says whether an action of a given :class:`SecurityRisk`
must wait for the user's confirmation before it runs. A conversation holds
one in its state (``conversation.set_confirmation_policy(...)``) and its runs
act on it: a step whose tool calls must wait records them and stops
``waiting_for_confirmation`` (see ``docs/confirmation.md``). A
:class:`~cowconv.RemoteConversation` sends it to its agent server, cowconv's or
OpenHands'.

Each policy dumps a ``kind`` naming its class, the JSON OpenHands' server
reads:

>>> AlwaysConfirm().model_dump()
{'kind': 'AlwaysConfirm'}
>>> ConfirmRisky().model_dump(mode="json")
{'threshold': 'HIGH', 'confirm_unknown': True, 'kind': 'ConfirmRisky'}
>>> type(ConfirmationPolicyBase.model_validate({"kind": "NeverConfirm"})).__name__
'NeverConfirm'
>>> ConfirmRisky(threshold=SecurityRisk.MEDIUM).should_confirm(SecurityRisk.LOW)
False
"""

from enum import StrEnum
from typing import ClassVar

from pydantic import field_validator

from cowconv._exceptions import InvalidValueError
from cowconv.core.kinds import Kinded

__all__ = [
    "AlwaysConfirm",
    "ConfirmRisky",
    "ConfirmationPolicyBase",
    "NeverConfirm",
    "SecurityRisk",
]

_RANK = {"LOW": 1, "MEDIUM": 2, "HIGH": 3}


class SecurityRisk(StrEnum):
    """How risky an action is (OpenHands' ``SecurityRisk``); ``UNKNOWN`` is not ordered.

    >>> SecurityRisk.HIGH.is_riskier(SecurityRisk.MEDIUM)
    True
    >>> SecurityRisk.LOW.is_riskier(SecurityRisk.LOW)
    True
    >>> SecurityRisk.LOW.is_riskier(SecurityRisk.LOW, reflexive=False)
    False
    """

    UNKNOWN = "UNKNOWN"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"

    def __str__(self) -> str:
        return self.name

    def is_riskier(self, other: "SecurityRisk", reflexive: bool = True) -> bool:
        """Whether this level is at least (``reflexive``) or strictly above ``other``.

        Comparing ``UNKNOWN`` with anything raises :class:`~cowconv.InvalidValueError`.

        >>> SecurityRisk.UNKNOWN.is_riskier(SecurityRisk.LOW)
        Traceback (most recent call last):
        ...
        cowconv._exceptions.InvalidValueError: UNKNOWN risk cannot be compared (UNKNOWN with LOW)
        """
        if self is SecurityRisk.UNKNOWN or other is SecurityRisk.UNKNOWN:
            raise InvalidValueError(f"UNKNOWN risk cannot be compared ({self} with {other})")
        mine, theirs = _RANK[self.value], _RANK[other.value]
        return mine >= theirs if reflexive else mine > theirs


class ConfirmationPolicyBase(Kinded):
    """Base of the confirmation policies: :meth:`should_confirm` decides.

    Validating through this class returns the policy its ``kind`` names.

    >>> ConfirmationPolicyBase.model_validate({"kind": "AlwaysConfirm"}).should_confirm()
    True
    """

    __kind_family__: ClassVar[bool] = True

    def should_confirm(self, risk: SecurityRisk = SecurityRisk.UNKNOWN) -> bool:
        """Whether an action of ``risk`` must wait for the user's confirmation."""
        raise NotImplementedError(f"{type(self).__name__} does not define should_confirm")


class AlwaysConfirm(ConfirmationPolicyBase):
    """Every action waits for confirmation.

    >>> AlwaysConfirm().should_confirm(SecurityRisk.LOW)
    True
    """

    def should_confirm(self, risk: SecurityRisk = SecurityRisk.UNKNOWN) -> bool:
        """Always ``True``."""
        return True


class NeverConfirm(ConfirmationPolicyBase):
    """No action waits for confirmation (the default policy).

    >>> NeverConfirm().should_confirm(SecurityRisk.HIGH)
    False
    """

    def should_confirm(self, risk: SecurityRisk = SecurityRisk.UNKNOWN) -> bool:
        """Always ``False``."""
        return False


class ConfirmRisky(ConfirmationPolicyBase):
    """Actions at or above ``threshold`` wait; ``UNKNOWN`` ones wait if ``confirm_unknown``.

    >>> policy = ConfirmRisky(threshold=SecurityRisk.MEDIUM, confirm_unknown=False)
    >>> [policy.should_confirm(r) for r in SecurityRisk]
    [False, False, True, True]
    >>> ConfirmRisky(threshold="UNKNOWN")
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for ConfirmRisky
    threshold
      Value error, a ConfirmRisky threshold cannot be UNKNOWN ...
    """

    threshold: SecurityRisk = SecurityRisk.HIGH
    confirm_unknown: bool = True

    @field_validator("threshold")
    @classmethod
    def _known_threshold(cls, value: SecurityRisk) -> SecurityRisk:
        if value is SecurityRisk.UNKNOWN:
            raise InvalidValueError("a ConfirmRisky threshold cannot be UNKNOWN")
        return value

    def should_confirm(self, risk: SecurityRisk = SecurityRisk.UNKNOWN) -> bool:
        """``confirm_unknown`` for ``UNKNOWN``, else whether ``risk`` reaches ``threshold``."""
        if risk is SecurityRisk.UNKNOWN:
            return self.confirm_unknown
        return SecurityRisk(risk).is_riskier(self.threshold)
