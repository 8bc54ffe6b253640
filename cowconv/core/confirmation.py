"""``NeverConfirm``: the confirmation policy cowconv runs under (OpenHands' SDK's name).

OpenHands' SDK can ask a user to confirm an agent's actions before they run
(``AlwaysConfirm``, ``ConfirmRisky``). cowconv has no confirmation mode: every
action runs. ``NeverConfirm`` says so, so code written for OpenHands' SDK that
passes it (``StartConversationRequest(confirmation_policy=NeverConfirm())``,
``set_confirmation_policy(NeverConfirm())``) runs unchanged; another policy
is refused where cowconv's agent server is given it (a 422). The policies
themselves, ``NeverConfirm`` included, live in :mod:`cowconv.core.security`
(a :class:`~cowconv.RemoteConversation` sends any of them to an OpenHands
agent server); this module keeps the name.

>>> NeverConfirm().model_dump()
{'kind': 'NeverConfirm'}
"""

from __future__ import annotations

from cowconv.core.security import NeverConfirm

__all__ = ["NeverConfirm"]
