"""Delegation's visualiser: titles that say which agent speaks to which (OpenHands' ``delegate``).

>>> DelegationVisualizer(name="Orchestrator")
DelegationVisualizer(name='Orchestrator')

OpenHands' SDK's older ``delegate`` tool (spawn, then delegate to named
sub-agents) is not in cowconv; its task tool (:mod:`cowconv.tools.task`)
starts sub-agents.
"""

from cowconv.tools.delegate.visualizer import DelegationVisualizer

__all__ = ["DelegationVisualizer"]
