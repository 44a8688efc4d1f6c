"""The node's interconnects from sysfs and /proc: GPUs, NVSwitches and RDMA adapters on the PCI bus
(their AER counters and link width), RDMA ports (InfiniBand and RoCE: state, rate, error counters),
IPoIB interfaces, and whether Fabric Manager runs.

RDMA port attributes and counters are answered by the adapter's firmware on every read, so a faulty
adapter can block the reader: they are read by one `grep` child under the audit's deadline."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from dltune.probes.hostfs import HostFS
from dltune.probes.watchdog import Deadline, run_child
from dltune.snapshot import AerCounts, Fabric, IbPort, PciDevice
from dltune.text import decimal

PCI_DEVICES = "/sys/bus/pci/devices"
INFINIBAND = "/sys/class/infiniband"
NET = "/sys/class/net"
NVIDIA = "0x10de"
MELLANOX = "0x15b3"
# PCI class codes (class, subclass): display controllers, InfiniBand controllers, Ethernet, bridges
# "other" (an NVSwitch presents itself as one).
_GPU_CLASS = "0x03"
_INFINIBAND_CLASS = "0x0207"
_ETHERNET_CLASS = "0x0200"
_OTHER_BRIDGE_CLASS = "0x0680"
AER_FILES = {"fatal": "aer_dev_fatal", "nonfatal": "aer_dev_nonfatal", "correctable": "aer_dev_correctable"}
_AER_TOTALS = {"TOTAL_ERR_FATAL", "TOTAL_ERR_NONFATAL", "TOTAL_ERR_COR"}
# "RxErr 0", "Data Link Protocol 0", "TOTAL_ERR_COR 3": a name, then its count. Newlines may have
# been lost on the way (some tools print the file joined), so the count ends a pair, not a line.
_AER_PAIR = re.compile(r"([A-Za-z][A-Za-z_/ -]*?)\s+([0-9]+)")  # [0-9]: ASCII digits only
# Counters that say a link is unhealthy (IBA PortCounters, as sysfs names them).
IB_ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_IB_PORT_FILES = ("state", "phys_state", "rate", "link_layer")
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec(?:\s*\(([0-9]+X)[^)]*\))?")
IB_TIMEOUT_S = 5.0
_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
FABRIC_MANAGER_COMM = "nv-fabricmanager"


def parse_aer(text: str) -> tuple[int | None, dict[str, int]]:
    """The TOTAL_ERR_* count of one aer_dev_* file (else the sum of its counters), and its non-zero
    named counters. Both the kernel's short names (5.x: "RxErr") and long ones ("Data Link Protocol")."""
    total = None
    named: dict[str, int] = {}
    read = False
    for name, digits in _AER_PAIR.findall(text):
        name, count = name.strip(), decimal(digits)
        if count is None:  # more digits than a counter has
            continue
        read = True
        if name in _AER_TOTALS:
            total = count
        elif count:
            named[name] = count
    if total is None and named:
        total = sum(named.values())
    elif total is None and read:
        total = 0
    return total, named


def _int(text: str | None) -> int | None:
    return decimal(text) if text is not None else None


def _kind(vendor: str, device_class: str) -> str | None:
    if vendor == NVIDIA and device_class.startswith(_GPU_CLASS):
        return "gpu"
    if vendor == NVIDIA and device_class.startswith(_OTHER_BRIDGE_CLASS):
        return "nvswitch"
    if device_class.startswith(_INFINIBAND_CLASS) or (
        vendor == MELLANOX and device_class.startswith(_ETHERNET_CLASS)
    ):
        return "hca"
    return None


def read_aer(fs: HostFS, base: str) -> AerCounts | None:
    totals: dict[str, int | None] = {}
    nonzero: dict[str, int] = {}
    for kind, name in AER_FILES.items():
        text = fs.read_stripped(f"{base}/{name}")
        if text is None:
            totals[kind] = None
            continue
        totals[kind], named = parse_aer(text)
        nonzero.update({f"{kind}:{counter}": count for counter, count in named.items()})
    if all(value is None for value in totals.values()):
        return None
    return AerCounts(totals["fatal"], totals["nonfatal"], totals["correctable"], nonzero)


def read_pci_devices(fs: HostFS) -> tuple[PciDevice, ...]:
    """GPUs, NVSwitches and RDMA adapters (InfiniBand controllers, Mellanox Ethernet) on the PCI bus."""
    try:
        addresses = sorted(p.name for p in fs.path(PCI_DEVICES).iterdir())
    except OSError:
        return ()
    found = []
    for address in addresses:
        base = f"{PCI_DEVICES}/{address}"
        vendor, device_class = (
            fs.read_stripped(f"{base}/vendor") or "",
            fs.read_stripped(f"{base}/class") or "",
        )
        kind = _kind(vendor.lower(), device_class.lower())
        if kind is None:
            continue
        found.append(
            PciDevice(
                address=address.lower(),
                kind=kind,
                vendor=vendor.lower(),
                device_class=device_class.lower(),
                aer=read_aer(fs, base),
                link_width=_int(fs.read_stripped(f"{base}/current_link_width")),
                link_width_max=_int(fs.read_stripped(f"{base}/max_link_width")),
                link_speed=fs.read_stripped(f"{base}/current_link_speed"),
                link_speed_max=fs.read_stripped(f"{base}/max_link_speed"),
            )
        )
    return tuple(found)


def _state_name(text: str) -> str:
    """sysfs writes "4: ACTIVE", "5: LinkUp": the name after the number."""
    return text.partition(":")[2].strip() if ":" in text else text.strip()


def parse_rate(text: str) -> tuple[float | None, str | None]:
    """ "200 Gb/sec (2X NDR)" -> (200.0, "2X"); "10 Gb/sec (4X)" -> (10.0, "4X")."""
    match = _RATE.match(text)
    if not match:
        return None, None
    return float(match.group(1)), match.group(2)


def _port_files(fs: HostFS) -> list[tuple[str, str, list[str]]]:
    """(device, port, host paths to read) for every RDMA port."""
    ports = []
    try:
        devices = sorted(p.name for p in fs.path(INFINIBAND).iterdir())
    except OSError:
        return []
    for device in devices:
        try:
            numbers = sorted(p.name for p in fs.path(f"{INFINIBAND}/{device}/ports").iterdir())
        except OSError:
            continue
        for port in numbers:
            base = f"{INFINIBAND}/{device}/ports/{port}"
            files = [f"{base}/{name}" for name in _IB_PORT_FILES]
            files += [f"{base}/counters/{name}" for name in IB_ERROR_COUNTERS]
            ports.append((device, port, files))
    return ports


def parse_grep_lines(text: str, prefix: str) -> dict[str, str]:
    """`grep -H . FILE...` output ("path:value" lines) -> host path -> value, paths relative to the
    audited root given as ``prefix``."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep and path.startswith(prefix):
            values["/" + path[len(prefix) :].lstrip("/")] = value.strip()
    return values


def ports_from_values(
    fs: HostFS, ports: Iterable[tuple[str, str, list[str]]], values: Mapping[str, str]
) -> tuple[IbPort, ...]:
    found = []
    for device, port, files in ports:
        state, phys_state, rate, link_layer = (values.get(path) for path in files[: len(_IB_PORT_FILES)])
        number = decimal(port)
        if state is None or phys_state is None or number is None:
            continue
        gbps, width = parse_rate(rate or "")
        read = {
            name: decimal(values.get(path, ""))
            for name, path in zip(IB_ERROR_COUNTERS, files[len(_IB_PORT_FILES) :], strict=True)
        }
        counters = {name: count for name, count in read.items() if count is not None}
        found.append(
            IbPort(
                device=device,
                port=number,
                state=_state_name(state),
                phys_state=_state_name(phys_state),
                rate_gbps=gbps,
                width=width,
                link_layer=link_layer or "InfiniBand",
                counters=counters,
                pci_address=_pci_address(fs, device),
            )
        )
    return tuple(found)


def _pci_address(fs: HostFS, device: str) -> str | None:
    """The PCI function of an RDMA device: where its `device` link points."""
    name = fs.resolve(f"{INFINIBAND}/{device}/device").rsplit("/", 1)[-1]
    return name.lower() if _PCI_ADDRESS.fullmatch(name) else None


def read_ib_ports(fs: HostFS, deadline: Deadline | None = None) -> tuple[tuple[IbPort, ...], str | None]:
    """Every RDMA port, read by one child under the deadline; (ports, why not) ."""
    ports = _port_files(fs)
    if not ports:
        return (), None
    limit = deadline.limit(IB_TIMEOUT_S) if deadline else IB_TIMEOUT_S
    if limit <= 0:
        if deadline:
            deadline.missed["infiniband"] = "RDMA ports (fabric area): the audit's time ran out before it"
        return (), "not read: the audit's --timeout ran out first"
    prefix = str(fs.root).rstrip("/")
    paths = [prefix + path for _d, _p, files in ports for path in files]
    done = run_child(["grep", "-H", "-s", "--", ".", *paths], limit)
    if done.late:
        if deadline and deadline.expired():
            deadline.missed["infiniband"] = f"RDMA ports (fabric area): no answer within {limit:g} s"
        return (), f"the RDMA adapters did not answer within {limit:g} s (sysfs reads block in the driver)"
    return ports_from_values(fs, ports, parse_grep_lines(done.stdout, prefix)), None


def read_ipoib(fs: HostFS, interfaces: Iterable[str]) -> dict[str, str]:
    found = {}
    for name in interfaces:
        if "/" in name or name in ("", ".", ".."):
            found[name] = "absent"
            continue
        found[name] = fs.read_stripped(f"{NET}/{name}/operstate") or "absent"
    return found


def fabric_manager_running(fs: HostFS) -> bool:
    """Whether an nv-fabricmanager process runs (any user may read /proc/<pid>/comm)."""
    try:
        pids = [p.name for p in fs.path("/proc").iterdir() if decimal(p.name) is not None]
    except OSError:
        return False
    return any(fs.read_stripped(f"/proc/{pid}/comm") == FABRIC_MANAGER_COMM for pid in pids)


def read_fabric(
    fs: HostFS,
    expected: Mapping[str, Mapping[str, object]],
    nvidia_version_text: str | None,
    deadline: Deadline | None = None,
) -> Fabric:
    pci = read_pci_devices(fs)
    ports, error = read_ib_ports(fs, deadline)
    health = expected.get("health", {})
    ipoib = health.get("ipoib_interfaces", [])
    return Fabric(
        pci=pci,
        ib_ports=ports,
        ib_error=error,
        ipoib=read_ipoib(fs, [str(i) for i in ipoib] if isinstance(ipoib, list) else []),
        # looked for on every node: NVML may show an NVSwitch fabric the PCI bus does not
        fabric_manager_running=fabric_manager_running(fs),
        kernel_release=fs.read_stripped("/proc/sys/kernel/osrelease"),
        open_kernel_module=None
        if not nvidia_version_text
        else "Open Kernel Module" in nvidia_version_text.splitlines()[0],
    )
