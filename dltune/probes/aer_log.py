"""PCIe Advanced Error Reporting in the kernel log, per PCI function and severity, for kernels and
containers that keep no ``aer_dev_*`` counters in sysfs (before Linux 4.19, or AER statistics off).

What the kernel prints (drivers/pci/pcie/aer.c), one block per error:

- the Root Port that received the error message names its source: ``pcieport 0000:00:03.1: AER:
  Corrected error received: 0000:07:00.0`` (5.x; "Multiple " when more than one came in), ``...
  Correctable error message received from 0000:07:00.0`` (6.x), ``... Corrected error received:
  id=0010`` (2.6 to 4.x: the requester ID, bus << 8 | devfn, in the port's domain);
- the function that had the error: ``nvidia 0000:07:00.0: PCIe Bus Error: severity=Correctable,
  type=Data Link Layer, (Transmitter ID)`` (severities ``Corrected`` / ``Correctable``, ``Uncorrected
  (Non-Fatal)`` / ``Uncorrectable (Non-Fatal)``, ``Uncorrected (Fatal)`` / ``Uncorrectable (Fatal)``;
  some 4.x/5.x kernels put ``AER: `` before it), then ``device [10de:2184] error status/mask=...``,
  then one line per error bit, ``[12] Timeout`` (old kernels: ``[12] Replay Timer Timeout``), with
  ``(First)`` after the first one.

Counted as sysfs counts (aer.c increments a function's TOTAL_ERR_* once per block it prints for it,
and each bit's counter): one error per ``PCIe Bus Error`` line, its bits by name. A received message
whose block is not in the log: an uncorrectable one is one error of its source (the kernel prints the
block of every uncorrectable error it finds, ``type=Inaccessible`` where it cannot read the function,
so the block was rate-limited or the log cut); a correctable one is none (the kernel prints no block
and counts nothing when the function's status was already clear, as after a reset), nor is a source
the kernel could not find (``can't find device of ID0010``, newer kernels' ``(no details found)``).
A line that looks like AER but reads as none of these is counted as unreadable and never judged.

The window is gpu.xid's: the kernel log as ``dmesg`` gives it, the current boot. A text holding more
than one boot (a persistent log) counts only what follows its last boot banner (``Linux version ...``,
journalctl's ``-- Boot <id> --``); what came before is counted, not judged.
"""

from __future__ import annotations

import re

from dltune.records import field, record
from dltune.snapshot import AerCounts, AerLog, AerLogDevice

_ADDRESS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# "<address>: " (2.6 kernels: "<address>:pcie02: "), then "AER: " on some kernels.
_AT = rf"(?P<dev>{_ADDRESS})(?::pcie[0-9]+)?: (?:AER: )?"
_SEVERITY = (
    r"(?P<sev>Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrectable \(Non-Fatal\)"
    r"|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\))"
)
RECEIVED = re.compile(
    rf"{_AT}(?:Multiple )?{_SEVERITY} error (?:message )?received(?::| from) "
    rf"(?:(?P<src>{_ADDRESS})|id=(?P<id>[0-9a-fA-F]{{4}}))(?P<rest>.*)"
)
DETAIL = re.compile(
    rf"(?:(?P<driver>[A-Za-z0-9_.-]+) )?{_AT}PCIe Bus Error: severity={_SEVERITY}, type=(?P<type>[A-Za-z ]+),"
)
DEVICE_ID = re.compile(rf"{_AT}\s*device \[(?P<id>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\] error status/mask=")
BIT = re.compile(rf"{_AT}\s*\[\s*(?P<bit>[0-9]{{1,2}})\] (?P<name>\S.*?)\s*(?:\(First\))?\s*$")
NOT_FOUND = re.compile(rf"{_AT}can't find device of ID[0-9a-fA-F]{{4}}")
# What an AER line looks like, to count the ones no pattern above reads.
_LOOKS_LIKE_AER = re.compile(r"PCIe Bus Error|error (?:message )?received(?::| from)")
SERVICE = re.compile(r"\bAER:? enabled with IRQ\b|_OSC: OS now controls \[[^\]]*\bAER\b")
BOOT = re.compile(r"\bLinux version [0-9]|^-- (?:Boot [0-9a-fA-F]+|Reboot) --$")
# What every pattern above needs somewhere in a line (a boot banner, "AER", an AER message's words, or
# a PCI address before ": "): one search passes over the rest of a kernel log, most of its lines, which
# would otherwise meet every pattern in turn (tests/unit/test_aer_kernel_log.py holds the two readings
# equal).
_MAY_MATTER = re.compile(
    rf"Linux version|^-- |AER|PCIe Bus Error|error (?:message )?received|{_ADDRESS}(?::pcie[0-9]+)?: "
)
NO_DETAILS = "no details found"
KEPT_LINES = 5


def severity(word: str) -> str:
    """``fatal``, ``nonfatal`` or ``correctable``, as sysfs names its files (aer_dev_<severity>)."""
    if word.startswith("Correct"):
        return "correctable"
    return "fatal" if word.endswith("(Fatal)") else "nonfatal"


def requester(port: str, requester_id: str) -> str:
    """Old kernels' ``id=0010`` (bus << 8 | devfn) as an address in the domain of the port printing it."""
    number = int(requester_id, 16)
    return f"{port.split(':', 1)[0]}:{number >> 8:02x}:{(number & 0xFF) >> 3:02x}.{number & 0x7}"


@record
class _Function:
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("fatal", "nonfatal", "correctable"), 0)
    )
    named: dict[str, int] = field(default_factory=dict)
    driver: str | None = None
    pci_id: str | None = None
    lines: list[str] = field(default_factory=list)

    def error(self, kind: str, line: str) -> None:
        self.counts[kind] += 1
        if len(self.lines) < KEPT_LINES:
            self.lines.append(line)


@record
class _Boot:
    functions: dict[str, _Function] = field(default_factory=dict)
    service: bool = False
    # The message a port received whose block has not been printed yet: (severity, source, line).
    pending: tuple[str, str, str] | None = None
    # The function whose block the lines now read belong to, and its severity.
    block: tuple[str, str] | None = None

    def function(self, address: str) -> _Function:
        return self.functions.setdefault(address.lower(), _Function())

    def settle(self) -> None:
        """An uncorrectable message received that no block followed: one error of its source."""
        if self.pending is not None:
            kind, source, line = self.pending
            self.function(source).error(kind, line)
        self.pending = None

    def errors(self) -> int:
        return sum(sum(f.counts.values()) for f in self.functions.values())


def parse_aer_log(text: str) -> AerLog:
    boot = _Boot()
    boots = earlier = unreadable = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not _MAY_MATTER.search(line):
            continue
        if BOOT.search(line):
            boot.settle()
            boots, earlier, boot = boots + 1, earlier + boot.errors(), _Boot()
            continue
        if SERVICE.search(line):
            boot.service = True
        match = RECEIVED.search(line)
        if match:
            boot.settle()
            boot.service, boot.block = True, None
            source, kind = match["src"] or requester(match["dev"], match["id"]), severity(match["sev"])
            if kind != "correctable" and NO_DETAILS not in match["rest"]:
                boot.pending = (kind, source.lower(), line)
            continue
        match = DETAIL.search(line)
        if match:
            boot.service, boot.pending = True, None
            kind, address = severity(match["sev"]), match["dev"].lower()
            function = boot.function(address)
            function.error(kind, line)
            function.driver = function.driver or match["driver"]
            boot.block = (address, kind)
            continue
        if NOT_FOUND.search(line):
            boot.pending = boot.block = None
            continue
        match = DEVICE_ID.search(line) or BIT.search(line)
        if match and boot.block is not None and boot.block[0] == match["dev"].lower():
            function = boot.function(match["dev"])
            if "id" in match.groupdict():
                function.pci_id = function.pci_id or match["id"].lower()
            else:
                name = f"{boot.block[1]}:{match['name']}"
                function.named[name] = function.named.get(name, 0) + 1
            continue
        if _LOOKS_LIKE_AER.search(line):
            unreadable += 1
    boot.settle()
    devices = tuple(
        AerLogDevice(
            address,
            AerCounts(f.counts["fatal"], f.counts["nonfatal"], f.counts["correctable"], dict(f.named)),
            f.driver,
            f.pci_id,
            tuple(f.lines),
        )
        for address, f in sorted(boot.functions.items())
    )
    return AerLog(devices, boot.service, boots, earlier, unreadable)
