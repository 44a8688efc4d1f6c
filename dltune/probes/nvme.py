"""NVMe health of the data disks: the SMART / Health Information log page, from whichever tool the node
has (``nvme smart-log <ctrl> -o json``, else ``smartctl -j -a <ctrl>``), each under the audit's deadline.

Formats met on real machines (tests/fixtures/real/nvme_smart): nvme-cli's JSON prints
``critical_warning`` as a number up to 1.11 and in 2.x with ``-H`` as an object ``{"value": 9, ...}``,
its big counters as numbers or (2.2-2.3) as strings with thousands separators; smartctl nests the log
under ``nvme_smart_health_information_log`` (``percentage_used``, ``available_spare_threshold``) where
nvme-cli says ``percent_used`` and ``spare_thresh``. Older tools print text (``Critical Warning:
0x09``, ``media_errors : 0``): read as well, by the same field names.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from dltune.probes.runner import CommandRunner
from dltune.probes.watchdog import Deadline
from dltune.snapshot import NvmeHealth

NVME_TIMEOUT_S = 5.0
_CONTROLLER = re.compile(r"^/dev/(?P<ctrl>nvme[0-9]+)(?:n[0-9]+(?:p[0-9]+)?)?$")
# Field -> its spellings in nvme-cli JSON, smartctl JSON and both tools' text.
FIELDS: dict[str, tuple[str, ...]] = {
    "critical_warning": ("critical_warning", "critical warning"),
    "media_errors": ("media_errors", "media and data integrity errors"),
    "percentage_used": ("percentage_used", "percent_used"),
    "available_spare": ("available_spare", "avail_spare"),
    "available_spare_threshold": ("available_spare_threshold", "spare_thresh"),
}
# Thousands separators as locales print them: comma, point, apostrophe, U+2019, narrow space.
_SEPARATORS = "[,.'\u2019\u202f ]"
_NUMBER = re.compile(rf"^(?P<sign>-)?(?P<digits>[0-9](?:[0-9]|{_SEPARATORS})*?)\s*%?$")
_HEX = re.compile(r"^0x(?P<hex>[0-9a-fA-F]+)$")


def controller_of(device: str) -> str | None:
    """/dev/nvme0n1p2 -> /dev/nvme0 (the controller holds the health log); None for other disks."""
    match = _CONTROLLER.match(device)
    return f"/dev/{match['ctrl']}" if match else None


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return _number(value.get("value"))
    if not isinstance(value, str):
        return None
    text = value.strip()
    hexed = _HEX.match(text)
    if hexed:
        return int(hexed["hex"], 16)
    match = _NUMBER.match(text)
    if not match:
        return None
    digits = re.sub(_SEPARATORS, "", match["digits"])
    return int(digits) if digits.isascii() and digits.isdigit() else None


def _from_json(data: Mapping[str, Any]) -> dict[str, int]:
    log = data.get("nvme_smart_health_information_log")
    source = log if isinstance(log, Mapping) else data
    found: dict[str, int] = {}
    for field, names in FIELDS.items():
        numbers = (_number(source[name]) for name in names if name in source)
        number = next((n for n in numbers if n is not None), None)
        if number is not None:
            found[field] = number
    # smartctl's verdict object (``smart_status``: ``passed`` and, for NVMe, the warning's ``value``).
    status = data.get("smart_status", data)
    nvme = status.get("nvme") if isinstance(status, Mapping) else None
    value = _number(nvme.get("value")) if isinstance(nvme, Mapping) else None
    if "critical_warning" not in found and value is not None:
        found["critical_warning"] = value
    if isinstance(status, Mapping) and status.get("passed") is False and not found.get("critical_warning"):
        found["critical_warning_failed"] = 1
    return found


def _from_text(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        name = " ".join(key.strip().lower().replace("_", " ").split())
        for field, names in FIELDS.items():
            if field not in found and name in (n.replace("_", " ") for n in names):
                number = _number(value.strip().split(" [")[0])
                if number is not None:
                    found[field] = number
    if "critical_warning" not in found and re.search(r"self-assessment test result: FAILED", text):
        found["critical_warning_failed"] = 1  # `smartctl -H` alone: the drive says it is failing
    return found


def parse_smart_log(text: str) -> dict[str, int]:
    """The health figures an NVMe SMART log states, from either tool's JSON or text."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, Mapping):
            return _from_json(data)
    return _from_text(text)


def read_nvme_health(
    runner: CommandRunner, devices: Mapping[str, str], deadline: Deadline, euid: int | None = None
) -> tuple[NvmeHealth, ...]:
    """The health log of each NVMe controller behind the data disks (mount point -> device). The log
    needs root (the controller's character device is 0600): as a user, each says so."""
    by_controller: dict[str, list[str]] = {}
    for mount_point, device in sorted(devices.items()):
        controller = controller_of(device)
        if controller:
            by_controller.setdefault(controller, []).append(mount_point)
    root = (os.geteuid() if euid is None else euid) == 0
    found = []
    for controller, mount_points in sorted(by_controller.items()):
        if not root:
            found.append(
                NvmeHealth(controller, tuple(mount_points), error="needs root (the controller is 0600)")
            )
            continue
        found.append(_read_one(runner, controller, tuple(mount_points), deadline))
    return tuple(found)


def _read_one(
    runner: CommandRunner, controller: str, mount_points: tuple[str, ...], deadline: Deadline
) -> NvmeHealth:
    errors = []
    for argv in (["nvme", "smart-log", controller, "-o", "json"], ["smartctl", "-j", "-a", controller]):
        timeout = deadline.limit(NVME_TIMEOUT_S)
        if timeout <= 0:
            deadline.missed["nvme"] = f"NVMe health of {controller} (storage area)"
            return NvmeHealth(controller, mount_points, error="not read: the audit's --timeout was spent")
        done = runner.run(argv, timeout=timeout)
        figures = parse_smart_log(done.stdout) if done.stdout else {}
        # smartctl's exit status is a bit mask that is non-zero for a failing drive: its output counts.
        if figures:
            return NvmeHealth(controller, mount_points, figures=figures, tool=argv[0])
        errors.append(f"{argv[0]}: {(done.stderr or done.stdout).strip()[:120] or f'rc={done.returncode}'}")
    return NvmeHealth(controller, mount_points, error="; ".join(errors))


def data_devices(
    mounts: Iterable[Any], mount_points: Iterable[str], device_paths: Mapping[str, str]
) -> dict[str, str]:
    """Mount point -> the device it is on (symlinks resolved), for the data mounts."""
    wanted = set(mount_points)
    found = {}
    for mount in mounts:
        if mount.mount_point in wanted and mount.source.startswith("/dev/"):
            found[mount.mount_point] = device_paths.get(mount.source, mount.source)
    return found
