"""What `playbooks/remediate.yml` may do for a node dltune drained, decided from a fresh audit of it
(`dltune remedy`): pure judgement, no I/O.

- **resume**: no critical check fails now; the node is proven (`dltune check`) and resumed.
- **reapply**: every critical fail is configuration drift whose remedy names one of dltune's roles
  ("apply role slurm_tmpdir"): the play applies those roles, then proves the node.
- **reset_gpu**: a GPU in NVIDIA's RESET_GPU bucket (gpu.xid): `nvidia-smi -r -i <bus id>`, only when
  no job runs on the node, then the proof.
- **reboot**: a GPU in the RESTART_BM bucket: `scontrol reboot ASAP` with dltune's reason; the node
  comes back drained by dltune and the next run proves and resumes it.
- **hold**: anything else (an ECC fault, CONTACT_SUPPORT, a check whose remedy names no role), or a
  node dltune drained as flapping (only an operator resumes it): the node stays drained with its
  reason. One unknown cause holds the whole node: never half a fix.

Those are the audit's (``remedy_for``). What the node's state in Slurm allows comes first
(``remedy_for_node``), so that no node is told "resume" that is not dltune's to resume:

- **none**: remediation has nothing to do: the node is not drained, an admin (or Slurm) drained it,
  or its state is one dltune leaves alone (maintenance, rebooting, powered down, not responding).
- **unknown**: the node's state in Slurm could not be read: whether it is drained, and by whom, is
  not known, so nothing is done."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dltune.fleet.slurm_health import NodeState
from dltune.model import Result, Status
from dltune.records import record

# dltune's own tuning roles a remediation may apply again (the driver is left to its own playbook and
# its reboot handling: a driver change is not drift to re-apply blindly).
REAPPLIED_ROLES = frozenset({"dltune", "tmpfs_tmp", "data_disks", "nfs_multivip", "dl_env", "slurm_tmpdir"})
_ROLES_IN_REMEDY = re.compile(r"\bapply (?:the )?roles? ([a-z_]+(?:(?:, | and )[a-z_]+)*)")
_PCI_SUBJECT = re.compile(r"PCI:([0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2})(?:\.[0-7])?", re.IGNORECASE)
ORDER = ("hold", "reboot", "reset_gpu", "reapply", "resume")
# What the node's state in Slurm may answer instead (remedy_for_node).
NOT_REMEDIATED = ("none", "unknown")


@record(frozen=True)
class Remedy:
    action: str  # one of ORDER or NOT_REMEDIATED
    why: str
    checks: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()  # PCI bus ids for nvidia-smi -r -i

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "why": self.why,
            "checks": list(self.checks),
            "roles": list(self.roles),
            "gpus": list(self.gpus),
        }


def _one(result: Result) -> Remedy:
    """The remedy for one critical fail."""
    if result.id == "gpu.xid":
        buckets = set(result.evidence.get("buckets") or ())
        found = _PCI_SUBJECT.fullmatch(result.subject or "")
        if "RESTART_BM" in buckets:
            return Remedy("reboot", f"{result.subject}: NVIDIA's catalog says RESTART_BM", (result.id,))
        if "CONTACT_SUPPORT" not in buckets and "RESET_GPU" in buckets and found:
            return Remedy(
                "reset_gpu", f"{result.subject}: NVIDIA's catalog says RESET_GPU", (result.id,),
                gpus=(f"{found.group(1).lower()}.0",),
            )  # fmt: skip
    named = _ROLES_IN_REMEDY.search(result.remedy or "")
    roles = tuple(re.split(r", | and ", named.group(1))) if named else ()
    if roles and set(roles) <= REAPPLIED_ROLES:
        return Remedy("reapply", f"{result.id}: drift, {result.remedy}", (result.id,), roles=roles)
    return Remedy("hold", f"{result.id}: {result.summary}", (result.id,))


def remedy_for(results: Sequence[Result]) -> Remedy:
    """The node's remedy: the gravest of its critical fails' (hold, then reboot, reset, reapply)."""
    each = [_one(r) for r in results if r.status is Status.FAIL and r.critical]
    if not each:
        return Remedy("resume", "no critical check fails: prove the node, then resume it")
    action = min((r.action for r in each), key=ORDER.index)
    chosen = [r for r in each if r.action == action]
    roles = tuple(dict.fromkeys(role for r in each for role in r.roles))
    return Remedy(
        action,
        "; ".join(r.why for r in chosen),
        tuple(sorted({c for r in each for c in r.checks})),
        roles=roles if action in ("reapply", "reset_gpu") else (),
        gpus=tuple(dict.fromkeys(g for r in chosen for g in r.gpus)),
    )


def remedy_for_node(results: Sequence[Result], node: NodeState | None, unread: str = "") -> Remedy:
    """What remediation may do for this node: the audit's remedy (``remedy_for``) only for a node
    dltune drained and may resume; else "none" or "unknown" with why (``unread``: why Slurm's state
    could not be read), or "hold" for a flapping node. The critical fails stay named in ``checks``."""
    audit = remedy_for(results)
    found = (
        "the audit finds no critical fail"
        if audit.action == "resume"
        else f"the audit's remedy would be {audit.action}: {audit.why}"
    )
    if node is None or not node.state:
        why = unread or "scontrol printed no State= for it"
        return Remedy(
            "unknown",
            f"the node's state in Slurm could not be read ({why}): whether it is drained, and by whom, "
            f"is unknown, so nothing is done; {found}",
            audit.checks,
        )
    said = f"{node.state}, {node.reason}" if node.reason else node.state
    if node.left_alone_because:
        return Remedy(
            "none",
            f"dltune leaves it alone: {', '.join(node.left_alone_because)} ({said}); {found}",
            audit.checks,
        )
    if not node.drained:
        return Remedy("none", f"not drained ({said}): nothing to remedy; {found}", audit.checks)
    if not node.drained_by_dltune:
        return Remedy("none", f"drained by someone else ({said}): theirs to resume; {found}", audit.checks)
    if node.flapping:
        return Remedy(
            "hold", f"drained as flapping ({said}): only an operator resumes it; {found}", audit.checks
        )
    return audit
