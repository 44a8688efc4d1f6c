"""The NVIDIA driver's messages in the kernel log (``NVRM: ...``), parsed into GPU events per PCI device.

Formats met on real machines: ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (current), ``NVRM: Xid
(0000:03:00): 13, ...`` (older drivers, no ``PCI:``), a GPU lost without an Xid line (``NVRM: GPU at
0000:01:00.0 has fallen off the bus.``), ``RmInitAdapter failed!`` (with or without the device),
GSP timeouts, NVLink Xids 144-150 that state ``Fatal``/``Nonfatal`` themselves, and Xid 154 (the
recovery action the driver asks for). Only what the driver logged since it last loaded counts
(``NVRM: loading NVIDIA UNIX ... Kernel Module``): a reloaded driver or a rebooted node starts clean.
"""

from __future__ import annotations

import re

from dltune.snapshot import UNKNOWN_DEVICE, GpuEvent, NvrmLog

_DEVICE = r"(?:PCI:)?(?P<dev>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
XID = re.compile(rf"NVRM: Xid \({_DEVICE}\): (?P<xid>[0-9]{{1,9}})(?![0-9])(?:,\s*(?P<rest>.*))?")
FALLEN_OFF = re.compile(rf"NVRM: GPU (?:at )?{_DEVICE}:? (?:GPU )?has fallen off the bus")
INIT_FAILED = re.compile(rf"NVRM: (?:GPU {_DEVICE}: )?RmInitAdapter failed")
INIT_FAILED_MINOR = re.compile(
    r"NVRM: rm_init_adapter(?:\((?P<minor>[0-9]+)\)"
    r"| failed for device bearing minor number (?P<minor2>[0-9]+))"
)
GSP_TIMEOUT = re.compile(r"NVRM: .*GSP.*(?:[Tt]imeout|timed out)")
SEVERITY_WORD = re.compile(r"\b(?P<word>Fatal|Nonfatal)\b")
RECOVERY_ACTION = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x(?P<to>[0-9a-fA-F]+) \((?P<name>[^)]*)\)"
)


def _device(match: re.Match[str]) -> str:
    device = match.groupdict().get("dev")
    return device.lower() if device else UNKNOWN_DEVICE


def _event(line: str) -> GpuEvent | None:
    match = XID.search(line)
    if match:
        rest = match["rest"] or ""
        xid = int(match["xid"])
        word = SEVERITY_WORD.search(rest) if 144 <= xid <= 150 else None
        action = RECOVERY_ACTION.search(rest) if xid == 154 else None
        return GpuEvent(
            _device(match),
            "xid",
            line,
            xid=xid,
            severity_word=word["word"] if word else None,
            recovery_action=int(action["to"], 16) if action else None,
            recovery_action_name=action["name"] if action else None,
        )
    match = FALLEN_OFF.search(line)
    if match:
        return GpuEvent(_device(match), "fallen_off_bus", line)
    match = INIT_FAILED.search(line)
    if match:
        return GpuEvent(_device(match), "init_failed", line)
    # _kgspLogXid119 banners repeat an Xid 119 line that is counted already.
    if GSP_TIMEOUT.search(line) and "_kgspLogXid" not in line:
        found = re.search(_DEVICE, line)
        return GpuEvent(found["dev"].lower() if found else UNKNOWN_DEVICE, "gsp_timeout", line)
    return None


def parse_nvrm(text: str) -> NvrmLog:
    events: list[GpuEvent] = []
    loads = dropped = 0
    minor_of_unknown_init: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if "NVRM" not in line:
            continue
        if DRIVER_LOAD.search(line):
            loads += 1
            dropped += len(events)
            events = []
            continue
        minor = INIT_FAILED_MINOR.search(line)
        if minor:
            minor_of_unknown_init = minor["minor"] or minor["minor2"]
            continue
        event = _event(line)
        if event is not None:
            events.append(event)
    if minor_of_unknown_init is not None:
        # "RmInitAdapter failed!" without a device names it on the next line only by minor number.
        events = [
            GpuEvent(f"minor {minor_of_unknown_init}", e.kind, e.line)
            if e.kind == "init_failed" and e.device == UNKNOWN_DEVICE
            else e
            for e in events
        ]
    return NvrmLog(tuple(events), loads, dropped)
