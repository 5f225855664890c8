"""Gating: whether an agent enforces the tool restrictions an arm puts on it (its deny list).

The room holds the gating probe (`caisson.gating.probe`). Moved here from caisson/gating/probe.py.
"""

from caisson.gating.probe import (GatingVerdict, discovered_tools, judge_gating, pick_probe_tool, probe_script,
                                  request_tools)

__all__ = ["GatingVerdict", "discovered_tools", "judge_gating", "pick_probe_tool", "probe_script", "request_tools"]
