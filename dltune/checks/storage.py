"""Area ``storage``: local filesystems (tmpfs /tmp here; data disks join in a later issue)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status
from dltune.probes import Snapshot
from dltune.probes.mounts import fstab_entry_for, mount_at, mount_containing, option_value

# Built-in best practice when role tmpfs_tmp left no manifest fragment (mirrors its defaults).
TMPFS_TMP_DEFAULTS: Mapping[str, Any] = {
    "mount_point": "/tmp",
    "size": "10%",
    "options": ["noatime", "nosuid", "nodev", "mode=1777", "size=10%"],
}
# tmpfs rounds the size to whole pages; a percentage follows the kernel's own count of RAM pages.
_SIZE_TOLERANCE = 0.01
_SIZE_RE = re.compile(r"^(?P<num>[0-9]+)(?P<unit>%|[kKmMgGtT]?)$")
_UNIT_KB = {"": 1 / 1024, "k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}
_IGNORED_OPTIONS = {"defaults", "rw", "auto", "nofail", "x-systemd.automount"}


def tmpfs_size_kb(size: str, mem_total_kb: int | None) -> int | None:
    """Expected size in KiB of a tmpfs ``size=`` value (``10%``, ``8G``, ``524288k``, bytes)."""
    match = _SIZE_RE.match(size.strip())
    if not match:
        return None
    num, unit = int(match["num"]), match["unit"]
    if unit == "%":
        return None if mem_total_kb is None else mem_total_kb * num // 100
    return int(num * _UNIT_KB[unit.lower()])


def _flags(options: list[str] | tuple[str, ...]) -> set[str]:
    """Options that must appear on the live mount, except size and mode, judged on their own."""
    return {o for o in options if o.split("=", 1)[0] not in {"size", "mode"} and o not in _IGNORED_OPTIONS}


@check("storage.tmp_tmpfs")
def tmp_tmpfs(snap: Snapshot) -> Result:
    check_id = "storage.tmp_tmpfs"
    fragment = snap.expected.get("tmpfs_tmp")
    expected = fragment if fragment is not None else TMPFS_TMP_DEFAULTS
    managed = fragment is not None
    mount_point = str(expected.get("mount_point", "/tmp"))
    want_options = [str(o) for o in expected.get("options", TMPFS_TMP_DEFAULTS["options"])]
    want_size = str(expected.get("size", option_value(tuple(want_options), "size") or "10%"))
    want_mode = option_value(tuple(want_options), "mode") or "1777"
    remedy = "apply role tmpfs_tmp (variables tmpfs_tmp_size, tmpfs_tmp_options)"
    drift = Status.FAIL if managed else Status.WARN
    against = (
        f"manifest {snap.manifest_dir}/tmpfs_tmp.json"
        if managed
        else "built-in best practice (no manifest from role tmpfs_tmp)"
    )

    if "/proc/self/mountinfo" in snap.errors:
        return Result(
            check_id,
            Status.ERROR,
            "cannot read the mount table",
            subject=mount_point,
            evidence={"error": snap.errors["/proc/self/mountinfo"]},
        )

    live = mount_at(snap.mounts, mount_point)
    holder = live or mount_containing(snap.mounts, mount_point)
    fstab = fstab_entry_for(snap.fstab, mount_point)
    fstab_ok = (
        fstab is not None
        and fstab.fstype == "tmpfs"
        and _flags(want_options) <= set(fstab.options)
        and option_value(fstab.options, "size") == want_size
    )
    evidence: dict[str, Any] = {
        "judged_against": against,
        "expected_options": want_options,
        "expected_size": want_size,
        "live_fstype": holder.fstype if holder else None,
        "live_mount_point": holder.mount_point if holder else None,
        "live_options": list(live.options) if live else None,
        "fstab_line": (
            f"{fstab.spec} {fstab.mount_point} {fstab.fstype} {','.join(fstab.options)}" if fstab else None
        ),
        "fstab_matches": fstab_ok,
    }

    if live is None or live.fstype != "tmpfs":
        if fstab_ok:
            return Result(
                check_id,
                Status.WARN,
                f"{mount_point} is configured as a tmpfs in fstab but not mounted yet: active after reboot",
                subject=mount_point,
                evidence=evidence,
                remedy="reboot the node (role tmpfs_tmp does not mount over a /tmp that holds files)",
            )
        return Result(
            check_id,
            drift,
            f"{mount_point} is not a tmpfs and fstab does not make it one",
            subject=mount_point,
            evidence=evidence,
            remedy=remedy,
        )

    problems = []
    missing = sorted(_flags(want_options) - set(live.options))
    if missing:
        problems.append(f"missing options {','.join(missing)}")
    live_mode = option_value(live.options, "mode") or "1777"  # the kernel hides the default mode
    if live_mode.lstrip("0") != want_mode.lstrip("0"):
        problems.append(f"mode {live_mode}, expected {want_mode}")
    live_size_kb = tmpfs_size_kb(option_value(live.options, "size") or "", snap.mem_total_kb)
    want_size_kb = tmpfs_size_kb(want_size, snap.mem_total_kb)
    evidence.update({"live_size_kb": live_size_kb, "expected_size_kb": want_size_kb})
    if want_size_kb is not None and (
        live_size_kb is None or abs(live_size_kb - want_size_kb) > max(4, want_size_kb * _SIZE_TOLERANCE)
    ):
        problems.append(f"size {live_size_kb} KiB, expected {want_size} = {want_size_kb} KiB")
    if not fstab_ok:
        problems.append("fstab has no matching tmpfs line, so the setting is lost at reboot")
    if problems:
        return Result(
            check_id,
            drift,
            f"{mount_point} is a tmpfs but " + "; ".join(problems),
            subject=mount_point,
            evidence=evidence,
            remedy=remedy,
            metrics={"size_bytes": float(live_size_kb * 1024)} if live_size_kb else {},
        )
    return Result(
        check_id,
        Status.PASS,
        f"{mount_point} is a tmpfs of {want_size} with {','.join(sorted(_flags(want_options)))}",
        subject=mount_point,
        evidence=evidence,
        metrics={"size_bytes": float(live_size_kb * 1024)} if live_size_kb else {},
    )
