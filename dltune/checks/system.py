"""Area ``system``: node-wide state such as a pending reboot."""

from __future__ import annotations

from dltune.checks import check
from dltune.model import Result, Status
from dltune.snapshot import Snapshot


@check("system.reboot_required")
def reboot_required(snap: Snapshot) -> Result:
    if not snap.reboot.required:
        return Result("system.reboot_required", Status.PASS, "no reboot pending")
    named = ", ".join(snap.reboot.packages) or "nothing named in /run/reboot-required.pkgs"
    return Result(
        "system.reboot_required",
        Status.WARN,
        f"a reboot is pending for: {named}",
        evidence={"reboot_required": True, "requested_by": list(snap.reboot.packages)},
        remedy="reboot the node (drain it first on a Slurm cluster) so the pending settings take effect",
    )


@check("system.audit_timeout")
def audit_timeout(snap: Snapshot) -> Result:
    """The audit's own deadline (--timeout): what it could not finish is named, never silently left out."""
    if not snap.missed:
        return Result("system.audit_timeout", Status.PASS, "every probe finished within the audit's time")
    return Result(
        "system.audit_timeout",
        Status.FAIL,
        f"the audit ran out of time; not finished: {'; '.join(snap.missed.values())}",
        evidence={"not_finished": dict(snap.missed)},
        remedy="something on the node does not answer (see the failing checks); find it with "
        "`dltune audit --only <area> --verbose` and drain the node if it is the driver or a mount",
        critical=True,
    )
