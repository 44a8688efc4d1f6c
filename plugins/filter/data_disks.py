"""Filters of role data_disks: pure functions, unit-tested in tests/unit/test_data_disks_filters.py.

- ``data_disks_compose``: each disk's settings with the role's defaults filled in.
- ``data_disks_entries``: each disk's fstab entry by UUID, joined with its plan.
- ``data_disks_plan``: what to do with each disk, from what the probes saw, with every refusal
  spelled out before anything changes.
- ``data_disks_fstab``: the new /etc/fstab text: data disk lines added or replaced in place, noatime
  added to system mount lines, every other line (comments, foreign entries) kept byte for byte.
- ``data_disks_verify_errors``: the ``[E]`` findings of ``findmnt --verify`` as (target, message).
- ``data_disks_mount_point_errors``: the mount points that are neither empty nor this disk's mount.
"""

from __future__ import annotations

import json
import re
from typing import Any

ATIME_OPTIONS = frozenset({"atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime"})
_FIELD = re.compile(r"[^ \t]+")
_OCTAL = re.compile(r"\\([0-7]{3})")
# dump and pass as libmount reads them (strtol, base 10): an optional sign, then ASCII digits.
_FSTAB_NUMBER = re.compile(r"[+-]?[0-9]+")
# libmount's tags: NAME=value, NAME="value" or NAME='value' name the same device.
_QUOTED_TAG = re.compile(r"^(?P<name>UUID|LABEL|PARTUUID|PARTLABEL|ID)=(?P<q>[\"'])(?P<value>.*)(?P=q)$")


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def _escape(text: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)


def _entry_fields(line: str) -> list[re.Match[str]] | None:
    """The fields of an fstab line mount(8) uses; None for comments, blank and unusable lines (libmount's
    rules, as dltune's audit parser: at least 3 fields, numeric dump and pass, nothing read after the
    pass number). A line whose type field holds mount options is kept here, where the audit reports it
    unparsed: libmount and systemd still read it for its mount point, so the role replaces it in place
    rather than adding a second line for the same mount point."""
    stripped = line.strip(" \t\r")
    if not stripped or stripped.startswith("#"):
        return None
    fields = list(_FIELD.finditer(line.rstrip("\r")))[:6]
    if len(fields) < 3 or any(not _FSTAB_NUMBER.fullmatch(f.group()) for f in fields[4:6]):
        return None
    return fields


def _spec(field: str) -> str:
    text = _unescape(field)
    match = _QUOTED_TAG.match(text)
    return f"{match['name']}={match['value']}" if match else text


def _normalized(fields: list[str]) -> tuple[str, ...]:
    """fstab fields with mount(8)'s defaults filled in, escapes and tag quotes undone, for comparison."""
    if 3 <= len(fields) < 6:
        fields = [*fields, *["defaults", "0", "0"][len(fields) - 3 :]]
    return (_spec(fields[0]), _unescape(fields[1]), *fields[2:])


def _render(entry: dict[str, Any]) -> str:
    return "\t".join(
        [
            _escape(str(entry["spec"])),
            _escape(str(entry["mount_point"])),
            str(entry["fstype"]),
            ",".join(entry["options"]),
            str(entry.get("dump", 0)),
            str(entry.get("passno", 2)),
        ]
    )


def data_disks_fstab(content: str, entries: list[dict[str, Any]], noatime_mounts: list[str]) -> str:
    lines = content.split("\n")
    ends_with_newline = content.endswith("\n") or not content
    if content.endswith("\n"):
        lines.pop()
    elif not content:
        lines = []
    for entry in entries:
        rendered = _render(entry)
        want = _normalized(_FIELD.findall(rendered))
        matches = []
        for i, line in enumerate(lines):
            fields = _entry_fields(line)
            if fields and _unescape(fields[1].group()) == entry["mount_point"]:
                matches.append(i)
        if not matches:
            lines.append(rendered)
            ends_with_newline = True
            continue
        first = matches[0]
        if _normalized([f.group() for f in _entry_fields(lines[first]) or []]) != want:
            lines[first] = rendered
        for i in matches[1:]:
            # Never two lines for one mount point; keep the old one visible instead of deleting it.
            lines[i] = f"# data_disks: duplicate of the {entry['mount_point']} line above: {lines[i]}"
    for mount_point in noatime_mounts:
        index = None
        for i, line in enumerate(lines):
            fields = _entry_fields(line)
            if fields and _unescape(fields[1].group()) == mount_point:
                index = i
        if index is None:
            raise ValueError(f"data_disks_system_noatime: no fstab line for {mount_point}")
        fields = _entry_fields(lines[index]) or []
        if len(fields) < 4:
            # A CRLF file keeps its \r at the end of the line, after the new field.
            ending = "\r" if lines[index].endswith("\r") else ""
            lines[index] = lines[index].rstrip(" \t\r") + "\tnoatime" + ending
            continue
        options = fields[3].group().split(",")
        wanted = [o for o in options if o not in ATIME_OPTIONS] + ["noatime"]
        if options != wanted:
            span = fields[3].span()
            lines[index] = lines[index][: span[0]] + ",".join(wanted) + lines[index][span[1] :]
    return "\n".join(lines) + ("\n" if ends_with_newline and lines else "")


def data_disks_fstab_mount_points(content: str) -> list[str]:
    """Mount points of the entry lines of an fstab text, escapes undone."""
    points = []
    for line in content.split("\n"):
        fields = _entry_fields(line)
        if fields:
            points.append(_unescape(fields[1].group()))
    return points


def _signatures(wipefs_stdout: str) -> list[dict[str, str]]:
    try:
        data = json.loads(wipefs_stdout or "{}")
    except ValueError:
        return []
    return [dict(s) for s in data.get("signatures", [])]


def _blkid_export(stdout: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def _what_the_disk_holds(
    name: str,
    disk: dict[str, Any],
    found: dict[str, str],
    signatures: list[dict[str, Any]],
    format_allowed: bool,
    errors: list[str],
) -> tuple[str | None, str]:
    """(uuid, action) by what blkid and wipefs saw: a filesystem is used (never reformatted), any
    other signature is refused, a blank disk is formatted only when allowed. Refusals go to errors."""
    if found.get("TYPE") and found.get("USAGE", "filesystem") == "filesystem":
        if found["TYPE"] != disk["fstype"]:
            errors.append(
                f"{name} holds a {found['TYPE']} filesystem, not {disk['fstype']}: it is never "
                "reformatted; set its fstype to match or wipe it yourself"
            )
        return found.get("UUID"), "use"
    if signatures or found.get("PTTYPE") or found.get("TYPE"):
        kinds = sorted(
            {s.get("type", "?") for s in signatures} | {found[k] for k in ("TYPE", "PTTYPE") if k in found}
        )
        errors.append(
            f"{name} has no filesystem but holds {', '.join(kinds)} (partition table, LVM or RAID "
            "member): refusing to format it"
        )
        return None, "use"
    if not format_allowed:
        errors.append(
            f"{name} is blank (no filesystem or signature): set data_disks_format_allowed: true to "
            f"create {disk['fstype']} on it"
        )
        return None, "use"
    return None, "format"


def data_disks_plan(
    disks: list[dict[str, Any]],
    resolved: list[dict[str, Any]],
    blkid: list[dict[str, Any]],
    wipefs: list[dict[str, Any]],
    findmnt: list[dict[str, Any]],
    format_allowed: bool,
    move_allowed: bool,
) -> list[dict[str, Any]]:
    """One plan per disk: device, uuid, action (use | format), mounted_at, and errors (refusals)."""
    plans = []
    for disk, res, blk, wfs, fmt in zip(disks, resolved, blkid, wipefs, findmnt, strict=True):
        errors: list[str] = []
        name = f"{disk['device']} (for {disk['mount_point']})"
        device = (res.get("stdout") or "").strip()
        plan: dict[str, Any] = {
            "mount_point": disk["mount_point"],
            "fstype": disk["fstype"],
            "device": device,
            "uuid": None,
            "action": "use",
            "mounted_at": [],
            "live_options": [],
            "errors": errors,
        }
        plans.append(plan)
        if res.get("rc") != 0 or not device:
            errors.append(f"{name}: no such device")
            continue
        # The probes run for every device found: one without an answer (skipped, or a result of another
        # shape) leaves what the disk holds unknown, and an unknown disk is never formatted nor mounted.
        silent = [
            tool
            for tool, result in (("blkid", blk), ("wipefs", wfs), ("findmnt", fmt))
            if "stdout" not in result
        ]
        if silent:
            errors.append(f"{name}: {', '.join(silent)} gave no answer, so what it holds is unknown")
            continue
        found = _blkid_export(blk["stdout"])
        signatures = _signatures(wfs["stdout"])
        targets = json.loads(fmt["stdout"] or "{}").get("filesystems", [])
        plan["mounted_at"] = [t["target"] for t in targets]
        plan["live_options"] = next(
            (t["options"].split(",") for t in targets if t["target"] == disk["mount_point"]), []
        )
        plan["uuid"], plan["action"] = _what_the_disk_holds(
            name, disk, found, signatures, format_allowed, errors
        )
        elsewhere = [t for t in plan["mounted_at"] if t != disk["mount_point"]]
        if elsewhere and disk["mount_point"] not in plan["mounted_at"] and not move_allowed:
            errors.append(
                f"{name} is mounted at {', '.join(elsewhere)}: set data_disks_move_allowed: true to "
                f"unmount it there and mount it at {disk['mount_point']}"
            )
        plan["move_from"] = elsewhere if disk["mount_point"] not in plan["mounted_at"] else []
    return plans


def _filesystems(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of a ``findmnt --json`` result (a skipped or empty probe has none)."""
    try:
        data = json.loads(result.get("stdout") or '{"filesystems": []}')
    except ValueError:
        return []
    return [dict(f) for f in data.get("filesystems", [])]


def data_disks_mount_point_errors(
    disks: list[dict[str, Any]],
    findmnt: list[dict[str, Any]],
    stats: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> list[str]:
    """A refusal per disk whose mount point is neither empty nor already this disk's mount: another
    filesystem mounted there, a link (a mount follows it), a file, or a directory that holds entries
    the mount would hide. Inputs: per disk, ``findmnt --source DEVICE`` (where the disk is mounted),
    ``stat`` of the mount point, ``find -maxdepth 1`` of it, ``findmnt --mountpoint`` of it."""
    errors = []
    for index, (disk, here, st, found, there) in enumerate(
        zip(disks, findmnt, stats, entries, mounts, strict=True)
    ):
        point = disk["mount_point"]
        refused = f"data_disks_devices[{index}].mount_point={point} is refused: "
        if point in [f.get("target") for f in _filesystems(here)]:
            continue  # already this disk's mount: a rerun, or a disk mounted in place
        others = [str(f.get("source", "?")) for f in _filesystems(there)]
        if others:
            errors.append(
                refused + f"{', '.join(others)} is mounted there, not {disk['device']}: unmount it or choose "
                "another mount point"
            )
            continue
        stat = st.get("stat") or {}
        if not stat.get("exists"):
            continue
        if stat.get("islnk"):
            errors.append(
                refused + f"it is a link (to {stat.get('lnk_source', '?')}), which a mount would follow"
            )
        elif not stat.get("isdir"):
            errors.append(refused + "it is a file, not a directory")
        else:
            if "stdout" not in found:
                # find is skipped only where the stat said "no directory": a directory with no listing
                # is one whose content is unknown, and a mount would hide whatever it holds.
                errors.append(refused + "find gave no answer, so what it holds is unknown")
                continue
            names = [line for line in str(found["stdout"]).splitlines() if line]
            if names:
                shown = ", ".join(sorted(names)[:3]) + (
                    f" and {len(names) - 3} more" if len(names) > 3 else ""
                )
                errors.append(
                    refused + f"it is not empty (holds {shown}): mounting {disk['device']} there would hide "
                    "that data; empty it or choose another mount point"
                )
    return errors


def data_disks_verify_errors(stdout: str) -> list[list[str]]:
    """``findmnt --verify`` output -> [[target, message]] for each error ([E]) line."""
    errors = []
    target = ""
    for line in stdout.splitlines():
        if line and not line.startswith(" "):
            target = line.strip()
        elif line.strip().startswith("[E]"):
            errors.append([target, line.strip()[3:].strip()])
    return errors


def data_disks_compose(
    devices: list[dict[str, Any]],
    default_options: list[str],
    ext4_options: list[str],
    nofail: bool,
    device_timeout: object,
) -> list[dict[str, Any]]:
    """Each disk of data_disks_devices with what it leaves out taken from the role's defaults: ext4;
    the default options (and the ext4 ones on ext4) unless it gives its own; then nofail and the
    device timeout, each added once (a disk's own list may hold them already)."""
    composed = []
    for disk in devices:
        fstype = disk.get("fstype", "ext4")
        if "options" in disk:
            options = list(disk["options"])
        else:
            options = list(default_options) + (list(ext4_options) if fstype == "ext4" else [])
        extra = (["nofail"] if nofail else []) + (
            [f"x-systemd.device-timeout={device_timeout}"] if device_timeout else []
        )
        composed.append(
            {
                "device": disk.get("device", ""),
                "mount_point": str(disk.get("mount_point", "")),
                "fstype": fstype,
                "options": options + [option for option in extra if option not in options],
                "owner": disk.get("owner", "root"),
                "group": disk.get("group", "root"),
                "mode": str(disk.get("mode", "0755")),
            }
        )
    return composed


CHECK_MODE_UUID = "to-be-created-in-check-mode"


def data_disks_entries(
    disks: list[dict[str, Any]], plans: list[dict[str, Any]], new_uuids: dict[str, str]
) -> list[dict[str, Any]]:
    """Each disk's fstab entry, by UUID: the one it holds, or the one its format just made (in check
    mode no format ran: a placeholder that is never written), with what its plan decided."""
    entries = []
    for disk, plan in zip(disks, plans, strict=True):
        uuid = plan.get("uuid") or new_uuids.get(plan["device"], CHECK_MODE_UUID)
        entries.append(
            {
                **disk,
                "uuid": uuid,
                "spec": f"UUID={uuid}",
                "dump": 0,
                "passno": 2,
                "device_node": plan["device"],
                "mounted_here": disk["mount_point"] in plan.get("mounted_at", []),
                "move_from": plan.get("move_from"),
                "live_options": plan.get("live_options"),
            }
        )
    return entries


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "data_disks_compose": data_disks_compose,
            "data_disks_entries": data_disks_entries,
            "data_disks_plan": data_disks_plan,
            "data_disks_fstab": data_disks_fstab,
            "data_disks_verify_errors": data_disks_verify_errors,
            "data_disks_fstab_mount_points": data_disks_fstab_mount_points,
            "data_disks_mount_point_errors": data_disks_mount_point_errors,
        }
