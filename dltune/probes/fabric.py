"""The node's interconnects from sysfs and /proc: GPUs, NVSwitches and RDMA adapters on the PCI bus
(their AER counters and link width), RDMA ports (InfiniBand and RoCE: state, rate, error counters),
IPoIB interfaces, and whether Fabric Manager runs.

RDMA port attributes and counters are answered by the adapter's firmware on every read, so a faulty
adapter can block the reader: they are read by one `grep` child under the audit's deadline."""

from __future__ import annotations

import os
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
        host_path = _device_path(fs, address)
        bridges = _bridges_above(host_path)
        upstream_dir = host_path.rsplit("/", 1)[0] if bridges else None
        found.append(
            PciDevice(
                address=address.lower(),
                kind=kind,
                vendor=vendor.lower(),
                device_class=device_class.lower(),
                aer=read_aer(fs, base),
                link_width=decimal(fs.read_stripped(f"{base}/current_link_width")),
                link_width_max=decimal(fs.read_stripped(f"{base}/max_link_width")),
                link_speed=fs.read_stripped(f"{base}/current_link_speed"),
                link_speed_max=fs.read_stripped(f"{base}/max_link_speed"),
                host_bridge=_host_bridge(host_path),
                bridges=bridges,
                upstream_width_max=decimal(fs.read_stripped(f"{upstream_dir}/max_link_width"))
                if upstream_dir
                else None,
                upstream_speed_max=fs.read_stripped(f"{upstream_dir}/max_link_speed")
                if upstream_dir
                else None,
                numa_node=_numa(fs.read_stripped(f"{base}/numa_node")),
            )
        )
    return tuple(found)


def _device_path(fs: HostFS, address: str) -> str:
    """The device's place in the PCI hierarchy (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0):
    where /sys/bus/pci/devices/<address> links to, read by name under the audited root."""
    link = f"{PCI_DEVICES}/{address}"
    try:
        target = os.readlink(fs.path(link))
    except OSError:
        return link
    return os.path.normpath(os.path.join(PCI_DEVICES, target))


def _bridges_above(host_path: str) -> tuple[str, ...]:
    """The PCI bridges between the host bridge and the device, root port first."""
    names = [part.lower() for part in host_path.split("/") if _PCI_ADDRESS.fullmatch(part)]
    return tuple(names[:-1])


def _host_bridge(host_path: str) -> str | None:
    found = re.search(r"/(pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2})/", host_path)
    return found.group(1).lower() if found else None


def _numa(text: str | None) -> int | None:
    """A device's NUMA node; -1 (the firmware did not say) is None."""
    if text is None:
        return None
    number = decimal(text.lstrip("-"))
    return None if number is None or text.startswith("-") else number


def read_acs(fs: HostFS, bridges: Iterable[str]) -> dict[str, int | None]:
    """Each bridge's ACS Control register (PCI Express extended capability 0x000D, offset 6), from its
    config space; beyond its first 64 bytes only root may read it (see acs_control)."""
    found: dict[str, int | None] = {}
    for bridge in sorted(set(bridges)):
        try:
            config = fs.read_bytes(f"{PCI_DEVICES}/{bridge}/config", 4096)
        except OSError:
            found[bridge] = None
            continue
        found[bridge] = acs_control(config)
    return found


ACS_CAPABILITY = 0x000D
EXTENDED_CAPABILITIES = 0x100


def acs_control(config: bytes) -> int | None:
    """The ACS Control register of a config space dump; -1 where the device has no ACS capability,
    None where the extended config space was not readable (a user reads only 64 bytes)."""
    if len(config) <= EXTENDED_CAPABILITIES + 4:
        return None
    offset, seen = EXTENDED_CAPABILITIES, set()
    while offset and offset + 8 <= len(config) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == ACS_CAPABILITY:
            return int.from_bytes(config[offset + 6 : offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return -1


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


def processes_named(fs: HostFS, names: Iterable[str]) -> dict[str, str]:
    """The pid of one process per command name (any user may read /proc/<pid>/comm)."""
    wanted = set(names)
    try:
        pids = sorted((p.name for p in fs.path("/proc").iterdir() if decimal(p.name) is not None), key=int)
    except OSError:
        return {}
    found: dict[str, str] = {}
    for pid in pids:
        comm = fs.read_stripped(f"/proc/{pid}/comm")
        if comm in wanted and comm not in found:
            found[comm] = pid
    return found


_LOCKED = re.compile(r"^Max locked memory\s+(?P<soft>\S+)\s+(?P<hard>\S+)\s+bytes", re.MULTILINE)


def parse_memlock(limits: str) -> int | None:
    """The soft locked-memory limit of a /proc/<pid>/limits, in bytes; -1 for unlimited."""
    match = _LOCKED.search(limits)
    if not match:
        return None
    if match["soft"] == "unlimited":
        return -1
    return decimal(match["soft"])


def read_memlock(fs: HostFS, slurmd: str | None) -> tuple[int | None, str]:
    """The locked-memory limit jobs get: slurmd's own (pid ``slurmd``; Slurm starts job steps with it
    unless PropagateResourceLimits passes the user's), else this process's."""
    source = f"slurmd (pid {slurmd})" if slurmd else "this process"
    text = fs.read_stripped(f"/proc/{slurmd}/limits" if slurmd else "/proc/self/limits")
    return (parse_memlock(text) if text else None), source


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
    gpudirect = bool(health.get("gpudirect_rdma"))
    # One walk of /proc for both daemons (any user may read /proc/<pid>/comm).
    daemons = processes_named(fs, [FABRIC_MANAGER_COMM, "slurmd"])
    memlock, memlock_source = read_memlock(fs, daemons.get("slurmd")) if gpudirect else (None, "not read")
    return Fabric(
        pci=pci,
        # The switch ports (below the root ports): ACS there turns peer traffic away from the switch.
        acs=read_acs(fs, (b for d in pci if d.kind in ("gpu", "hca") for b in d.bridges[1:]))
        if gpudirect
        else {},
        memlock_bytes=memlock,
        memlock_source=memlock_source,
        nics={port.device: port.pci_address for port in ports if port.pci_address},
        ib_ports=ports,
        ib_error=error,
        ipoib=read_ipoib(fs, [str(i) for i in ipoib] if isinstance(ipoib, list) else []),
        # looked for on every node: NVML may show an NVSwitch fabric the PCI bus does not
        fabric_manager_running=FABRIC_MANAGER_COMM in daemons,
        kernel_release=fs.read_stripped("/proc/sys/kernel/osrelease"),
        open_kernel_module=None
        if not nvidia_version_text
        else "Open Kernel Module" in nvidia_version_text.splitlines()[0],
    )
