"""Fixture trees of a GPU node's interconnects as sysfs and /proc lay them out: GPUs, NVSwitches and
RDMA adapters under /sys/bus/pci/devices (vendor, class, AER counters, link width), their ports under
/sys/class/infiniband/<dev>/ports/<n> (state, phys_state, rate, link_layer, counters/*) with the
`device` link to the PCI function, IPoIB interfaces, and a Fabric Manager process. File formats are
those of the real samples in tests/fixtures/real/ (ibstatus prints these files as they are)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ZERO_AER = {
    "aer_dev_correctable": "RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
    "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {correctable}\n",
    "aer_dev_nonfatal": "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\n"
    "RxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq {nonfatal}\nACSViol 0\nTOTAL_ERR_NONFATAL {nonfatal}\n",
    "aer_dev_fatal": "Undefined 0\nDLP {fatal}\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nTOTAL_ERR_FATAL {fatal}\n",
}
STATES = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN", "INIT": "2: INIT", "ARMED": "3: ARMED"}
PHYS = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled", "Sleep": "1: Sleep"}
RATES = {
    400: "400 Gb/sec (4X NDR)",
    200: "200 Gb/sec (4X HDR)",
    100: "100 Gb/sec (4X EDR)",
    10: "10 Gb/sec (4X)",
}


def write(root: Path, host_path: str, text: str) -> Path:
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@dataclass
class Port:
    device: str
    port: int = 1
    state: str = "ACTIVE"
    phys_state: str = "LinkUp"
    rate_gbps: int = 400
    link_layer: str = "InfiniBand"
    counters: Mapping[str, int] = field(default_factory=dict)


def pci_device(
    root: Path,
    address: str,
    *,
    vendor: str = "0x10de",
    device_class: str = "0x030200",
    aer: Mapping[str, int] | None = None,
    width: int = 16,
    width_max: int = 16,
    speed: str = "32.0 GT/s PCIe",
    speed_max: str = "32.0 GT/s PCIe",
    parent: str = "pci0000:00",
) -> None:
    base = f"/sys/devices/{parent}/{address}"
    write(root, f"{base}/vendor", vendor + "\n")
    write(root, f"{base}/class", device_class + "\n")
    write(root, f"{base}/current_link_width", f"{width}\n")
    write(root, f"{base}/max_link_width", f"{width_max}\n")
    write(root, f"{base}/current_link_speed", speed + "\n")
    write(root, f"{base}/max_link_speed", speed_max + "\n")
    if aer is not None:
        counts = {"fatal": 0, "nonfatal": 0, "correctable": 0, **aer}
        for name, text in ZERO_AER.items():
            write(root, f"{base}/{name}", text.format(**counts))
    link = root / "sys/bus/pci/devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/{parent}/{address}")


def ib_port(root: Path, port: Port, pci_address: str | None = None) -> None:
    base = f"/sys/class/infiniband/{port.device}/ports/{port.port}"
    write(root, f"{base}/state", STATES.get(port.state, port.state) + "\n")
    write(root, f"{base}/phys_state", PHYS.get(port.phys_state, port.phys_state) + "\n")
    write(root, f"{base}/rate", RATES.get(port.rate_gbps, f"{port.rate_gbps} Gb/sec (4X)") + "\n")
    write(root, f"{base}/link_layer", port.link_layer + "\n")
    counters = {
        "symbol_error": 0,
        "link_error_recovery": 0,
        "link_downed": 0,
        "port_rcv_errors": 0,
        "local_link_integrity_errors": 0,
        "excessive_buffer_overrun_errors": 0,
        "port_xmit_data": 123456789,
        **port.counters,
    }
    for name, value in counters.items():
        write(root, f"{base}/counters/{name}", f"{value}\n")
    device_link = root / f"sys/class/infiniband/{port.device}/device"
    if pci_address and not device_link.is_symlink():
        device_link.symlink_to(f"/sys/devices/pci0000:00/{pci_address}")


def manifest(root: Path, role: str, content: Mapping[str, object]) -> None:
    write(
        root,
        f"/etc/dltune/expected.d/{role}.json",
        json.dumps({"schema_version": 1, "role": role, **content}),
    )


def health(
    root: Path,
    ib_ports: list[dict[str, object]] | None = None,
    ipoib: list[str] | None = None,
    gpudirect: bool = False,
    nvlinks: int | None = None,
) -> None:
    manifest(
        root,
        "health",
        {
            "ib_ports": ib_ports or [],
            "ipoib_interfaces": ipoib or [],
            "gpudirect_rdma": gpudirect,
            "nvlink_links_per_gpu": nvlinks,
        },
    )


def gpu_bus_id(index: int) -> str:
    """The PCI address the fake NVML gives GPU ``index`` (tests/fakenvml/fake_nvml.c), as sysfs names it."""
    return f"0000:{0x18 + 0x10 * index:02x}:00.0"


ROOT_PORT = "0000:00:1{:01x}.0"  # devices 10-17 of bus 0: clear of the NVSwitches at 0000:0N:01.0


SWITCH_PORT = "0000:e{:01x}:00.0"


def _bridge(root: Path, path: str, acs_control: int) -> None:
    """A PCIe bridge at /sys/devices/<path>: Gen5 x16, its config space as root reads it (an extended
    capability list: AER at 0x100, then ACS at 0x148 with the given control register)."""
    base = f"/sys/devices/{path}"
    write(root, f"{base}/max_link_speed", "32.0 GT/s PCIe\n")
    write(root, f"{base}/max_link_width", "16\n")
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")
    config[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")
    config[0x14E:0x150] = acs_control.to_bytes(2, "little")
    (root / base.lstrip("/") / "config").write_bytes(bytes(config))
    address = path.rsplit("/", 1)[-1]
    link = root / "sys/bus/pci/devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/{path}")


def root_port(root: Path, index: int, acs_control: int = 0) -> str:
    """A PCIe root port (0000:00:1<index>.0) and a switch port below it (0000:e<index>:00.0, with the
    given ACS control) above a GPU and an adapter; returns the path the devices go under."""
    port = f"pci0000:00/{ROOT_PORT.format(index)}"
    _bridge(root, port, 0x1F)  # root ports' ACS is not judged: the kernel may set it with the IOMMU
    _bridge(root, f"{port}/{SWITCH_PORT.format(index)}", acs_control)
    return f"{port}/{SWITCH_PORT.format(index)}"


def hgx_node(root: Path, gpus: int = 8, ports: int = 8, port_rate: int = 400) -> None:
    """An HGX-class node: ``gpus`` GPUs at the fake NVML's bus ids, four NVSwitches, ``ports`` NDR
    adapters (one port each, all active) with IPoIB on the first, Fabric Manager running."""
    parents = [root_port(root, index) for index in range(max(gpus, ports))]
    for index in range(gpus):
        pci_device(root, gpu_bus_id(index), aer={}, parent=parents[index])
    for switch in range(4):
        pci_device(root, f"0000:0{switch}:01.0", device_class="0x068000", aer={})
    for index in range(ports):
        address = f"0000:{0x1A + 0x10 * index:02x}:00.0"
        pci_device(root, address, vendor="0x15b3", device_class="0x020700", aer={}, parent=parents[index])
        ib_port(root, Port(f"mlx5_{index}", rate_gbps=port_rate), address)
    write(
        root,
        "/proc/self/limits",
        "Limit  Soft Limit  Hard Limit  Units\nMax locked memory  unlimited  unlimited  bytes\n",
    )
    write(root, "/sys/class/net/ib0/operstate", "up\n")
    write(root, "/proc/4242/comm", "nv-fabricmanager\n")
    write(root, "/proc/sys/kernel/osrelease", "6.8.0-49-generic\n")
    write(
        root,
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U16-I1-N07-12-3)  Tue Sep 23 09:34:40 UTC 2025\nGCC version:  gcc version 13.3.0\n",
    )
    write(root, "/proc/modules", "nvidia_peermem 16384 0 - Live 0x0\nnvidia 9 1 - Live 0x0\n")
    health(
        root,
        ib_ports=[{"device": "mlx5_*", "port": 1, "rate_gbps": port_rate}],
        ipoib=["ib0"],
        gpudirect=True,
        nvlinks=18,
    )
    manifest(root, "nvidia_driver", {"branch": "580", "nvswitch_count": 4, "fabricmanager": True})
    write(
        root,
        "/var/lib/dpkg/status",
        "Package: nvidia-fabricmanager-580\nStatus: hold ok installed\nVersion: 580.95.05-1\n\n"
        "Package: nvidia-driver-580-server-open\nStatus: hold ok installed\nVersion: 580.95.05-0ubuntu1\n",
    )
