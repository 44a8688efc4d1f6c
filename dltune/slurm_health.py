"""`dltune audit --slurm-drain`: drain this Slurm node when a check marked critical fails, and resume
it once healthy — but only a drain dltune set itself (its reason starts with "dltune:"). `error` and
`skip` never drain: a bug in dltune must not take a fleet out of service."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dltune.model import Result, Status
from dltune.probes.runner import CommandRunner

REASON_PREFIX = "dltune:"


@dataclass(frozen=True)
class NodeState:
    state: str  # e.g. "IDLE", "IDLE+DRAIN", "MIXED"
    reason: str  # "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state


def critical_failures(results: Sequence[Result]) -> list[str]:
    return sorted({r.id for r in results if r.status is Status.FAIL and r.critical})


def parse_node(text: str) -> NodeState:
    """`scontrol show node -o NAME`: State=... and Reason=<text> [user@time]."""
    state = re.search(r"\bState=(\S+)", text)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?(?= \w+=|$)", text.strip())
    return NodeState(state.group(1) if state else "", reason.group(1).strip() if reason else "")


def apply(node: str, results: Sequence[Result], runner: CommandRunner) -> str:
    """Drain or resume as the results say; returns what was done (for the log)."""
    shown = runner.run(["scontrol", "show", "node", "-o", node])
    if not shown.ok:
        raise RuntimeError(
            f"scontrol show node {node} failed: {shown.stderr.strip() or shown.stdout.strip()}"
        )
    current = parse_node(shown.stdout)
    failing = critical_failures(results)
    if failing:
        reason = f"{REASON_PREFIX} {' '.join(failing)}"
        if current.drained and current.reason == reason:
            return f"{node} stays drained ({reason})"
        argv = ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]
        done = f"drained {node}: {reason}"
    elif current.drained and current.reason.startswith(REASON_PREFIX):
        argv = ["scontrol", "update", f"nodename={node}", "state=resume"]
        done = f"resumed {node} (dltune had drained it: {current.reason})"
    else:
        return f"{node} left as it is ({current.state}{', ' + current.reason if current.reason else ''})"
    changed = runner.run(argv, timeout=15.0)
    if not changed.ok:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {changed.stderr.strip() or changed.stdout.strip()}")
    return done
