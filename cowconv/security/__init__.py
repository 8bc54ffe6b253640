"""Security analyzers and confirmation policies, under OpenHands' ``openhands.sdk.security`` names.

The analyzers rate each tool call of a step; the conversation's confirmation
policy decides from those ratings whether the step waits for the user
(``conversation.set_security_analyzer(...)``,
``conversation.set_confirmation_policy(...)``). See ``docs/confirmation.md``.

>>> from cowconv.security import ConfirmRisky, PatternSecurityAnalyzer, SecurityRisk
>>> from cowconv import ActionEvent
>>> call = ActionEvent(tool_name="terminal", tool_call_id="c1", arguments={"command": "sudo rm x"})
>>> ConfirmRisky().should_confirm(PatternSecurityAnalyzer().security_risk(call))
True
"""

from cowconv.core import analyzers as _analyzers
from cowconv.core.analyzers import (
    EnsembleSecurityAnalyzer,
    LLMSecurityAnalyzer,
    PatternSecurityAnalyzer,
    PolicyRailSecurityAnalyzer,
    RailDecision,
    SecurityAnalysis,
    SecurityAnalyzerBase,
)
from cowconv.core.oversight import SecurityAnalysisEvent
from cowconv.core.security import (
    AlwaysConfirm,
    ConfirmationPolicyBase,
    ConfirmRisky,
    NeverConfirm,
    SecurityRisk,
)

__all__ = [
    "AlwaysConfirm",
    "ConfirmRisky",
    "ConfirmationPolicyBase",
    "EnsembleSecurityAnalyzer",
    "LLMSecurityAnalyzer",
    "NeverConfirm",
    "PatternSecurityAnalyzer",
    "PolicyRailSecurityAnalyzer",
    "RailDecision",
    "SecurityAnalysis",
    "SecurityAnalysisEvent",
    "SecurityAnalyzerBase",
    "SecurityRisk",
]


def __getattr__(name: str) -> object:
    """OpenHands' module-level names its own tests read (rail and detector ids, the default
    patterns, the helpers ``_evaluate_rail``, ``_normalize``, ``_extract_content``): kept in
    :mod:`cowconv.core.analyzers`."""
    helpers = ("_evaluate_rail", "_normalize", "_extract_content", "_extract_exec_content")
    if name.startswith(("RAIL_", "DET_", "DEFAULT_")) or name in helpers:
        try:
            return getattr(_analyzers, name)
        except AttributeError:
            pass
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
