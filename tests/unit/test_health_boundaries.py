"""Each host and GPU health judgement at its boundary (snapshots given as data: no GPU, no EDAC driver,
no NVMe controller here; NVML's and the tools' answers are the lowest boundary faked)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dltune import cli
from dltune.checks.fabric import emit_expectations, hca_pcie, link_level, memlock, pcie_acs, topology
from dltune.checks.gpu import CORRECTABLE_RISE_WARN, ecc, sxid
from dltune.checks.storage import ENDURANCE_WARN, judge_nvme, nvme_health
from dltune.checks.system import memory_errors
from dltune.cli import app
from dltune.model import Status
from dltune.probes.fabric import read_fabric
from dltune.probes.hostfs import HostFS
from dltune.probes.memory_errors import parse_memory_log
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import (
    Fabric,
    Gpu,
    MemoryController,
    MemoryErrors,
    NvmeHealth,
    NvmlState,
    PciDevice,
    Snapshot,
)
from tests.fabric_tree import root_port, write


def _ecc(gpu: Gpu, previous: dict[str, dict[str, int]] | None = None) -> tuple[Status, str]:
    (result,) = ecc(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,)), previous=previous or {}))
    return result.status, result.summary


def test_correctable_ecc_is_judged_by_its_rise_since_the_previous_audit() -> None:
    """10,000 correctable errors since the driver loaded say nothing alone; a rise of 10 between two
    audits warns, 9 does not; the counters are recorded for the next audit."""
    gpu = Gpu(index=0, ecc_uncorrected_volatile=0, ecc_corrected_volatile=10_000, remapped_rows_failure=False)
    assert _ecc(gpu)[0] is Status.PASS
    before = {"gpu.ecc|0": {"corrected_volatile": 10_000 - CORRECTABLE_RISE_WARN}}
    status, summary = _ecc(gpu, before)
    assert status is Status.WARN and f"{CORRECTABLE_RISE_WARN} correctable ECC errors since" in summary
    almost = {"gpu.ecc|0": {"corrected_volatile": 10_000 - CORRECTABLE_RISE_WARN + 1}}
    assert _ecc(gpu, almost)[0] is Status.PASS
    (result,) = ecc(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
    assert result.evidence["counters"]["corrected_volatile"] == 10_000


def test_the_row_remap_histogram_fails_a_bank_without_spare_rows_and_warns_on_few() -> None:
    healthy = {"max": 639, "high": 1, "partial": 0, "low": 0, "none": 0}
    gpu = Gpu(index=0, ecc_uncorrected_volatile=0, remapped_rows_failure=False, remap_histogram=healthy)
    assert _ecc(gpu)[0] is Status.PASS
    low = Gpu(
        index=0, ecc_uncorrected_volatile=0, remapped_rows_failure=False, remap_histogram=healthy | {"low": 1}
    )
    assert _ecc(low)[0] is Status.WARN
    none = Gpu(
        index=0,
        ecc_uncorrected_volatile=0,
        remapped_rows_failure=False,
        remap_histogram=healthy | {"none": 1},
    )
    status, summary = _ecc(none)
    assert status is Status.FAIL and "no spare row" in summary


def test_retired_pages_warn_until_dcgm_s_limits_then_fail() -> None:
    """Pre-Ampere page retirement: DCGM fails at 63 pages in all or 16 for double-bit errors."""
    assert (
        _ecc(Gpu(index=0, ecc_uncorrected_volatile=0, retired_pages_sbe=1, retired_pages_dbe=0))[0]
        is Status.WARN
    )
    assert (
        _ecc(Gpu(index=0, ecc_uncorrected_volatile=0, retired_pages_sbe=62, retired_pages_dbe=0))[0]
        is Status.WARN
    )
    assert (
        _ecc(Gpu(index=0, ecc_uncorrected_volatile=0, retired_pages_sbe=63, retired_pages_dbe=0))[0]
        is Status.FAIL
    )
    assert (
        _ecc(Gpu(index=0, ecc_uncorrected_volatile=0, retired_pages_sbe=0, retired_pages_dbe=16))[0]
        is Status.FAIL
    )
    assert (
        _ecc(Gpu(index=0, ecc_uncorrected_volatile=0, retired_pages_sbe=0, retired_pages_dbe=15))[0]
        is Status.WARN
    )


def _memory(*controllers: MemoryController, previous: dict[str, dict[str, int]] | None = None) -> dict:
    snap = Snapshot(root="/", memory_errors=MemoryErrors(True, True, controllers), previous=previous or {})
    return {r.subject: r for r in memory_errors(snap)}


def test_host_memory_errors_uncorrected_fail_corrected_warn_unless_none_are_new() -> None:
    results = _memory(
        MemoryController("mc0", "Skylake IMC#0", 0, 0, "sysfs"),
        MemoryController("mc1", None, 3, 0, "sysfs"),
        MemoryController("mc2", None, 0, 1, "sysfs"),
    )
    assert {k: (r.status, r.critical) for k, r in results.items()} == {
        "mc0": (Status.PASS, False),
        "mc1": (Status.WARN, False),
        "mc2": (Status.FAIL, True),
    }
    same = _memory(
        MemoryController("mc1", None, 3, 0, "sysfs"), previous={"system.memory_errors|mc1": {"corrected": 3}}
    )
    assert same["mc1"].status is Status.PASS and "since the previous audit" in same["mc1"].summary
    more = _memory(
        MemoryController("mc1", None, 5, 0, "sysfs"), previous={"system.memory_errors|mc1": {"corrected": 3}}
    )
    assert more["mc1"].status is Status.WARN and "2 since the previous audit" in more["mc1"].summary


def test_no_edac_driver_is_a_skip_that_says_so_never_a_pass() -> None:
    (result,) = memory_errors(Snapshot(root="/", memory_errors=MemoryErrors(False, True, ())))
    assert result.status is Status.SKIP and "no EDAC driver" in result.summary


def test_machine_check_status_bit_61_says_uncorrected() -> None:
    corrected = "mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: 9c00000000010090\n"
    uncorrected = "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 1: b000000000000000\n"
    assert parse_memory_log(corrected)[0].uncorrected == 0
    assert parse_memory_log(uncorrected)[0].uncorrected == 1
    # An EDAC line names the controller: the machine check beside it is not counted twice elsewhere.
    both = uncorrected + "EDAC MC3: 1 UE memory read error on CPU_SrcID#1_MC#1_Chan#0_DIMM#0\n"
    assert [c.name for c in parse_memory_log(both)] == ["mc3"]


def test_nvme_judgement_boundaries() -> None:
    assert (
        judge_nvme({"critical_warning": 0, "media_errors": 0, "percentage_used": ENDURANCE_WARN - 1})[0]
        is Status.PASS
    )
    assert judge_nvme({"percentage_used": ENDURANCE_WARN})[0] is Status.WARN
    assert judge_nvme({"critical_warning": 0x02})[0] is Status.WARN  # temperature only
    status, _reasons, critical = judge_nvme({"critical_warning": 0x08})
    assert (status, critical) == (Status.FAIL, True)
    assert judge_nvme({"critical_warning": 0x01}) == (
        Status.FAIL,
        [judge_nvme({"critical_warning": 1})[1][0]],
        False,
    )
    assert judge_nvme({"available_spare": 10, "available_spare_threshold": 10})[0] is Status.PASS
    assert judge_nvme({"available_spare": 9, "available_spare_threshold": 10})[0] is Status.FAIL
    assert judge_nvme({"media_errors": 1})[0] is Status.FAIL


def test_nvme_health_not_read_as_a_user_is_a_skip_naming_why() -> None:
    snap = Snapshot(
        root="/", nvme=(NvmeHealth("/dev/nvme0", ("/data",), error="needs root (the controller is 0600)"),)
    )
    (result,) = nvme_health(snap)
    assert result.status is Status.SKIP and "needs root" in result.summary and result.subject == "/dev/nvme0"


def test_an_sxid_nvidia_lists_as_fatal_fails_even_when_only_its_data_line_is_seen() -> None:
    data_only = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Data {0x00000000, 0x00000000}\n"
    (result,) = sxid(Snapshot(root="/", kernel_log=kernel_log_of(data_only)))
    assert (result.status, result.critical) == (Status.FAIL, True)
    nonfatal = (
        "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 29 egress non-posted PRIV error\n"
    )
    (result,) = sxid(Snapshot(root="/", kernel_log=kernel_log_of(nonfatal)))
    assert result.status is Status.WARN and "jobs abort" in result.summary
    fatal_word = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 29999, Fatal, Link 3 something new\n"
    (result,) = sxid(Snapshot(root="/", kernel_log=kernel_log_of(fatal_word)))
    assert result.status is Status.FAIL


# --------------------------------------------------------------------- the PCI hierarchy (sysfs trees)


def _device(
    root: Path,
    chain: str,
    *,
    kind: str,
    numa: int = 0,
    speed: str = "32.0 GT/s PCIe",
    speed_max: str = "32.0 GT/s PCIe",
    width: int = 16,
    width_max: int = 16,
) -> str:
    """A device at /sys/devices/<chain> (host bridge, bridges, the device), linked from
    /sys/bus/pci/devices as the kernel does; its bridges get link capabilities of their own."""
    address = chain.rsplit("/", 1)[-1]
    vendor, device_class = ("0x10de", "0x030200") if kind == "gpu" else ("0x15b3", "0x020700")
    files = {
        "vendor": vendor,
        "class": device_class,
        "numa_node": str(numa),
        "current_link_speed": speed,
        "max_link_speed": speed_max,
        "current_link_width": str(width),
        "max_link_width": str(width_max),
    }
    for name, value in files.items():
        write(root, f"/sys/devices/{chain}/{name}", value + "\n")
    link = root / "sys/bus/pci/devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/{chain}")
    return address


def _bridge(root: Path, path: str, speed_max: str, width_max: int) -> None:
    write(root, f"/sys/devices/{path}/max_link_speed", speed_max + "\n")
    write(root, f"/sys/devices/{path}/max_link_width", f"{width_max}\n")


def test_a_link_is_judged_against_what_its_slot_supports_not_the_device_alone(tmp_path: Path) -> None:
    """A Gen5 adapter in a Gen4 slot at Gen4 is as designed (sichek PR #122 cordoned such nodes); at
    Gen3 in that slot it is degraded; x8 in an x16 slot fails."""
    _bridge(tmp_path, "pci0000:00/0000:00:01.0", "16.0 GT/s PCIe", 16)
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", kind="hca", speed="16.0 GT/s PCIe")
    _bridge(tmp_path, "pci0000:00/0000:00:02.0", "16.0 GT/s PCIe", 16)
    _device(tmp_path, "pci0000:00/0000:00:02.0/0000:02:00.0", kind="hca", speed="8.0 GT/s PCIe")
    _bridge(tmp_path, "pci0000:00/0000:00:03.0", "32.0 GT/s PCIe", 16)
    _device(tmp_path, "pci0000:00/0000:00:03.0/0000:03:00.0", kind="hca", width=8)
    fabric = read_fabric(HostFS(tmp_path), {}, None)
    results = {r.subject: r for r in hca_pcie(Snapshot(root=str(tmp_path), fabric=fabric))}
    assert results["0000:01:00.0"].status is Status.PASS and "as designed" in results["0000:01:00.0"].summary
    assert results["0000:02:00.0"].status is Status.WARN
    assert results["0000:03:00.0"].status is Status.FAIL


def test_gpu_nic_levels_follow_nvidia_smi_topo_s_legend(tmp_path: Path) -> None:
    """Under one switch: PIX; two switch levels: PXB; other root ports of one host bridge: PHB; another
    host bridge of the same NUMA node: NODE; the other socket: SYS."""
    switch = "pci0000:00/0000:00:01.0/0000:01:00.0"
    gpu = _device(tmp_path, f"{switch}/0000:02:00.0/0000:03:00.0", kind="gpu")
    _device(tmp_path, f"{switch}/0000:02:01.0/0000:04:00.0", kind="hca")  # PIX
    deeper = f"{switch}/0000:02:02.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"
    _device(tmp_path, deeper, kind="hca")  # PXB
    _device(tmp_path, "pci0000:00/0000:00:02.0/0000:08:00.0", kind="hca")  # PHB
    _device(tmp_path, "pci0000:40/0000:40:01.0/0000:41:00.0", kind="hca")  # NODE
    _device(tmp_path, "pci0000:80/0000:80:01.0/0000:81:00.0", kind="hca", numa=1)  # SYS
    fabric = read_fabric(HostFS(tmp_path), {}, None)
    by = {d.address: d for d in fabric.pci}
    levels = {nic: link_level(by[gpu], by[nic]) for nic in by if nic != gpu}
    assert levels == {
        "0000:04:00.0": "PIX",
        "0000:07:00.0": "PXB",
        "0000:08:00.0": "PHB",
        "0000:41:00.0": "NODE",
        "0000:81:00.0": "SYS",
    }


def test_topology_against_the_site_s_expectations_and_emitted_from_a_healthy_node(tmp_path: Path) -> None:
    gpu = _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", kind="gpu")
    nic = _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", kind="hca")
    snap = Snapshot(
        root=str(tmp_path), fabric=replace(read_fabric(HostFS(tmp_path), {}, None), nics={"mlx5_0": nic})
    )
    emitted = emit_expectations(snap)
    assert emitted == {
        "dltune_health_gpu_numa_nodes": {gpu: 0},
        "dltune_health_gpu_nearest_nics": {gpu: ["mlx5_0"]},
    }
    wanted = {"health": {"gpu_numa_nodes": {gpu: 0}, "gpu_nearest_nics": {gpu: ["mlx5_0"]}}}
    (result,) = topology(replace(snap, expected=wanted))
    assert result.status is Status.PASS
    moved = {"health": {"gpu_numa_nodes": {gpu: 1}, "gpu_nearest_nics": {gpu: "mlx5_1"}}}
    (result,) = topology(replace(snap, expected=moved))
    assert result.status is Status.FAIL and "NUMA node 0, the site expects 1" in result.summary


def test_acs_needs_root_to_read_and_a_user_s_audit_says_so(tmp_path: Path) -> None:
    """A user reads the first 64 bytes of a bridge's config space: the ACS register is beyond them. Only
    the switch ports below the root port are read."""
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", kind="gpu")
    for bridge in ("0000:01:00.0", "0000:02:00.0"):
        write(tmp_path, f"/sys/bus/pci/devices/{bridge}/config", "\0" * 64)
    fabric = read_fabric(HostFS(tmp_path), {"health": {"gpudirect_rdma": True}}, None)
    assert fabric.acs == {"0000:01:00.0": None, "0000:02:00.0": None}, "the root port 00:01.0 is not read"
    result = pcie_acs(
        Snapshot(root=str(tmp_path), fabric=fabric, expected={"health": {"gpudirect_rdma": True}})
    )
    assert result.status is Status.SKIP and "need root" in result.summary


def test_memlock_is_slurmd_s_own_limit_when_slurmd_runs(tmp_path: Path) -> None:
    write(tmp_path, "/proc/4242/comm", "slurmd\n")
    write(
        tmp_path,
        "/proc/4242/limits",
        "Limit  Soft Limit  Hard Limit  Units\n"
        "Max locked memory         65536                65536                bytes\n",
    )
    fabric = read_fabric(HostFS(tmp_path), {"health": {"gpudirect_rdma": True}}, None)
    assert (fabric.memlock_bytes, fabric.memlock_source) == (65536, "slurmd (pid 4242)")
    result = memlock(
        Snapshot(root=str(tmp_path), fabric=fabric, expected={"health": {"gpudirect_rdma": True}})
    )
    assert result.status is Status.FAIL and "64 KiB for slurmd (pid 4242)" in result.summary


def test_emit_expectations_prints_yaml_the_role_validates(tmp_path: Path) -> None:
    """A GPU with a NUMA node and no RDMA adapter: its NUMA map, and a comment saying why there is no
    adapter map (issue 46: an empty map `{}`, pasted over a group's, would unset what it expects). The
    first line says the node was read, not judged (it said "a node judged healthy" without judging)."""
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", kind="gpu", numa=1)
    out = CliRunner().invoke(app, ["audit", "--root", str(tmp_path), "--emit-expectations"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0].endswith(
        ": its GPU-NIC topology as read, not judged (emit from a node known to be healthy)"
    )
    assert "judged healthy" not in out.stdout
    assert lines[1:] == [
        "dltune_health_gpu_numa_nodes:",
        '  "0000:01:00.0": 1',
        "# dltune_health_gpu_nearest_nics: not emitted: no RDMA adapter on the PCI bus is reachable from "
        "the GPUs",
    ]


def test_emit_expectations_with_nothing_to_emit_says_so_on_stderr_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 46: a node without GPUs printed two empty maps under "a node judged healthy", exit 0: an
    admin pasting it into group_vars would unset the group's expectations. Now nothing on stdout (so
    `>> group_vars/x.yml` adds nothing), one line on stderr naming why, exit 2; the same for GPUs of
    which nothing is known (no NUMA node, no adapter)."""
    code = cli.run(["audit", "--root", str(tmp_path), "--emit-expectations"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        "dltune audit: --emit-expectations: nothing to emit: no GPU on this node's PCI bus "
        f"({tmp_path}/sys/bus/pci/devices); run it on a GPU node of the model the group holds\n"
    )
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", kind="gpu", numa=-1)
    code = cli.run(["audit", "--root", str(tmp_path), "--emit-expectations"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert "1 GPU(s) on the PCI bus, none with a NUMA node or a reachable RDMA adapter" in err


def _memory_of_log(text: str) -> dict:
    snap = Snapshot(root="/", memory_errors=MemoryErrors(False, True, parse_memory_log(text)))
    return {r.subject: r for r in memory_errors(snap)}


def test_a_machine_check_alone_warns_and_only_the_kernel_s_fatal_words_drain() -> None:
    """A bank's uncorrected status may be a cache or PCIe bank, or what the firmware reports at every
    boot (TSC 0): a warning, never a drain; "Uncorrected hardware memory error" or a fatal machine check
    is a critical fail. An uncorrected machine check beside an EDAC line that counts only corrected
    errors is kept (not hidden by it)."""
    leftover = (
        "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 6: ee2000000003110a\n"
        "mce: [Hardware Error]: TSC 0\n"
    )
    result = _memory_of_log(leftover)["unknown"]
    assert (result.status, result.critical) == (Status.WARN, False)
    memory = (
        leftover + "Memory failure: 0x7740c0: Uncorrected hardware memory error in user-access at 7e025e400\n"
    )
    result = _memory_of_log(memory)["unknown"]
    assert (result.status, result.critical) == (Status.FAIL, True)
    beside = "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0\n" + leftover
    results = _memory_of_log(beside)
    assert results["mc0"].status is Status.WARN and results["unknown"].status is Status.WARN


def test_one_error_printed_as_an_event_and_a_count_is_counted_once() -> None:
    """sbridge/skx print "HANDLING MCE MEMORY ERROR ... Machine Check Event" and "1 CE memory ... error"
    for the same error."""
    text = (
        "EDAC sbridge MC1: CPU 1: Machine Check Event: 0 Bank 11: 8c00004f000800c2\n"
        "EDAC MC1: 1 CE memory scrubbing error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#0\n"
    )
    (controller,) = parse_memory_log(text)
    assert (controller.name, controller.corrected, controller.uncorrected) == ("mc1", 1, 0)


def test_acs_on_a_switch_port_fails_and_on_a_root_port_is_not_judged(tmp_path: Path) -> None:
    """The root port above carries ReqRedir+ CmpltRedir+ (0x1f; the kernel sets it with the IOMMU on):
    not judged. The switch port below it with redirection fails, naming it; cleared, it passes."""
    for acs_control, status in ((0x0C, Status.FAIL), (0x00, Status.PASS)):
        root = tmp_path / f"acs{acs_control}"
        parent = root_port(root, 0, acs_control=acs_control)
        _device(root, f"{parent}/0000:05:00.0", kind="gpu")
        wanted = {"health": {"gpudirect_rdma": True}}
        fabric = read_fabric(HostFS(root), wanted, None)
        result = pcie_acs(Snapshot(root=str(root), fabric=fabric, expected=wanted))
        assert result.status is status, result.summary
        assert "0000:00:10.0" not in result.summary
        if status is Status.FAIL:
            assert "0000:e0:00.0: ReqRedir+ CmpltRedir+" in result.summary


def test_a_counter_reset_since_the_previous_audit_counts_what_it_holds_now() -> None:
    """100 corrected errors at the previous audit, 50 now: the node rebooted since, and those 50 are new."""
    results = _memory(
        MemoryController("mc0", None, 50, 0, "sysfs"),
        previous={"system.memory_errors|mc0": {"corrected": 100}},
    )
    assert results["mc0"].status is Status.WARN and "50 since the previous audit" in results["mc0"].summary


def test_unknown_numa_nodes_and_unknown_slot_speeds_are_no_findings() -> None:
    """Two host bridges with no NUMA node from the firmware (-1: single-socket boards, VMs): the level
    is unknown, not SYS. A slot whose max_link_speed reads "Unknown" does not excuse a slow link."""
    a = PciDevice(
        "0000:01:00.0", "gpu", "0x10de", "0x030200", host_bridge="pci0000:00", bridges=("0000:00:01.0",)
    )
    b = PciDevice(
        "0000:41:00.0", "hca", "0x15b3", "0x020700", host_bridge="pci0000:40", bridges=("0000:40:01.0",)
    )
    assert link_level(a, b) is None
    slow = PciDevice(
        "0000:41:00.0", "hca", "0x15b3", "0x020700", link_width=16, link_width_max=16,
        link_speed="8.0 GT/s PCIe", link_speed_max="16.0 GT/s PCIe", bridges=("0000:40:01.0",),
        upstream_width_max=16, upstream_speed_max="Unknown",
    )  # fmt: skip
    (result,) = hca_pcie(Snapshot(root="/", fabric=Fabric(pci=(slow,))))
    assert result.status is Status.WARN


def test_correctable_ecc_after_a_driver_reload_counts_from_zero() -> None:
    """NVML's volatile counters restart with the driver: 20 now after 1,000 before are 20 new errors."""
    gpu = Gpu(index=0, ecc_uncorrected_volatile=0, ecc_corrected_volatile=20, remapped_rows_failure=False)
    status, summary = _ecc(gpu, {"gpu.ecc|0": {"corrected_volatile": 1000}})
    assert status is Status.WARN and "20 correctable ECC errors since" in summary
