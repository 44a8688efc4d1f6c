"""Area ``fabric``: the interconnects multi-node training depends on: InfiniBand/RoCE ports, PCIe
errors of GPUs and adapters, NVLink, Fabric Manager, GPUDirect RDMA.

Health is not tuning: a fault (a port cabled but not linking, an NVLink down, an NVSwitch system
without Fabric Manager) fails with or without a manifest. What only the site knows (which ports must
be up and at what rate, whether GPUDirect RDMA is required, how many NVLinks a GPU has) comes from
the dltune role's ``health`` fragment. Counters are judged by their level and, when the previous
audit's output is given, by how much they rose since."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dltune.checks import check, counter_rises
from dltune.model import FailureClass, Result, Status, human_size
from dltune.snapshot import AerCounts, AerLogDevice, Gpu, IbPort, PciDevice, Snapshot

# PCIe AER: correctable errors are retried by the link layer; many of them mean a marginal link
# (riser, slot, signal integrity) that will soon drop to a lower speed or fail.
AER_CORRECTABLE_WARN = 1000
AER_CORRECTABLE_RISE_WARN = 100
# InfiniBand PortCounters: levels since the counters were last cleared (a warn each), and rises
# since the previous audit that mean the link is getting worse now. Width-limited counters stop at
# their maximum (link_downed and link_error_recovery are 8-bit, symbol_error 16-bit).
IB_COUNTER_WARN = {
    "symbol_error": 100,
    "link_error_recovery": 10,
    "link_downed": 5,
    "port_rcv_errors": 100,
    "local_link_integrity_errors": 10,
    "excessive_buffer_overrun_errors": 10,
}
IB_COUNTER_RISE_WARN = {
    "symbol_error": 10,
    "link_error_recovery": 1,
    "link_downed": 1,
    "port_rcv_errors": 10,
    "local_link_integrity_errors": 1,
    "excessive_buffer_overrun_errors": 1,
}
IB_COUNTER_MAX = {"symbol_error": 0xFFFF, "link_error_recovery": 0xFF, "link_downed": 0xFF}
# NVLink: the data link layer replays (CRC) and recovers links by itself; a steady stream of either
# costs bandwidth, and recoveries stall every transfer on the link.
NVLINK_REPLAY_WARN = 1000
NVLINK_RECOVERY_WARN = 10
NVLINK_RISE_WARN = {"replay": 100, "recovery": 1, "crc_flit": 100, "crc_data": 100}
# DMA-BUF (the GPUDirect RDMA path NVIDIA recommends with its open kernel modules) needs Linux 5.12.
DMABUF_KERNEL = (5, 12)

DEVICE_NAMES = {"gpu": "GPU", "nvswitch": "NVSwitch", "hca": "adapter"}
HEALTH_VARIABLES = "the dltune role's dltune_health_* variables"


def _health(snap: Snapshot) -> Mapping[str, Any]:
    return snap.expected.get("health", {})


def _gpudirect_not_required(snap: Snapshot, check_id: str) -> Result | None:
    """The skip of a GPUDirect RDMA check on a node the site does not require it of."""
    if _health(snap).get("gpudirect_rdma"):
        return None
    return Result(check_id, Status.SKIP, f"GPUDirect RDMA not required ({HEALTH_VARIABLES})")


# ------------------------------------------------------------------------------------------ PCIe AER


def _device_label(snap: Snapshot, device: PciDevice) -> str:
    for gpu in snap.nvml.gpus:
        if gpu.pci_bus_id == device.address:
            return f"GPU {gpu.index} ({device.address})"
    return f"{DEVICE_NAMES.get(device.kind, device.kind)} {device.address}"


# What the kernel log says sits at a function the PCI scan did not list: the vendor in its
# "device [vendor:device]" line, else the driver that printed it.
LOG_VENDORS = {"10de": "NVIDIA", "15b3": "Mellanox"}
LOG_DRIVERS = {
    "nvidia": "NVIDIA",
    "nvidia-nvswitch": "NVIDIA",
    "mlx5_core": "Mellanox",
    "mlx4_core": "Mellanox",
}
SOURCE_SYSFS = "sysfs"
SOURCE_LOG = "kernel log"


def _below(snap: Snapshot, devices: Sequence[PciDevice]) -> str:
    names = [_device_label(snap, d) for d in devices[:2]]
    return ", ".join(names) + (f" and {len(devices) - 2} more" if len(devices) > 2 else "")


def _logged_label(snap: Snapshot, logged: AerLogDevice) -> str | None:
    """What sits at a function the kernel log names, where it is not a GPU, NVSwitch or adapter of the
    PCI scan: the port above one (its link: the root port or a switch port), another function of one
    (a GPU's audio function shares its link), or an NVIDIA or Mellanox function the scan did not list
    (no PCI tree here) as the log names it. None: none of these, not this check's."""
    address = logged.address
    below = [d for d in snap.fabric.pci if address in d.bridges]
    if below:
        port = "root port" if all(d.bridges[0] == address for d in below) else "switch port"
        return f"PCIe {port} {address} above {_below(snap, below)}"
    for device in snap.fabric.pci:
        if device.address.rsplit(".", 1)[0] == address.rsplit(".", 1)[0]:
            return f"function {address} of {_device_label(snap, device)}"
    vendor = LOG_VENDORS.get((logged.pci_id or "").split(":")[0]) or LOG_DRIVERS.get(logged.driver or "")
    if vendor is None:
        return None
    named = " ".join(
        part for part in (logged.driver, f"[{logged.pci_id}]" if logged.pci_id else None) if part
    )
    return f"{vendor} device {address} ({named}, as the kernel log names it)"


@check("fabric.pcie_aer")
def pcie_aer(snap: Snapshot) -> list[Result]:
    """PCIe Advanced Error Reporting errors of every GPU, NVSwitch and RDMA adapter since boot: the
    kernel's sysfs counters where it keeps them, else its log of the current boot (and the log alone for
    the ports above them and their other functions, whose counters dltune does not read)."""
    devices = snap.fabric.pci
    log = snap.kernel_log
    logged = {d.address: d for d in log.aer.devices} if log.text is not None else {}
    fabric = {d.address for d in devices}
    others = [
        (entry, label)
        for address, entry in sorted(logged.items())
        if address not in fabric and (label := _logged_label(snap, entry)) is not None
    ]
    if not devices and not others:
        return [Result("fabric.pcie_aer", Status.SKIP, "no GPU, NVSwitch or RDMA adapter on the PCI bus")]
    # A kernel that keeps counters keeps them for every function with an AER capability: one without
    # them there has none, and only its log lines (if any) speak for it.
    counted = any(d.aer is not None for d in devices)
    results = []
    for device in devices:
        label = _device_label(snap, device)
        if device.aer is not None:
            results.append(_judge_aer(snap, device.address, label, device.aer))
        elif device.address in logged:
            results.append(_judge_logged(snap, label, logged[device.address]))
        elif not counted and log.text is not None and log.aer.service:
            results.append(_judge_logged(snap, label, AerLogDevice(device.address, AerCounts(0, 0, 0))))
    results.extend(_judge_logged(snap, label, entry) for entry, label in others)
    if not results:
        why = (
            f"kernel log not read: {log.error}"
            if log.text is None
            else "the kernel log shows no AER service in this boot either"
        )
        return [
            Result(
                "fabric.pcie_aer",
                Status.SKIP,
                f"the kernel keeps no AER statistics for the {len(devices)} GPU/adapter device(s) here "
                f"(AER off, or handled by the firmware); {why}",
            )
        ]
    return results


def _judge_logged(snap: Snapshot, label: str, entry: AerLogDevice) -> Result:
    """A function's errors in the kernel log, judged as its sysfs counters would be."""
    extra: dict[str, Any] = {"lines": list(entry.lines)}
    if entry.driver:
        extra["driver"] = entry.driver
    if entry.pci_id:
        extra["pci_id"] = entry.pci_id
    return _judge_aer(snap, entry.address, label, entry.counts, SOURCE_LOG, extra)


def _judge_aer(
    snap: Snapshot,
    address: str,
    label: str,
    aer: AerCounts,
    source: str = SOURCE_SYSFS,
    extra: Mapping[str, Any] | None = None,
) -> Result:
    totals = (("fatal", aer.fatal), ("nonfatal", aer.nonfatal), ("correctable", aer.correctable))
    counters = {name: value for name, value in totals if value is not None}
    # source: which decided, the kernel's counters ("sysfs") or its log ("kernel log"), never both.
    evidence = {"counters": counters, "nonzero": dict(aer.nonzero), "source": source, **(extra or {})}
    since = "since boot" if source == SOURCE_SYSFS else "in the kernel log since boot"
    rose = counter_rises(snap, "fabric.pcie_aer", address, counters)
    if aer.fatal:
        return Result(
            "fabric.pcie_aer",
            Status.FAIL,
            f"{label}: {aer.fatal} fatal PCIe error(s) {since}: the link was reset under the driver",
            address,
            evidence,
            "drain the node; reseat the device or riser and check the slot (the kernel log names the "
            "error); replace it if the errors return",
            critical=True,
        )
    if aer.nonfatal:
        return Result(
            "fabric.pcie_aer",
            Status.FAIL,
            f"{label}: {aer.nonfatal} uncorrectable (non-fatal) PCIe error(s) {since}: transfers were lost",
            address,
            evidence,
            "check the kernel log for the failing requests; reseat or replace the device if they recur",
        )
    if (aer.correctable or 0) >= AER_CORRECTABLE_WARN or rose.get(
        "correctable", 0
    ) >= AER_CORRECTABLE_RISE_WARN:
        rise = f", {rose['correctable']} since the previous audit" if rose.get("correctable") else ""
        return Result(
            "fabric.pcie_aer",
            Status.WARN,
            f"{label}: {aer.correctable} correctable PCIe errors {since}{rise}: a marginal link",
            address,
            {**evidence, "rose": rose},
            "a marginal PCIe link (riser, slot, cable) retries transfers and later drops speed or "
            "fails: reseat the device at the next maintenance",
        )
    return Result(
        "fabric.pcie_aer",
        Status.PASS,
        f"{label}: no uncorrectable PCIe errors, {aer.correctable or 0} correctable {since}",
        address,
        evidence,
    )


# ----------------------------------------------------------------------------- InfiniBand / RoCE


def _expected_ports(snap: Snapshot) -> list[Mapping[str, Any]]:
    return [p for p in _health(snap).get("ib_ports", []) if isinstance(p, Mapping)]


def _expectation_for(port: IbPort, expected: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for wanted in expected:
        if (
            fnmatch.fnmatchcase(port.device, str(wanted.get("device", "")))
            and wanted.get("port", 1) == port.port
        ):
            return wanted
    return None


def _no_ports(snap: Snapshot, check_id: str) -> Result | None:
    fabric = snap.fabric
    if fabric.ib_error:
        return Result(
            check_id,
            Status.FAIL,
            f"cannot judge the RDMA ports: {fabric.ib_error}",
            remedy="an adapter that does not answer in sysfs is wedged: drain the node and reset or "
            "replace it",
            critical=True,
        )
    if not fabric.ib_ports and not _expected_ports(snap):
        return Result(check_id, Status.SKIP, "no InfiniBand or RoCE ports on this node, and none expected")
    return None


# A port that drops and comes back (a flapping cable, a switch reboot): transient (debounced).
@check("fabric.ib_ports", needs=("manifest:health",), failure=FailureClass.TRANSIENT)
def ib_ports(snap: Snapshot) -> list[Result]:
    """Every expected port ACTIVE/LinkUp at its rate and width; an enabled port without a link."""
    empty = _no_ports(snap, "fabric.ib_ports")
    if empty:
        return [empty]
    expected = _expected_ports(snap)
    results = [_judge_port(port, _expectation_for(port, expected)) for port in snap.fabric.ib_ports]
    for wanted in expected:
        if not any(_expectation_for(port, [wanted]) for port in snap.fabric.ib_ports):
            name = f"{wanted.get('device')}/{wanted.get('port', 1)}"
            results.append(
                Result(
                    "fabric.ib_ports",
                    Status.FAIL,
                    f"expected RDMA port {name} does not exist (adapter missing, renamed, or its driver "
                    "not loaded)",
                    name,
                    {"expected": dict(wanted), "present": [p.name for p in snap.fabric.ib_ports]},
                    "check the adapter (lspci, the mlx5_core driver) and the device names in "
                    f"{HEALTH_VARIABLES} (rdma-core's persistent names differ from mlx5_N)",
                    critical=True,
                )
            )
    return results


def _port_evidence(port: IbPort, wanted: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "state": port.state,
        "phys_state": port.phys_state,
        "rate_gbps": port.rate_gbps,
        "width": port.width,
        "link_layer": port.link_layer,
        "expected": dict(wanted) if wanted else None,
    }


# long: one verdict per port state, each with its own words and remedy
def _judge_port(port: IbPort, wanted: Mapping[str, Any] | None) -> Result:
    evidence = _port_evidence(port, wanted)
    kind = "RoCE" if port.link_layer == "Ethernet" else "InfiniBand"
    if not port.linked:
        if wanted is None and port.phys_state == "Disabled":
            return Result(
                "fabric.ib_ports",
                Status.PASS,
                f"{kind} port disabled and not expected: unused",
                port.name,
                evidence,
            )
        if port.phys_state == "LinkUp":
            what = f"link up but port {port.state}" + (
                ": no subnet manager has configured it" if port.state in ("INIT", "ARMED") else ""
            )
            remedy = (
                "check that a subnet manager (opensm, or the switch's) runs on this fabric and sees the port"
            )
        elif port.phys_state == "Polling":
            what = "enabled but no link (Polling): cable unplugged or faulty, or the switch port down"
            remedy = "check the cable and the switch port; disable the port if it is meant to be unused"
        else:
            what = f"{port.state}/{port.phys_state}"
            remedy = "bring the port up (cable, switch port, adapter firmware)"
        return Result(
            "fabric.ib_ports",
            Status.FAIL if wanted else Status.WARN,
            f"{kind} port {what}" + ("" if wanted else " (not listed in the expected ports)"),
            port.name,
            evidence,
            remedy,
            critical=wanted is not None,
            # A port left in INIT/ARMED is the subnet manager's to configure: one SM down, every port so.
            shared_dependency="InfiniBand subnet manager"
            if port.phys_state == "LinkUp" and port.state in ("INIT", "ARMED")
            else None,
        )
    short = _below_expectation(port, wanted)
    if short:
        return Result(
            "fabric.ib_ports",
            Status.FAIL,
            f"{kind} port active at {short}",
            port.name,
            evidence,
            "a link that trained below its rate or width has a bad cable, transceiver or port: "
            "reseat or replace it (ibdiagnet, mlxlink -d <dev> show the lane errors)",
            metrics={"rate_gbps": port.rate_gbps or 0.0},
        )
    rate = f"{port.rate_gbps:g} Gb/s" if port.rate_gbps is not None else "unknown rate"
    return Result(
        "fabric.ib_ports",
        Status.PASS,
        f"{kind} port active at {rate}" + (f" ({port.width})" if port.width else ""),
        port.name,
        evidence,
        metrics={"rate_gbps": port.rate_gbps or 0.0},
    )


def _below_expectation(port: IbPort, wanted: Mapping[str, Any] | None) -> str | None:
    if not wanted:
        return None
    rate = wanted.get("rate_gbps")
    if rate is not None and (port.rate_gbps is None or port.rate_gbps < float(rate)):
        return (
            f"{port.rate_gbps if port.rate_gbps is not None else 'an unknown rate'} Gb/s, expected {rate:g}"
        )
    width = wanted.get("width")
    if width and port.width != width:
        return f"width {port.width or 'unknown'}, expected {width}"
    layer = wanted.get("link_layer")
    if layer and port.link_layer != layer:
        return f"link layer {port.link_layer}, expected {layer}"
    return None


@check("fabric.ib_errors")
def ib_errors(snap: Snapshot) -> list[Result]:
    """Link error counters of the active ports: their level, and their rise since the previous audit."""
    empty = _no_ports(snap, "fabric.ib_errors")
    if empty:
        return [empty]
    active = [port for port in snap.fabric.ib_ports if port.linked]
    if not active:
        return [Result("fabric.ib_errors", Status.SKIP, "no active RDMA port to judge (see fabric.ib_ports)")]
    return [_judge_ib_counters(snap, port) for port in active]


def _judge_ib_counters(snap: Snapshot, port: IbPort) -> Result:
    counters = dict(port.counters)
    rose = counter_rises(snap, "fabric.ib_errors", port.name, counters)
    high = {name: value for name, value in counters.items() if value >= IB_COUNTER_WARN.get(name, 1 << 62)}
    rising = {name: value for name, value in rose.items() if value >= IB_COUNTER_RISE_WARN.get(name, 1 << 62)}
    saturated = [name for name, value in counters.items() if value >= IB_COUNTER_MAX.get(name, 1 << 62)]
    evidence = {"counters": counters, "rose": rose, "saturated": saturated}
    if not counters:
        return Result("fabric.ib_errors", Status.SKIP, "the port's error counters cannot be read", port.name)
    if rising.get("link_downed"):
        return Result(
            "fabric.ib_errors",
            Status.FAIL,
            f"the link went down {rising['link_downed']} time(s) since the previous audit: it flaps",
            port.name,
            evidence,
            "a flapping link breaks NCCL and MPI jobs: drain the node, then replace the cable or "
            "transceiver (mlxlink shows the physical errors)",
        )
    if high or rising:
        described = ", ".join(
            [f"{name} {counters[name]}" for name in sorted(high)]
            + [f"{name} +{value} since the previous audit" for name, value in sorted(rising.items())]
        )
        return Result(
            "fabric.ib_errors",
            Status.WARN,
            f"link errors: {described}"
            + (f" ({', '.join(saturated)} at the counter's maximum)" if saturated else ""),
            port.name,
            evidence,
            "errors that keep rising mean a marginal cable or transceiver: check it with mlxlink or "
            "ibdiagnet, then clear the counters (perfquery -x -R) to watch the rate",
        )
    return Result("fabric.ib_errors", Status.PASS, "no link errors above the thresholds", port.name, evidence)


@check("fabric.hca_pcie")
def hca_pcie(snap: Snapshot) -> list[Result]:
    """An RDMA adapter on fewer PCIe lanes than it has caps its bandwidth below the wire's."""
    adapters = [d for d in snap.fabric.pci if d.kind == "hca"]
    if not adapters:
        return [Result("fabric.hca_pcie", Status.SKIP, "no RDMA adapter on the PCI bus")]
    return [_judge_hca_link(device) for device in adapters]


def expected_link(device: PciDevice) -> tuple[int | None, float | None, str]:
    """The width and speed the device's link should train at: the lesser of what the device and the
    port above it (its slot) support. A Gen5 adapter in a Gen4 slot runs at Gen4 by design (judging the
    device end alone cordoned healthy nodes: scitix/sichek PR #122)."""
    width = device.link_width_max or None
    speed = (_gts(device.link_speed_max) or None) if device.link_speed_max else None
    limited_by = "the device"
    slot_speed = _gts(device.upstream_speed_max) if device.upstream_speed_max else 0.0  # "Unknown": 0
    if device.upstream_width_max and width is not None and device.upstream_width_max < width:
        width, limited_by = device.upstream_width_max, f"its slot ({device.bridges[-1]})"
    if slot_speed and speed is not None and slot_speed < speed:
        speed, limited_by = slot_speed, f"its slot ({device.bridges[-1]})"
    return width, speed, limited_by


def _judge_hca_link(device: PciDevice) -> Result:
    evidence = {
        "width": device.link_width,
        "width_max": device.link_width_max,
        "speed": device.link_speed,
        "speed_max": device.link_speed_max,
        "slot_width_max": device.upstream_width_max,
        "slot_speed_max": device.upstream_speed_max,
    }
    if device.link_width is None or device.link_width_max is None:
        return Result(
            "fabric.hca_pcie", Status.SKIP, "its PCIe link width is not in sysfs", device.address, evidence
        )
    width, speed, limited_by = expected_link(device)
    evidence["expected_limited_by"] = limited_by
    if width is not None and device.link_width < width:
        return Result(
            "fabric.hca_pcie",
            Status.FAIL,
            f"adapter on x{device.link_width} of the x{width} PCIe lanes it and its slot support: its "
            "bandwidth is capped below the network's",
            device.address,
            evidence,
            "reseat the adapter in a full-width slot (or its riser); check the BIOS bifurcation setting",
        )
    if device.link_speed and speed is not None and _gts(device.link_speed) < speed:
        return Result(
            "fabric.hca_pcie",
            Status.WARN,
            f"adapter's PCIe link at {device.link_speed}, below the {speed:g} GT/s it and its slot support",
            device.address,
            evidence,
            "a link that trained at a lower generation has a signal problem or a BIOS limit: reseat, "
            "and check the slot's configured generation",
        )
    return Result(
        "fabric.hca_pcie",
        Status.PASS,
        f"adapter on x{device.link_width}"
        + (f" at {device.link_speed}" if device.link_speed else "")
        + (f" (limited by {limited_by}, as designed)" if limited_by != "the device" else ""),
        device.address,
        evidence,
    )


# Numbers in sysfs text, ASCII only: float() would also take "nan", "inf" and other scripts' digits.
_GTS = re.compile(r"\s*([0-9]{1,6}(?:\.[0-9]{1,6})?)(?![0-9.])")
_RELEASE = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})(?![0-9])")


def _gts(speed: str) -> float:
    match = _GTS.match(speed)
    return float(match.group(1)) if match else 0.0


@check("fabric.ipoib", needs=("manifest:health",))
def ipoib(snap: Snapshot) -> list[Result]:
    wanted = snap.fabric.ipoib
    if not wanted:
        return [Result("fabric.ipoib", Status.SKIP, f"no IPoIB interface expected ({HEALTH_VARIABLES})")]
    results = []
    for name, state in sorted(wanted.items()):
        if state == "up":
            results.append(
                Result("fabric.ipoib", Status.PASS, "IPoIB interface up", name, {"operstate": state})
            )
            continue
        results.append(
            Result(
                "fabric.ipoib",
                Status.FAIL,
                "IPoIB interface does not exist" if state == "absent" else f"IPoIB interface {state}",
                name,
                {"operstate": state},
                "bring the interface up (netplan, ib_ipoib loaded); its port must be ACTIVE first",
                critical=True,
            )
        )
    return results


# ------------------------------------------------------------------------------------- GPUDirect


def _kernel_at_least(release: str | None, wanted: tuple[int, int]) -> bool:
    match = _RELEASE.match(release or "")
    return match is not None and (int(match.group(1)), int(match.group(2))) >= wanted


@check("fabric.gpudirect", needs=("manifest:health",))
def gpudirect(snap: Snapshot) -> Result:
    """Where required: nvidia_peermem loaded, or the DMA-BUF path (open kernel module, Linux >= 5.12)."""
    not_required = _gpudirect_not_required(snap, "fabric.gpudirect")
    if not_required:
        return not_required
    fabric = snap.fabric
    evidence = {
        "nvidia_peermem": "nvidia_peermem" in snap.kernel_modules,
        "open_kernel_module": fabric.open_kernel_module,
        "kernel": fabric.kernel_release,
    }
    if "nvidia_peermem" in snap.kernel_modules:
        return Result(
            "fabric.gpudirect", Status.PASS, "GPUDirect RDMA through nvidia_peermem", evidence=evidence
        )
    if fabric.open_kernel_module and _kernel_at_least(fabric.kernel_release, DMABUF_KERNEL):
        return Result(
            "fabric.gpudirect",
            Status.PASS,
            f"GPUDirect RDMA through DMA-BUF (open kernel module, Linux {fabric.kernel_release})",
            evidence=evidence,
        )
    why = (
        "no NVIDIA kernel module is loaded"
        if fabric.open_kernel_module is None
        else "nvidia_peermem is not loaded and DMA-BUF needs the open kernel module on Linux 5.12 or later"
    )
    return Result(
        "fabric.gpudirect",
        Status.FAIL,
        f"GPUDirect RDMA is required but not available: {why}; NCCL copies through host memory",
        evidence=evidence,
        remedy="load nvidia_peermem (modprobe nvidia_peermem; list it in /etc/modules-load.d), or use "
        "the open kernel modules (nvidia_driver_open) for DMA-BUF",
    )


# ---------------------------------------------------------------------------------------- NVLink


FABRIC_STATES = {1: "not started", 2: "in progress", 3: "completed"}


def _nvswitches(snap: Snapshot) -> int:
    """NVSwitches on the PCI bus, or recorded by the nvidia_driver role; at least one where a GPU is
    registered with an NVLink fabric (Hopper's NVSwitches need not show on the PCI bus)."""
    on_bus = sum(1 for d in snap.fabric.pci if d.kind == "nvswitch")
    recorded = int(snap.expected.get("nvidia_driver", {}).get("nvswitch_count") or 0)
    in_fabric = any(g.fabric_state in FABRIC_STATES for g in snap.nvml.gpus)
    return max(on_bus, recorded, 1 if in_fabric else 0)


def _unregistered(snap: Snapshot) -> dict[int, str]:
    """GPUs that the fabric has not (successfully) taken in: index -> NVML's state."""
    found = {}
    for gpu in snap.nvml.gpus:
        if gpu.fabric_state in (1, 2):
            found[gpu.index] = FABRIC_STATES[gpu.fabric_state]
        elif gpu.fabric_state == 3 and gpu.fabric_status:
            found[gpu.index] = f"completed with error {gpu.fabric_status}"
    return found


@check("fabric.nvlink", needs=("manifest:health",))
def nvlink(snap: Snapshot) -> list[Result]:
    """Every NVLink a GPU supports is active (PCIe cards have none), and its error counters are low."""
    if not snap.nvml.available:
        why = "NVML did not answer" if snap.nvml.hung else f"NVML not available ({snap.nvml.error})"
        return [Result("fabric.nvlink", Status.SKIP, why)]
    gpus = [g for g in snap.nvml.gpus if g.error is None and g.unreadable is None]
    if not gpus:
        return [Result("fabric.nvlink", Status.SKIP, "no readable GPU")]
    return [_judge_nvlink(snap, gpu) for gpu in gpus]


# long: the expected-link rules (manifest, NVSwitch, PCIe card) and the counters, per GPU
def _judge_nvlink(snap: Snapshot, gpu: Gpu) -> Result:
    subject = f"{gpu.index}:{gpu.uuid}" if gpu.uuid else str(gpu.index)
    wanted = _health(snap).get("nvlink_links_per_gpu")
    links = gpu.nvlinks
    if links is None or not links:
        if wanted:
            return Result(
                "fabric.nvlink",
                Status.FAIL,
                f"GPU {gpu.index}: NVML reports no NVLink, {wanted} expected",
                subject,
                {"expected_links": wanted},
                "check the GPU's NVLink bridge or baseboard (nvidia-smi nvlink -s)",
                critical=True,
            )
        if links is None:
            return Result("fabric.nvlink", Status.SKIP, f"GPU {gpu.index}: NVLink state not read", subject)
        # NVML answers NotSupported on every link of a PCIe card, and also of an SXM card passed alone
        # into a VM (an H200 SXM seen so on 2026-11-26): the name cannot tell which.
        return Result(
            "fabric.nvlink",
            Status.SKIP,
            f"GPU {gpu.index} reports no NVLink (a PCIe card, or links this VM or container does not see)",
            subject,
        )
    active = [link.link for link in links if link.active]
    down = [link.link for link in links if not link.active]
    counters = {f"{link.link}:{name}": value for link in links for name, value in link.counters().items()}
    evidence = {"active": active, "down": down, "expected_links": wanted, "counters": counters}
    needed = wanted if wanted is not None else (len(links) if active or _nvswitches(snap) else 0)
    if len(active) < needed:
        return Result(
            "fabric.nvlink",
            Status.FAIL,
            f"GPU {gpu.index}: {len(active)} of {needed} NVLinks active (down: {', '.join(map(str, down))}); "
            "collectives over NVLink slow down or hang",
            subject,
            evidence,
            "drain the node: reset the GPU (or the baseboard) and check the links with nvidia-smi nvlink "
            "-s; on NVSwitch systems check Fabric Manager's log",
            critical=True,
        )
    return _nvlink_errors(snap, gpu, subject, evidence)


def _by_link(item: tuple[str, int]) -> tuple[int, str]:
    """Counters "<link>:<name>" in link order (link 2 before link 10), then by name."""
    link, _, name = item[0].partition(":")
    return (int(link) if link.isdigit() else 1 << 30, name)


def _nvlink_errors(snap: Snapshot, gpu: Gpu, subject: str, evidence: dict[str, Any]) -> Result:
    counters: dict[str, int] = evidence["counters"]
    rose = counter_rises(snap, "fabric.nvlink", subject, counters)
    high = [
        f"link {key.split(':')[0]} {key.split(':')[1]} {value}"
        for key, value in sorted(counters.items(), key=_by_link)
        if (key.endswith(":recovery") and value >= NVLINK_RECOVERY_WARN)
        or (not key.endswith(":recovery") and value >= NVLINK_REPLAY_WARN)
    ]
    high += [
        f"link {key.split(':')[0]} {key.split(':')[1]} +{value} since the previous audit"
        for key, value in sorted(rose.items(), key=_by_link)
        if value >= NVLINK_RISE_WARN.get(key.split(":")[1], 1 << 62)
    ]
    active = len(evidence["active"])
    if high:
        return Result(
            "fabric.nvlink",
            Status.WARN,
            f"GPU {gpu.index}: NVLink errors: {'; '.join(high)}",
            subject,
            {**evidence, "rose": rose},
            "errors that keep rising mean a failing link: watch them (nvidia-smi nvlink -e), and have "
            "the GPU or baseboard checked if they continue",
        )
    if not active:
        return Result(
            "fabric.nvlink",
            Status.PASS,
            f"GPU {gpu.index}: no NVLink connected (a PCIe card without a bridge), none expected",
            subject,
            evidence,
        )
    return Result(
        "fabric.nvlink",
        Status.PASS,
        f"GPU {gpu.index}: " + ("its one NVLink active" if active == 1 else f"all {active} NVLinks active"),
        subject,
        evidence,
    )


@check("fabric.fabric_manager", needs=("manifest:nvidia_driver",))
def fabric_manager(snap: Snapshot) -> Result:
    """An NVSwitch system runs CUDA only with Fabric Manager running at the driver's exact version."""
    switches = _nvswitches(snap)
    if not switches:
        return Result(
            "fabric.fabric_manager", Status.SKIP, "no NVSwitch on this node: Fabric Manager not needed"
        )
    driver = snap.nvml.driver_version or snap.nvidia_module_version
    packages = [p for p in snap.driver_packages or () if p.name.startswith("nvidia-fabricmanager")]
    versions = sorted({p.version.split("-")[0] for p in packages})
    evidence = {
        "nvswitches": switches,
        "running": snap.fabric.fabric_manager_running,
        "driver_version": driver,
        "fabricmanager_packages": {p.name: p.version for p in packages},
    }
    remedy = (
        "install nvidia-fabricmanager of the driver's exact version (the nvidia_driver role does, with "
        "nvidia_driver_fabricmanager), hold both packages, and start nvidia-fabricmanager"
    )
    unregistered = _unregistered(snap)
    described = ", ".join(f"GPU {index} {state}" for index, state in sorted(unregistered.items()))
    if not snap.fabric.fabric_manager_running:
        return Result(
            "fabric.fabric_manager",
            Status.FAIL,
            f"{switches} NVSwitch(es) but Fabric Manager is not running: CUDA cannot use the GPUs"
            + (f" (NVML: {described})" if unregistered else ""),
            evidence=evidence,
            remedy=remedy,
            critical=True,
        )
    if unregistered:
        return Result(
            "fabric.fabric_manager",
            Status.FAIL,
            f"GPUs not registered with the NVLink fabric ({described}): CUDA cannot use them yet",
            evidence={**evidence, "fabric_state": {str(i): s for i, s in unregistered.items()}},
            remedy="read Fabric Manager's log (/var/log/fabricmanager.log); restart nvidia-fabricmanager, "
            "and reset the GPUs or the baseboard if it cannot train the fabric",
            critical=True,
        )
    if driver and versions and versions != [driver]:
        return Result(
            "fabric.fabric_manager",
            Status.FAIL,
            f"Fabric Manager {', '.join(versions)} differs from the driver {driver}: it will not "
            "configure the NVSwitches (an unattended upgrade moved one of them)",
            evidence=evidence,
            remedy=remedy,
            critical=True,
        )
    return Result(
        "fabric.fabric_manager",
        Status.PASS,
        f"Fabric Manager running for {switches} NVSwitch(es)" + (f" at {driver}" if versions else ""),
        evidence=evidence,
    )


# ------------------------------------------------------------------------------ GPUDirect RDMA path

# ACS Control bits that send peer-to-peer traffic up to the root complex (PCIe spec, "ACS Control
# Register"): P2P Request Redirect, P2P Completion Redirect, P2P Egress Control. NCCL's troubleshooting
# guide: "If PCI switches have ACS enabled, it needs to be disabled" (bare metal; a VM needs ACS).
ACS_REDIRECT = {0x04: "ReqRedir", 0x08: "CmpltRedir", 0x20: "EgressCtrl"}
ACS_REMEDY = (
    "disable ACS redirection on the PCIe switch ports above the GPUs and adapters (BIOS: ACS off / PCIe ACS "
    "control; or `setpci -s <bdf> ECAP_ACS+0x6.w=0000` at every boot, or the kernel's "
    "pci=disable_acs_redir=<bdf>); inside a VM keep ACS and enable ATS on the adapters instead"
)


@check("fabric.pcie_acs", needs=("manifest:health",))
def pcie_acs(snap: Snapshot) -> Result:
    """ACS redirection on a PCIe switch port above a GPU or an RDMA adapter sends GPUDirect traffic that
    could turn around in the switch up through the CPU's root complex: a fraction of the bandwidth, or a
    hang (NCCL troubleshooting, "PCI ACS": "If PCI switches have ACS enabled, it needs to be disabled").
    Root ports are not judged: between root ports the traffic crosses the root complex anyway."""
    not_required = _gpudirect_not_required(snap, "fabric.pcie_acs")
    if not_required:
        return not_required
    acs = snap.fabric.acs
    if not acs:
        # Devices on root ports of their own reach each other through the root complex anyway.
        return Result(
            "fabric.pcie_acs",
            Status.PASS,
            "no PCIe switch above the GPUs and adapters: nothing for ACS to redirect",
        )
    unread = sorted(b for b, value in acs.items() if value is None)
    redirecting = {
        bridge: [name for bit, name in ACS_REDIRECT.items() if value & bit]
        for bridge, value in sorted(acs.items())
        if value is not None and value > 0 and value & sum(ACS_REDIRECT)
    }
    evidence = {
        "bridges": {
            b: ("unreadable" if v is None else "no ACS" if v < 0 else f"0x{v:04x}") for b, v in acs.items()
        }
    }
    if redirecting:
        named = "; ".join(f"{b}: {'+ '.join(flags)}+" for b, flags in redirecting.items())
        return Result(
            "fabric.pcie_acs",
            Status.FAIL,
            f"ACS redirects peer-to-peer traffic on {len(redirecting)} PCIe switch port(s) above the "
            f"GPUs and adapters ({named})",
            evidence=evidence,
            remedy=ACS_REMEDY,
        )
    if unread and len(unread) == len(acs):
        return Result(
            "fabric.pcie_acs",
            Status.SKIP,
            "the switch ports' ACS registers need root to read (extended config space): audit as root",
            evidence=evidence,
        )
    return Result(
        "fabric.pcie_acs",
        Status.PASS,
        f"no ACS redirection on the {len(acs) - len(unread)} PCIe switch port(s) above the GPUs and adapters"
        + (f" ({len(unread)} not readable)" if unread else ""),
        evidence=evidence,
    )


@check("fabric.memlock", needs=("manifest:health",))
def memlock(snap: Snapshot) -> Result:
    """RDMA registers (pins) the buffers it sends: with a locked-memory limit, NCCL's ibv_reg_mr fails
    or falls back. NVIDIA (NCCL troubleshooting) and SchedMD (Slurm FAQ, "memlock") say unlimited, for
    slurmd itself (LimitMEMLOCK=infinity): job steps get slurmd's limit."""
    not_required = _gpudirect_not_required(snap, "fabric.memlock")
    if not_required:
        return not_required
    limit, source = snap.fabric.memlock_bytes, snap.fabric.memlock_source
    evidence = {"memlock_bytes": limit, "of": source}
    if limit is None:
        return Result(
            "fabric.memlock", Status.SKIP, f"locked-memory limit of {source} not readable", evidence=evidence
        )
    if limit == -1:
        return Result(
            "fabric.memlock", Status.PASS, f"locked memory unlimited for {source}", evidence=evidence
        )
    return Result(
        "fabric.memlock",
        Status.FAIL,
        f"locked memory limited to {human_size(limit, binary=True)} for {source}: RDMA registration "
        "(ibv_reg_mr) fails or NCCL falls back to slower paths",
        evidence=evidence,
        remedy="set memlock unlimited: LimitMEMLOCK=infinity in slurmd's unit (and in limits.conf: "
        "`* soft memlock unlimited`, `* hard memlock unlimited`); restart slurmd",
    )


# -------------------------------------------------------------------------------------- GPU-NIC topology

# nvidia-smi topo -m's legend, nearest first: at most one PCIe switch between them (PIX), several
# (PXB), the CPU's PCIe host bridge (PHB), host bridges of one NUMA node (NODE), across sockets (SYS).
TOPOLOGY_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def link_level(a: PciDevice, b: PciDevice) -> str | None:
    """How two PCI devices reach each other, in nvidia-smi topo's words; None where sysfs did not say."""
    if a.host_bridge is None or b.host_bridge is None:
        return None
    if a.host_bridge != b.host_bridge:
        if a.numa_node is None or b.numa_node is None:
            return None  # the firmware gave no NUMA node (-1): same socket or not is unknown
        return "NODE" if a.numa_node == b.numa_node else "SYS"
    common = 0
    for mine, theirs in zip(a.bridges, b.bridges, strict=False):
        if mine != theirs:
            break
        common += 1
    if common == 0:
        return "PHB"
    steps = (
        max(len(a.bridges), len(b.bridges)) + 1 - common
    )  # from the farther device up to the bridge both share
    return "PIX" if steps <= 2 else "PXB"


def nearest_nics(levels: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The NICs a GPU reaches at the nearest level (ties all named), and that level."""
    known = {nic: level for nic, level in levels.items() if level in TOPOLOGY_LEVELS}
    if not known:
        return None, []
    best = min(known.values(), key=TOPOLOGY_LEVELS.index)
    return best, sorted(nic for nic, level in known.items() if level == best)


def gpu_topology(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """Each GPU's NUMA node and nearest RDMA adapters (by their RDMA names where they have one)."""
    name_of = {address: name for name, address in snap.fabric.nics.items()}
    nics = [d for d in snap.fabric.pci if d.kind == "hca"]
    found = {}
    for gpu in (d for d in snap.fabric.pci if d.kind == "gpu"):
        levels = {name_of.get(nic.address, nic.address): link_level(gpu, nic) for nic in nics}
        level, nearest = nearest_nics({k: v for k, v in levels.items() if v})
        found[gpu.address] = {"numa_node": gpu.numa_node, "nearest_nics": nearest, "level": level}
    return found


def emit_expectations(snap: Snapshot) -> dict[str, dict[str, Any]]:
    """The dltune role's topology variables as this (healthy) node has them, for group_vars."""
    topology = gpu_topology(snap)
    return {
        "dltune_health_gpu_numa_nodes": {
            gpu: facts["numa_node"] for gpu, facts in topology.items() if facts["numa_node"] is not None
        },
        "dltune_health_gpu_nearest_nics": {
            gpu: facts["nearest_nics"] for gpu, facts in topology.items() if facts["nearest_nics"]
        },
    }


TOPOLOGY_REMEDY = (
    "compare the node with a healthy one (`nvidia-smi topo -m`): a card in another slot, an adapter "
    "missing, or a BIOS NUMA setting (NPS, SNC) changed"
)


def judge_gpu_topology(
    facts: Mapping[str, Any], numa_wanted: object | None, nics_wanted: object | None
) -> tuple[Status, str]:
    """One GPU's NUMA node and nearest adapters against the site's expectations (None: none stated)."""
    problems = []
    if numa_wanted is not None and facts["numa_node"] != numa_wanted:
        problems.append(f"on NUMA node {facts['numa_node']}, the site expects {numa_wanted}")
    if nics_wanted is not None:
        # A name or a list of names; anything else in the manifest is compared as its text.
        listed = nics_wanted if isinstance(nics_wanted, list) else [nics_wanted]
        wanted = {str(name) for name in listed}
        if set(facts["nearest_nics"]) != wanted:
            reached = ", ".join(facts["nearest_nics"]) or "none reached"
            level = f" ({facts['level']})" if facts["level"] else ""
            problems.append(
                f"nearest adapter(s) {reached}{level}, the site expects {', '.join(sorted(wanted))}"
            )
    if problems:
        return Status.FAIL, "; ".join(problems)
    if facts["level"] == "SYS" and nics_wanted is None:
        return (
            Status.WARN,
            "reaches every RDMA adapter only across the sockets (SYS): GPUDirect RDMA crosses the CPUs",
        )
    nearest = ", ".join(facts["nearest_nics"]) or "unknown"
    numa = "unknown" if facts["numa_node"] is None else facts["numa_node"]
    return Status.PASS, f"NUMA node {numa}, nearest adapter(s) {nearest}" + (
        f" ({facts['level']})" if facts["level"] else ""
    )


@check("fabric.topology", needs=("manifest:health",))
def topology(snap: Snapshot) -> list[Result]:
    """Each GPU's NUMA node and nearest RDMA adapter, against what the site expects (the dltune role's
    dltune_health_gpu_numa_nodes / dltune_health_gpu_nearest_nics, printed from a healthy node by
    `dltune audit --emit-expectations`); without expectations a GPU that reaches every adapter only
    across the sockets (SYS) is a finding."""
    found = gpu_topology(snap)
    if not found:
        return [Result("fabric.topology", Status.SKIP, "no GPU on the PCI bus")]
    if not any(d.kind == "hca" for d in snap.fabric.pci):
        return [Result("fabric.topology", Status.SKIP, "no RDMA adapter on the PCI bus")]
    health = _health(snap)
    numa_wanted = health.get("gpu_numa_nodes") or {}
    nics_wanted = health.get("gpu_nearest_nics") or {}
    results = []
    for gpu, facts in sorted(found.items()):
        status, summary = judge_gpu_topology(facts, numa_wanted.get(gpu), nics_wanted.get(gpu))
        results.append(
            Result(
                "fabric.topology",
                status,
                summary,
                subject=gpu,
                evidence=dict(facts),
                remedy=None if status is Status.PASS else TOPOLOGY_REMEDY,
            )
        )
    return results
