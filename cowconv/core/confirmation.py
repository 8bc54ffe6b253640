"""``NeverConfirm``: the confirmation policy cowconv runs under (OpenHands' SDK's name).

OpenHands' SDK can ask a user to confirm an agent's actions before they run
(``AlwaysConfirm``, ``ConfirmRisky``). cowconv has no confirmation mode: every
action runs. ``NeverConfirm`` says so, so code written for OpenHands' SDK that
passes it (``StartConversationRequest(confirmation_policy=NeverConfirm())``,
``set_confirmation_policy(NeverConfirm())``) runs unchanged; another policy
is refused where it is given (the agent server answers 422).

>>> NeverConfirm().model_dump()
{'kind': 'NeverConfirm'}
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from cowconv.core.frozen import CheckedModel

__all__ = ["NeverConfirm"]


class NeverConfirm(CheckedModel):
    """Confirm no action: run each one as the agent asks (the only policy cowconv has).

    >>> NeverConfirm().kind
    'NeverConfirm'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    kind: Literal["NeverConfirm"] = "NeverConfirm"
