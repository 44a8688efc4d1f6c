"""Area ``storage``: local filesystems: /tmp on tmpfs, the data disks (fstab by UUID, noatime, space),
and whether the mount table and fstab could be read and parsed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status, human_size
from dltune.snapshot import (
    Snapshot,
    fstab_entry_for,
    looks_like_data_mount,
    mount_at,
    mount_containing,
    option_value,
)

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


def _kib(size_kb: int | None) -> str:
    """A tmpfs size as a person reads it (the kernel counts it in KiB: "205 GiB"); none: "unknown"."""
    return "unknown" if size_kb is None else human_size(size_kb * 1024, binary=True)


def _flags(options: list[str] | tuple[str, ...]) -> set[str]:
    """Options that must appear on the live mount, except size and mode, judged on their own."""
    return {o for o in options if o.split("=", 1)[0] not in {"size", "mode"} and o not in _IGNORED_OPTIONS}


# long: one verdict per /tmp state (live, fstab, pending reboot), judged in this order
@check("storage.tmp_tmpfs", needs=("mountinfo", "fstab", "manifest:tmpfs_tmp"))
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
        problems.append(f"size {_kib(live_size_kb)}, expected {want_size} = {_kib(want_size_kb)}")
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


# --- data disks (role data_disks) -------------------------------------------------------------

_DATA_REMEDY = "apply role data_disks (data_disks_devices, data_disks_system_noatime)"
# Options that must show on the live mount when fstab has them; the rest never show live.
_LIVE_VISIBLE = frozenset(
    {"noatime", "relatime", "strictatime", "nodiratime", "ro", "nosuid", "nodev", "noexec"}
)
SPACE_WARN, SPACE_FAIL = 0.10, 0.03  # free fraction of bytes or inodes


def atime_mode(options: tuple[str, ...]) -> str:
    """The atime mode of a mount's per-mount options as the kernel shows them (mountinfo): it writes
    "noatime" or "relatime" when set, and nothing for strictatime (fs/proc_namespace.c,
    show_mnt_opts; a remount,strictatime in the lab reads "rw" alone)."""
    for mode in ("noatime", "strictatime", "relatime"):
        if mode in options:
            return mode
    return "strictatime"


# The subject names the mount point: the texts stay short and shared (thousands of container mounts).
_UNMANAGED_NOATIME_REMEDY = (
    "add it to data_disks_devices (role data_disks), or remount it with -o remount,noatime"
)


def _managed_data_mounts(snap: Snapshot) -> list[dict[str, Any]] | None:
    fragment = snap.expected.get("data_disks")
    if fragment is None:
        return None
    disks = [dict(d) for d in fragment.get("disks", []) if isinstance(d, Mapping)]
    disks += [{"mount_point": str(mp)} for mp in fragment.get("system_noatime", [])]
    return disks


# long: one verdict per mount, with or without the manifest, judged in this order
@check("storage.data_noatime", needs=("mountinfo", "manifest:data_disks"))
def data_noatime(snap: Snapshot) -> list[Result]:
    check_id = "storage.data_noatime"
    managed = _managed_data_mounts(snap)
    if managed is None:
        # One result per mount point, judged by the mount that is visible there (the last one).
        visible = {m.mount_point: m for m in snap.mounts}
        candidates = [m for m in visible.values() if looks_like_data_mount(m)]
        if not candidates:
            return [
                Result(check_id, Status.SKIP, "no data mounts found (and no manifest from role data_disks)")
            ]
        results = []
        for mount in candidates:
            # The kernel shows the atime mode among the per-mount options (cheaper than all options).
            mode = atime_mode(mount.mount_options)
            advice: dict[str, Any] = {
                "judged_against": "best practice (no data_disks manifest)",
                "fstype": mount.fstype,
                "source": mount.source,
                "atime": mode,
            }
            if mode == "noatime":
                results.append(
                    Result(
                        check_id,
                        Status.PASS,
                        f"{mount.mount_point} is mounted noatime",
                        subject=mount.mount_point,
                        evidence=advice,
                    )
                )
            else:
                results.append(
                    Result(
                        check_id,
                        Status.WARN,
                        f"{mount.fstype} mounted {mode}: reads write access times; noatime avoids that",
                        subject=mount.mount_point,
                        evidence=advice,
                        remedy=_UNMANAGED_NOATIME_REMEDY,
                    )
                )
        return results

    if not managed:
        return [Result(check_id, Status.SKIP, "role data_disks manages no disks on this node")]
    results = []
    for disk in managed:
        mp = str(disk["mount_point"])
        live = mount_at(snap.mounts, mp)
        evidence: dict[str, Any] = {
            "judged_against": f"manifest {snap.manifest_dir}/data_disks.json",
            "live_options": list(live.options) if live else None,
        }
        remedy = f"{_DATA_REMEDY}; now: mount -o remount,noatime {mp}"
        if live is None:
            results.append(
                Result(
                    check_id,
                    Status.FAIL,
                    f"{mp} is not mounted",
                    subject=mp,
                    evidence=evidence,
                    remedy=f"{_DATA_REMEDY}; now: mount {mp}",
                )
            )
        elif "noatime" not in live.options:
            results.append(
                Result(
                    check_id,
                    Status.FAIL,
                    f"{mp} is mounted {atime_mode(live.options)}, but role data_disks applied noatime",
                    subject=mp,
                    evidence=evidence,
                    remedy=remedy,
                )
            )
        else:
            results.append(
                Result(check_id, Status.PASS, f"{mp} is mounted noatime", subject=mp, evidence=evidence)
            )
    return results


def _same_device(snap: Snapshot, first: str, second: str) -> bool:
    """Whether two device paths name one device, symlinks resolved on the audited host."""
    return snap.device_paths.get(first, first) == snap.device_paths.get(second, second)


# long: each disk's problems are gathered into one result per disk
@check("storage.data_fstab", needs=("mountinfo", "fstab", "manifest:data_disks"))
def data_fstab(snap: Snapshot) -> list[Result]:
    """fstab and the live mount agree with the manifest: same UUID, same options, UUID present."""
    check_id = "storage.data_fstab"
    fragment = snap.expected.get("data_disks")
    if fragment is None:
        return [Result(check_id, Status.SKIP, "no manifest from role data_disks: nothing to compare")]
    results = []
    for disk in fragment.get("disks", []):
        mp, uuid = str(disk["mount_point"]), str(disk.get("uuid", ""))
        want_options = [str(o) for o in disk.get("options", [])]
        entry = fstab_entry_for(snap.fstab, mp)
        live = mount_at(snap.mounts, mp)
        device = snap.uuid_devices.get(uuid)
        evidence: dict[str, Any] = {
            "uuid": uuid,
            "expected_options": want_options,
            "fstab_spec": entry.spec if entry else None,
            "fstab_options": list(entry.options) if entry else None,
            "uuid_device": device if uuid in snap.uuid_devices else "unknown (needs udev links or root)",
            "live_source": live.source if live else None,
        }
        problems = []
        if entry is None:
            problems.append("no fstab line")
        else:
            if entry.spec != f"UUID={uuid}":
                problems.append(f"fstab mounts {entry.spec}, not UUID={uuid}")
            if set(entry.options) != set(want_options):
                problems.append(
                    f"fstab options {','.join(entry.options)} differ from {','.join(want_options)}"
                )
            if live is not None:
                missing = sorted((set(entry.options) & _LIVE_VISIBLE) - set(live.options))
                if missing:
                    problems.append(f"live mount lacks {','.join(missing)} that fstab has")
        if uuid in snap.uuid_devices:
            if device is None:
                problems.append(f"no device has UUID {uuid} (disk missing or reformatted)")
            elif live is not None and not _same_device(snap, live.source, device):
                problems.append(f"{mp} is mounted from {live.source}, but UUID {uuid} is {device}")
        if problems:
            results.append(
                Result(
                    check_id,
                    Status.FAIL,
                    f"{mp}: " + "; ".join(problems),
                    subject=mp,
                    evidence=evidence,
                    remedy=_DATA_REMEDY,
                )
            )
        else:
            results.append(
                Result(
                    check_id,
                    Status.PASS,
                    f"{mp}: fstab mounts UUID={uuid} with the applied options",
                    subject=mp,
                    evidence=evidence,
                )
            )
    return results


@check("storage.data_space", needs=("mountinfo", "manifest:data_disks"))
def data_space(snap: Snapshot) -> list[Result]:
    check_id = "storage.data_space"
    results = []
    # One judgement per filesystem: its bind mounts (thousands on a host full of containers) share
    # its space, and are named in the evidence instead of each getting the same finding.
    device_of = {m.mount_point: m.device for m in snap.mounts if m.device}
    by_filesystem: dict[str, list[str]] = {}
    for mp in sorted(snap.space):
        by_filesystem.setdefault(device_of.get(mp, mp), []).append(mp)
    for points in by_filesystem.values():
        mp, space = points[0], snap.space[points[0]]
        free = space.free_bytes / space.total_bytes if space.total_bytes else 1.0
        ifree = space.free_inodes / space.total_inodes if space.total_inodes else 1.0  # btrfs: no inode limit
        metrics = {
            "free_bytes": float(space.free_bytes),
            "total_bytes": float(space.total_bytes),
            "free_inodes": float(space.free_inodes),
            "total_inodes": float(space.total_inodes),
        }
        fractions: dict[str, Any] = {"free_fraction": round(free, 4), "free_inode_fraction": round(ifree, 4)}
        if len(points) > 1:
            fractions["also_mounted_at"] = points[1:6]
            fractions["other_mount_points"] = len(points) - 1
        worst = min(free, ifree)
        what = "inodes" if ifree < free else "space"
        if worst < SPACE_FAIL:
            status = Status.FAIL
        elif worst < SPACE_WARN:
            status = Status.WARN
        else:
            status = Status.PASS
        summary = (
            f"{mp}: {free:.0%} space and {ifree:.0%} inodes free"
            if status is Status.PASS
            else f"{mp}: only {worst:.1%} {what} free"
        )
        results.append(
            Result(
                check_id,
                status,
                summary,
                subject=mp,
                evidence=fractions,
                metrics=metrics,
                remedy=None
                if status is Status.PASS
                else f"free {what} on {mp} (stale datasets, old job scratch)",
            )
        )
    return results


@check("storage.fstab_parse", needs=("fstab",))
def fstab_parse(snap: Snapshot) -> list[Result]:
    results = [_fstab_lines(snap)]
    if snap.mountinfo_unparsed:
        # The kernel never writes such a line: dltune's reading of it is wrong, and says so.
        results.append(
            Result(
                "storage.fstab_parse",
                Status.ERROR,
                f"{len(snap.mountinfo_unparsed)} /proc/self/mountinfo line(s) dltune could not read",
                subject="/proc/self/mountinfo",
                evidence={
                    "lines": [
                        {"line_no": u.line_no, "text": u.text, "reason": u.reason}
                        for u in snap.mountinfo_unparsed[:20]
                    ]
                },
                remedy="report this as a dltune bug, with the lines in the evidence",
            )
        )
    return results


def _fstab_lines(snap: Snapshot) -> Result:
    counts = {"entries": len(snap.fstab.entries), "unparsed": len(snap.fstab.unparsed)}
    if not snap.fstab.unparsed:
        entries = counts["entries"]
        return Result(
            "storage.fstab_parse",
            Status.PASS,
            "fstab has no entries: nothing to parse"
            if not entries
            else "the one fstab entry parses"
            if entries == 1
            else f"all {entries} fstab entries parse",
            evidence=counts,
        )
    lines = [f"line {u.line_no}: {u.reason}" for u in snap.fstab.unparsed]
    return Result(
        "storage.fstab_parse",
        Status.WARN,
        f"{len(lines)} fstab line(s) mount(8) cannot use",
        evidence={
            **counts,
            # mount_point: a line libmount still reads (a type field holding options) stands for that
            # mount point in mount -a and systemd's generator; None: libmount ignores the line.
            "lines": [
                {"line_no": u.line_no, "text": u.text, "reason": u.reason, "mount_point": u.mount_point}
                for u in snap.fstab.unparsed
            ],
        },
        remedy="fix or comment out the lines in /etc/fstab (findmnt --verify shows them too)",
    )


# NVMe SMART / Health log, byte 0 (NVMe Base Specification, "Critical Warning"; libnvme's
# enum nvme_smart_crit): what each bit says about the drive.
CRITICAL_WARNING_BITS = {
    0x01: "available spare below its threshold",
    0x02: "temperature outside its thresholds",
    0x04: "NVM subsystem reliability degraded",
    0x08: "media placed in read-only mode",
    0x10: "volatile memory backup (power-loss protection) failed",
    0x20: "persistent memory region read-only or unreliable",
}
# The bits that mean the disk can no longer be trusted with a job's data: the node is drained.
CRITICAL_WARNING_FATAL = 0x04 | 0x08
ENDURANCE_WARN = 90  # percentage used: the vendor's estimate of the rated endurance consumed


def judge_nvme(figures: Mapping[str, int]) -> tuple[Status, list[str], bool]:
    """(status, reasons, critical) of one controller's health figures: any critical warning bit,
    media errors or spare under its threshold fail; endurance near its end warns."""
    reasons: list[str] = []
    status, critical = Status.PASS, False
    warning = figures.get("critical_warning", 0)
    if warning or figures.get("critical_warning_failed"):
        said = [text for bit, text in CRITICAL_WARNING_BITS.items() if warning & bit]
        reasons.append(
            f"critical_warning 0x{warning:02x}: " + (", ".join(said) or "the drive reports it failing")
        )
        status = Status.FAIL if warning & ~0x02 or figures.get("critical_warning_failed") else Status.WARN
        critical = bool(warning & CRITICAL_WARNING_FATAL)
    if figures.get("media_errors", 0) > 0:
        reasons.append(f"media_errors {figures['media_errors']}: data the drive could not read back")
        status = Status.FAIL
    spare, threshold = figures.get("available_spare"), figures.get("available_spare_threshold")
    if spare is not None and threshold is not None and spare < threshold:
        reasons.append(f"available_spare {spare}% below its threshold {threshold}%")
        status = Status.FAIL
    used = figures.get("percentage_used")
    if used is not None and used >= ENDURANCE_WARN:
        reasons.append(f"percentage_used {used}%: the rated endurance is (nearly) used up")
        status = status if status is Status.FAIL else Status.WARN
    return status, reasons, critical


@check("storage.nvme_health")
def nvme_health(snap: Snapshot) -> list[Result]:
    """The SMART / Health log of each NVMe controller behind a data disk."""
    if not snap.nvme:
        return [Result("storage.nvme_health", Status.SKIP, "no data disk on an NVMe controller")]
    results = []
    for health in snap.nvme:
        evidence: dict[str, Any] = {"data_mounts": list(health.mount_points), **dict(health.figures)}
        if health.error:
            results.append(
                Result(
                    "storage.nvme_health",
                    Status.SKIP,
                    f"health log not read: {health.error}",
                    subject=health.controller,
                    evidence=evidence,
                )
            )
            continue
        status, reasons, critical = judge_nvme(health.figures)
        evidence["tool"] = health.tool
        on = ", ".join(health.mount_points)
        results.append(
            Result(
                "storage.nvme_health",
                status,
                (f"{'; '.join(reasons)} ({on})" if reasons else f"healthy by its SMART log ({on})"),
                subject=health.controller,
                evidence=evidence,
                metrics={k: float(v) for k, v in health.figures.items()},
                critical=critical,
                remedy=None
                if status is Status.PASS
                else "copy what matters off the disk and replace it (`nvme smart-log`, `smartctl -a`); "
                "its data mounts are at risk",
            )
        )
    return results
