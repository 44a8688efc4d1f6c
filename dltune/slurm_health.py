"""`dltune audit --slurm-drain`: drain this Slurm node when a check marked critical fails, and resume
it once healthy — but only a drain dltune set itself (its reason starts with "dltune:"). `error` and
`skip` never drain: a bug in dltune must not take a fleet out of service. A node that an admin (or
Slurm itself) took out of service — drained, down, failed, in maintenance, with a reason that is not
dltune's — is never touched: its reason is not rewritten, and it is not resumed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dltune.model import Result, Status
from dltune.probes.runner import CommandRunner

REASON_PREFIX = "dltune:"
# Node state flags (scontrol's State=BASE+FLAG+...) that mean someone took the node out of service.
OUT_OF_SERVICE = frozenset(
    {"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "FAILING", "MAINT", "REBOOT_ISSUED"}
)


@dataclass(frozen=True)
class NodeState:
    state: str  # e.g. "IDLE", "IDLE+DRAIN", "MIXED"
    reason: str  # "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state

    @property
    def out_of_service(self) -> bool:
        return bool(OUT_OF_SERVICE & set(self.state.upper().replace("*", "").split("+")))

    @property
    def held_by_someone_else(self) -> bool:
        """Out of service for a reason dltune did not give: the admin's (or Slurm's) to lift."""
        return self.out_of_service and not self.reason.startswith(REASON_PREFIX)


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
    if current.held_by_someone_else:
        return (
            f"{node} left as it is: out of service by someone else ({current.state}"
            f"{', ' + current.reason if current.reason else ', no reason'})"
            + (f"; critical failures not recorded in Slurm: {' '.join(failing)}" if failing else "")
        )
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
