"""Area ``system``: node-wide state such as a pending reboot."""

from __future__ import annotations

from dltune.checks import check
from dltune.model import Result, Status
from dltune.probes import Snapshot


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
