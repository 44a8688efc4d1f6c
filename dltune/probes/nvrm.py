"""The NVIDIA driver's messages in the kernel log (``NVRM: ...``), parsed into GPU events per PCI device.

Formats met on real machines: ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (current), ``NVRM: Xid
(0000:03:00): 13, ...`` (older drivers, no ``PCI:``), a GPU lost without an Xid line (``NVRM: GPU at
0000:01:00.0 has fallen off the bus.``), ``RmInitAdapter failed!`` (with or without the device),
GSP timeouts, NVLink Xids 144-150 that state ``Fatal``/``Nonfatal`` themselves, and Xid 154 (the
recovery action the driver asks for). GPUs the driver never brought up: the kernel's ``nvidia: probe
of 0000:5d:00.0 failed with error -1`` (``nvidia 0000:09:00.0: probe with driver nvidia failed`` on
newer kernels), ``NVRM: The NVIDIA GPU 0000:5d:00.0 (PCI ID: ...)`` (not supported by this release or
by the open modules, fallen off the bus at probe), an invalid BAR, and the summaries that name no
device (``The NVIDIA probe routine failed for N device(s)``, ``None of the NVIDIA devices were
initialized``, ``No NVIDIA GPU found``). NVSwitch SXids (``nvidia-nvswitchN: SXid (PCI:...): 12028,
Non-fatal, ...``) are parsed alongside.

Only the current load of the driver counts, as the log shows loads: nvidia_init_module registers with
PCI first (each device's probe messages), then prints "The NVIDIA probe routine failed for N
device(s)", then either gives up ("None of the NVIDIA devices were initialized", no banner) or prints
its banner ``NVRM: loading NVIDIA UNIX ...``: the probe failures of a load come BEFORE its banner. A
load starts at ``nvidia-nvlink: Nvlink Core is being initialized`` (the first thing nvidia.ko's init
prints) and ends at its unload (``Unregistered the Nvlink Core``) or its failure; drivers that print no
Nvlink line start a load at a second banner. Events of earlier loads are counted, not judged.
"""

from __future__ import annotations

import re

from dltune.snapshot import UNKNOWN_DEVICE, GpuEvent, NvrmLog

_ADDRESS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"  # domain:bus:device; the function dropped
_DEVICE = rf"(?:PCI:)?(?P<dev>{_ADDRESS})(?:\.[0-7])?"
# The same, unnamed: for patterns that hold it more than once.
_BDF = rf"(?:PCI:)?({_ADDRESS})(?:\.[0-7])?"
DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
LOAD_START = re.compile(r"nvidia-nvlink: Nvlink Core is being initialized")
# The driver loaded and saw no GPU at all: a GPU node's loss, or a node without GPUs.
_NO_GPU = r"NVRM: No NVIDIA (?:devices|graphics adapter|GPU)s? (?:probed|found)"
NO_GPU_FOUND = re.compile(_NO_GPU)
# An init that gave up: no GPU left to drive (the wordings of old and new drivers).
_GAVE_UP = (
    rf"NVRM: None of the NVIDIA (?:devices|graphics adapters) were initialized|{_NO_GPU}"
    r"|NVRM: NVIDIA init module failed"
)
# The end of a load: its unload, or an init that gave up.
LOAD_END = re.compile(rf"nvidia-nvlink: Unregistered (?:the )?Nvlink Core|{_GAVE_UP}")
XID = re.compile(rf"NVRM: Xid \({_DEVICE}\): (?P<xid>[0-9]{{1,9}})(?![0-9])(?:,\s*(?P<rest>.*))?")
FALLEN_OFF = re.compile(rf"NVRM: GPU (?:at )?{_DEVICE}:? (?:GPU )?has fallen off the bus")
INIT_FAILED = re.compile(rf"NVRM: (?:GPU {_DEVICE}: )?RmInitAdapter failed")
INIT_FAILED_MINOR = re.compile(
    r"NVRM: rm_init_adapter(?:\((?P<minor>[0-9]+)\)"
    r"| failed for device bearing minor number (?P<minor2>[0-9]+))"
)
GSP_TIMEOUT = re.compile(r"NVRM: .*GSP.*(?:[Tt]imeout|timed out)")
# A GPU the driver never brought up, named: the kernel's probe failure, NVRM's "The NVIDIA GPU <dev>
# (PCI ID ...)" (not supported, needs GSP, fallen off the bus at probe), an invalid BAR.
NOT_BROUGHT_UP = re.compile(
    rf"nvidia: probe of {_BDF} failed"
    rf"|nvidia {_BDF}: probe with driver nvidia failed"
    rf"|NVRM: The NVIDIA GPU {_BDF}\b"
    rf"|NVRM: BAR[0-9] is [0-9]+M @ 0x[0-9a-fA-F]+ \({_BDF}\)"
)
# The same, summarised without the device: judged only where no line of the load names one.
NOT_BROUGHT_UP_UNNAMED = re.compile(
    r"NVRM: The NVIDIA probe routine (?:failed|was not called) for [0-9]+ device"
    rf"|{_GAVE_UP}"
    r"|supported through the NVIDIA [0-9.x]+ Legacy drivers"
)
SXID = re.compile(rf"nvidia-nvswitch[0-9]*: SXid \({_DEVICE}\): (?P<code>[0-9]{{1,9}}),\s*(?P<rest>.*)")
SXID_SEVERITY = re.compile(r"^(?P<word>Fatal|Non-fatal|Correctable)\b")
SEVERITY_WORD = re.compile(r"\b(?P<word>Fatal|Nonfatal)\b")
RECOVERY_ACTION = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x(?P<to>[0-9a-fA-F]+) \((?P<name>[^)]*)\)"
)
DRIVER_LINE = re.compile(r"NVRM|nvidia")
PROBE_KINDS = frozenset({"not_brought_up", "no_gpu_found"})  # what a load prints before its banner


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
    match = SXID.search(line)
    if match:
        word = SXID_SEVERITY.search(match["rest"])
        return GpuEvent(
            match["dev"].lower(),
            "sxid",
            line,
            xid=int(match["code"]),
            severity_word=word["word"] if word else None,
        )
    match = NOT_BROUGHT_UP.search(line)
    if match:
        device = next(d for d in match.groups() if d)
        return GpuEvent(device.lower(), "not_brought_up", line)
    if NO_GPU_FOUND.search(line):
        return GpuEvent(UNKNOWN_DEVICE, "no_gpu_found", line)
    if NOT_BROUGHT_UP_UNNAMED.search(line):
        return GpuEvent(UNKNOWN_DEVICE, "not_brought_up", line)
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


class _Loads:
    """The log cut into loads of the driver; the last one started is the current load."""

    def __init__(self) -> None:
        self.finished: list[list[GpuEvent]] = []
        self.current: list[GpuEvent] = []
        self.started = False  # a start line, a banner or an event opened the current load
        self.start_logged = False  # opened by nvidia.ko's own first line
        self.banner_at: int | None = None  # events of the current load before its banner
        self.ended = False  # the current load gave up or was unloaded

    def start(self, logged: bool = False) -> None:
        if self.started:
            self.finished.append(self.current)
        self.current, self.started, self.banner_at, self.ended = [], True, None, False
        self.start_logged = logged

    def add(self, event: GpuEvent, line: str) -> None:
        if self.ended and self.finished and NOT_BROUGHT_UP_UNNAMED.search(line):
            self.finished[-1].append(event)  # the summary lines of the load that just gave up
            return
        if self.ended:
            self.start()
        self.started = True
        self.current.append(event)

    def banner(self) -> None:
        """A load's banner. Its probe messages came before it; a load whose start was not logged (an
        old driver without the Nvlink line) is only known by the banner, so a running driver's events
        (Xids, timeouts) before it belong to the load before, and a second banner starts a new load
        with the probe messages printed after the first one."""
        if self.ended:
            self.start()
        elif self.banner_at is not None:
            after = self.current[self.banner_at :]
            carried = [e for e in after if e.kind in PROBE_KINDS]
            self.current = self.current[: self.banner_at] + [e for e in after if e.kind not in PROBE_KINDS]
            self.start()
            self.current = carried
        elif not self.start_logged:
            earlier = [e for e in self.current if e.kind not in PROBE_KINDS]
            if earlier:
                self.finished.append(earlier)
                self.current = [e for e in self.current if e.kind in PROBE_KINDS]
        self.started = True
        self.banner_at = len(self.current)

    def end(self) -> None:
        if self.started and not self.ended:
            self.finished.append(self.current)
            self.current, self.started, self.banner_at = [], False, None
        self.ended = True


# long: one pass over the log keeps loads, minor numbers and SXids apart
def parse_nvrm(text: str) -> NvrmLog:
    loads = _Loads()
    banners = 0
    minor_of_unknown_init: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not DRIVER_LINE.search(line):
            continue
        if LOAD_START.search(line):
            loads.start(logged=True)
            continue
        if DRIVER_LOAD.search(line):
            banners += 1
            loads.banner()
            continue
        minor = INIT_FAILED_MINOR.search(line)
        if minor:
            minor_of_unknown_init = minor["minor"] or minor["minor2"]
            continue
        event = _event(line)
        if event is not None:
            loads.add(event, line)
        if LOAD_END.search(line):
            loads.end()
    current = loads.current if loads.started else (loads.finished[-1] if loads.finished else [])
    earlier = sum(len(load) for load in loads.finished if load is not current)
    if any(e.kind in ("not_brought_up", "init_failed") and e.device != UNKNOWN_DEVICE for e in current):
        # "failed for 2 device(s)" beside the two devices' own lines says nothing more.
        current = [e for e in current if not (e.kind in PROBE_KINDS and e.device == UNKNOWN_DEVICE)]
    if minor_of_unknown_init is not None:
        # "RmInitAdapter failed!" without a device names it on the next line only by minor number.
        current = [
            GpuEvent(f"minor {minor_of_unknown_init}", e.kind, e.line)
            if e.kind == "init_failed" and e.device == UNKNOWN_DEVICE
            else e
            for e in current
        ]
    gpu_events = tuple(e for e in current if e.kind != "sxid")
    switch_events = tuple(e for e in current if e.kind == "sxid")
    return NvrmLog(gpu_events, banners, earlier, switch_events)
