"""Host memory errors: the EDAC counters of each memory controller (``/sys/devices/system/edac/mc/mcN``)
and the kernel log's EDAC and machine-check lines.

sysfs (Documentation/ABI/testing/sysfs-devices-edac): ``mcN/ce_count`` and ``ue_count`` count every
corrected and uncorrected error of the controller since boot (or since ``reset_counters``);
``dimmN/``/``rankN/`` hold ``dimm_ce_count``/``dimm_ue_count`` and legacy ``csrowN/`` holds
``ce_count``/``ue_count``. edac-util reads only some of them (edac-utils#15: a DIMM's error missing
from its report), so the controller's figure here is the largest of its total and the sums of its
parts. ``mc/`` also holds ``power/`` and ``uevent``: only ``mc[0-9]+`` directories are controllers.

Kernel log: ``EDAC MC0: 4 CE error on ...`` / ``EDAC skx MC3: 1 UE memory read error`` (counted per
controller), the old ``EDAC MC1: CE page 0x...`` form (one each), and machine checks the kernel printed
(``mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 1: b000000000000000``: bit 61 of the MCA status,
UC, says uncorrected), ``Fatal machine check`` and ``Uncorrected hardware memory error``. A machine
check that no EDAC line attributes to a controller is kept apart (controller "unknown").
"""

from __future__ import annotations

import re

from dltune.probes.hostfs import HostFS
from dltune.records import record
from dltune.snapshot import UNATTRIBUTED_MEMORY as UNATTRIBUTED
from dltune.snapshot import MemoryController, MemoryErrors
from dltune.text import decimal

EDAC_MC = "/sys/devices/system/edac/mc"
_CONTROLLER = re.compile(r"mc[0-9]+")
_PART = re.compile(r"(?:dimm|rank|csrow)[0-9]+")
_CHANNEL = re.compile(r"ch[0-9]+_ce_count")
_EDAC_COUNT = re.compile(r"EDAC (?:\S+ )?MC(?P<mc>[0-9]+): (?P<n>[0-9]+) (?P<kind>CE|UE)\b")
_EDAC_OLD = re.compile(r"EDAC (?:\S+ )?MC(?P<mc>[0-9]+): (?P<kind>CE|UE) (?:page|ERROR_ADDRESS)")
_EDAC_MCE = re.compile(
    r"EDAC (?:\S+ )?MC(?P<mc>[0-9]+): (?:CPU [0-9]+: )?Machine Check Event: "
    r".*Bank [0-9]+: (?P<status>[0-9a-fA-F]{16})"
)
_MCE = re.compile(r"Machine Check: [0-9]+ Bank [0-9]+: (?P<status>[0-9a-fA-F]{16})")
_FATAL = re.compile(r"Fatal machine check|Uncorrected hardware memory error|Fatal local machine check")
MCA_STATUS_UC = 1 << 61


@record
class _Counts:
    corrected: int = 0
    uncorrected: int = 0

    def add(self, uncorrected: bool, number: int = 1) -> None:
        if uncorrected:
            self.uncorrected += number
        else:
            self.corrected += number


def _uncorrected(mca_status: str) -> bool:
    """Bit 61 of a machine check's MCA status (UC): the error was not corrected."""
    return bool(int(mca_status, 16) & MCA_STATUS_UC)


def _channels_corrected(fs: HostFS, csrow: str) -> int:
    """A legacy csrow's channels (chN_ce_count), where the csrow's own total is not there."""
    try:
        names = [p.name for p in fs.path(csrow).iterdir() if _CHANNEL.fullmatch(p.name)]
    except OSError:
        return 0
    return sum(decimal(fs.read_stripped(f"{csrow}/{name}")) or 0 for name in names)


def _controller(fs: HostFS, name: str) -> MemoryController:
    base = f"{EDAC_MC}/{name}"
    corrected, uncorrected = (
        decimal(fs.read_stripped(f"{base}/ce_count")),
        decimal(fs.read_stripped(f"{base}/ue_count")),
    )
    try:
        parts = sorted(p.name for p in fs.path(base).iterdir() if _PART.fullmatch(p.name))
    except OSError:
        parts = []
    # The same errors are counted per DIMM, per rank and per legacy csrow: the largest sum of one kind.
    part_ce: dict[str, int] = {}
    part_ue: dict[str, int] = {}
    for part in parts:
        kind = part.rstrip("0123456789")
        prefix = "dimm_" if kind != "csrow" else ""
        corrected_here = decimal(fs.read_stripped(f"{base}/{part}/{prefix}ce_count"))
        if corrected_here is None and kind == "csrow":
            corrected_here = _channels_corrected(fs, f"{base}/{part}")
        part_ce[kind] = part_ce.get(kind, 0) + (corrected_here or 0)
        part_ue[kind] = part_ue.get(kind, 0) + (
            decimal(fs.read_stripped(f"{base}/{part}/{prefix}ue_count")) or 0
        )
    return MemoryController(
        name,
        fs.read_stripped(f"{base}/mc_name"),
        None if corrected is None and not parts else max(corrected or 0, *part_ce.values(), 0),
        None if uncorrected is None and not parts else max(uncorrected or 0, *part_ue.values(), 0),
        "sysfs",
    )


def read_edac(fs: HostFS) -> tuple[MemoryController, ...] | None:
    """Each memory controller's counters; None where the kernel has no EDAC driver loaded."""
    try:
        names = sorted(
            (p.name for p in fs.path(EDAC_MC).iterdir() if _CONTROLLER.fullmatch(p.name)),
            key=lambda n: int(n[2:]),
        )
    except OSError:
        return None
    return tuple(_controller(fs, name) for name in names) if names else None


# long: three kinds of lines, then which of them stand for the same errors
def parse_memory_log(text: str) -> tuple[MemoryController, ...]:
    """Memory errors the kernel log reports, per controller ("mcN"), and the machine checks no EDAC line
    attributes as controller "unknown": counted only where no EDAC line already counts errors of their
    kind (the same error is printed by both), and ``fatal`` only for the kernel's own words for a fatal
    or uncorrected memory error (a bank's status alone may be a cache or PCIe bank, or a leftover the
    firmware reports at every boot)."""
    counted: dict[str, _Counts] = {}  # "EDAC MC0: 4 CE ..." lines
    events: dict[str, _Counts] = {}  # one error each: "EDAC MC1: CE page ...", "Machine Check Event"
    unattributed = _Counts()
    fatal = False
    for line in text.splitlines():
        match = _EDAC_COUNT.search(line)
        if match:
            counted.setdefault(f"mc{match['mc']}", _Counts()).add(
                match["kind"] == "UE", decimal(match["n"]) or 0
            )
            continue
        match = _EDAC_OLD.search(line) or _EDAC_MCE.search(line)
        if match:
            status = match.groupdict().get("status")
            uncorrected = match.groupdict().get("kind") == "UE" or (
                status is not None and _uncorrected(status)
            )
            events.setdefault(f"mc{match['mc']}", _Counts()).add(uncorrected)
            continue
        match = _MCE.search(line)
        if match:
            unattributed.add(_uncorrected(match["status"]))
        elif _FATAL.search(line):
            unattributed.add(True)
            fatal = True
    # sbridge and skx print both "Machine Check Event" and "1 CE memory ... error": the counted lines win.
    per_controller = {name: counted.get(name) or events[name] for name in {*counted, *events}}
    controllers = [
        MemoryController(name, None, c.corrected, c.uncorrected, "kernel log")
        for name, c in per_controller.items()
    ]
    attributed_uncorrected = any(c.uncorrected for c in per_controller.values())
    attributed_corrected = any(c.corrected for c in per_controller.values())
    corrected = 0 if attributed_corrected else unattributed.corrected
    uncorrected = 0 if attributed_uncorrected else unattributed.uncorrected
    if corrected or uncorrected:
        controllers.append(
            MemoryController(
                UNATTRIBUTED, None, corrected, uncorrected, "kernel log", fatal=fatal and bool(uncorrected)
            )
        )
    return tuple(sorted(controllers, key=lambda c: c.name))


def read_memory_errors(fs: HostFS, kernel_log_text: str | None) -> MemoryErrors:
    """EDAC's counters, with what the kernel log adds (a controller's log lines may count more than a
    counter that was reset; a machine check may have no EDAC driver to count it)."""
    sysfs = read_edac(fs)
    from_log = parse_memory_log(kernel_log_text) if kernel_log_text else ()
    merged: dict[str, MemoryController] = {c.name: c for c in sysfs or ()}
    for logged in from_log:
        known = merged.get(logged.name)
        if known is None:
            merged[logged.name] = logged
            continue
        merged[logged.name] = MemoryController(
            known.name,
            known.driver,
            max(known.corrected or 0, logged.corrected or 0),
            max(known.uncorrected or 0, logged.uncorrected or 0),
            "sysfs and kernel log",
            fatal=logged.fatal,
        )
    return MemoryErrors(
        edac=sysfs is not None,
        kernel_log_read=kernel_log_text is not None,
        controllers=tuple(
            sorted(merged.values(), key=lambda c: (c.name == UNATTRIBUTED, len(c.name), c.name))
        ),
    )
