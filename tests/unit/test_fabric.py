"""The fabric area and gpu.firmware: each judgement at its boundaries, on snapshots (pure checks) and
on fixture trees of sysfs and /proc (tests/fabric_tree.py) read by the real probes. No adapter, GPU
or NVSwitch exists here: sysfs is faked as files at its lowest boundary, NVML as Gpu records."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dltune.checks import fabric
from dltune.checks.gpu import firmware
from dltune.model import Result, Status
from dltune.probes import collect_snapshot
from dltune.probes.fabric import parse_aer, parse_rate, read_ib_ports
from dltune.probes.hostfs import HostFS
from dltune.probes.watchdog import Deadline
from dltune.snapshot import (
    AerCounts,
    Fabric,
    Gpu,
    IbPort,
    NvLink,
    NvmlState,
    Package,
    PciDevice,
    Snapshot,
)
from tests.fabric_tree import Port, hgx_node, ib_port, manifest, pci_device, write


def by_subject(results: list[Result]) -> dict[str | None, Result]:
    return {r.subject: r for r in results}


def snap(**changes: Any) -> Snapshot:
    return Snapshot(root="/", **changes)


def port(**changes: Any) -> IbPort:
    base = IbPort(
        "mlx5_0", 1, "ACTIVE", "LinkUp", 400.0, "4X", "InfiniBand", {"symbol_error": 0, "link_downed": 0}
    )
    return dataclasses.replace(base, **changes)


def expecting(*ports: dict[str, Any], **rest: Any) -> dict[str, dict[str, Any]]:
    return {"health": {"ib_ports": list(ports), **rest}}


# ---------------------------------------------------------------------------------------------- AER


def aer_snapshot(aer: AerCounts | None, previous: dict[str, dict[str, int]] | None = None) -> Snapshot:
    device = PciDevice("0000:18:00.0", "gpu", "0x10de", "0x030200", aer)
    gpus = (Gpu(index=3, pci_bus_id="0000:18:00.0"),)
    return snap(fabric=Fabric(pci=(device,)), nvml=NvmlState(True, gpus=gpus), previous=previous or {})


@pytest.mark.parametrize(
    ("aer", "status", "critical"),
    [
        (AerCounts(0, 0, 0), Status.PASS, False),
        (AerCounts(0, 0, fabric.AER_CORRECTABLE_WARN - 1), Status.PASS, False),
        (AerCounts(0, 0, fabric.AER_CORRECTABLE_WARN), Status.WARN, False),
        (AerCounts(0, 1, 0), Status.FAIL, False),
        (AerCounts(1, 0, 0), Status.FAIL, True),
        (AerCounts(None, None, 5), Status.PASS, False),
    ],
)
def test_aer_levels(aer: AerCounts, status: Status, critical: bool) -> None:
    (result,) = fabric.pcie_aer(aer_snapshot(aer))
    assert (result.status, result.critical) == (status, critical), result.summary
    assert result.summary.startswith("GPU 3 (0000:18:00.0)"), "the GPU is named by its NVML index"


def test_aer_correctable_rise_since_the_previous_audit() -> None:
    key = "fabric.pcie_aer|0000:18:00.0"
    below = aer_snapshot(
        AerCounts(0, 0, 150), {key: {"correctable": 150 - fabric.AER_CORRECTABLE_RISE_WARN + 1}}
    )
    at = aer_snapshot(AerCounts(0, 0, 150), {key: {"correctable": 150 - fabric.AER_CORRECTABLE_RISE_WARN}})
    reset = aer_snapshot(AerCounts(0, 0, 150), {key: {"correctable": 900}})  # rebooted: counters restarted
    assert fabric.pcie_aer(below)[0].status is Status.PASS
    assert fabric.pcie_aer(at)[0].status is Status.WARN
    assert "since the previous audit" in fabric.pcie_aer(at)[0].summary
    assert fabric.pcie_aer(reset)[0].status is Status.PASS


def test_aer_cannot_judge_without_devices_or_statistics() -> None:
    assert fabric.pcie_aer(snap())[0].status is Status.SKIP
    (result,) = fabric.pcie_aer(aer_snapshot(None))
    assert result.status is Status.SKIP and "no AER statistics" in result.summary


def test_aer_parser_totals_and_named_counters() -> None:
    assert parse_aer("RxErr 3\nBadTLP 0\nTOTAL_ERR_COR 3\n") == (3, {"RxErr": 3})
    assert parse_aer("Data Link Protocol 2\nTOTAL_ERR_NONFATAL 2") == (2, {"Data Link Protocol": 2})
    assert parse_aer("RxErr 1 BadTLP 4") == (5, {"RxErr": 1, "BadTLP": 4}), "no total: the sum"
    assert parse_aer("") == (None, {})


# ----------------------------------------------------------------------------------- RDMA ports


def test_an_expected_port_must_be_active_at_its_rate() -> None:
    wanted = expecting({"device": "mlx5_*", "port": 1, "rate_gbps": 400})
    assert fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(),)), expected=wanted))[0].status is Status.PASS
    slow = fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(rate_gbps=200.0),)), expected=wanted))[0]
    assert slow.status is Status.FAIL and "200.0 Gb/s, expected 400" in slow.summary
    polling = fabric.ib_ports(
        snap(fabric=Fabric(ib_ports=(port(state="DOWN", phys_state="Polling"),)), expected=wanted)
    )[0]
    assert polling.status is Status.FAIL and polling.critical and "Polling" in polling.summary


@pytest.mark.parametrize(
    ("changes", "status", "critical"),
    [
        ({"state": "DOWN", "phys_state": "Disabled"}, Status.FAIL, True),  # expected, yet switched off
        ({"rate_gbps": None}, Status.FAIL, False),  # a rate sysfs did not give cannot meet 400
        ({"rate_gbps": 399.0}, Status.FAIL, False),
        ({"rate_gbps": 400.0}, Status.PASS, False),
        ({"rate_gbps": 800.0}, Status.PASS, False),
    ],
)
def test_an_expected_port_at_each_boundary(changes: dict[str, Any], status: Status, critical: bool) -> None:
    wanted = expecting({"device": "mlx5_*", "port": 1, "rate_gbps": 400})
    (result,) = fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(**changes),)), expected=wanted))
    assert (result.status, result.critical) == (status, critical), result.summary


def test_width_and_link_layer_expectations() -> None:
    wanted = expecting({"device": "mlx5_0", "width": "4X", "link_layer": "InfiniBand"})
    narrow = fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(width="2X"),)), expected=wanted))[0]
    roce = fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(link_layer="Ethernet"),)), expected=wanted))[0]
    assert narrow.status is Status.FAIL and "width 2X, expected 4X" in narrow.summary
    assert roce.status is Status.FAIL and "link layer Ethernet" in roce.summary


def test_a_missing_expected_port_is_critical() -> None:
    wanted = expecting({"device": "mlx5_0"}, {"device": "mlx5_1"})
    results = by_subject(fabric.ib_ports(snap(fabric=Fabric(ib_ports=(port(),)), expected=wanted)))
    assert results["mlx5_0/1"].status is Status.PASS
    assert results["mlx5_1/1"].status is Status.FAIL and results["mlx5_1/1"].critical


def test_ports_nobody_expects_are_judged_only_for_faults() -> None:
    ports = (
        port(device="mlx5_0", state="DOWN", phys_state="Disabled"),
        port(device="mlx5_1", state="DOWN", phys_state="Polling"),
        port(device="mlx5_2", state="INIT", phys_state="LinkUp"),
        port(device="mlx5_3"),
    )
    results = by_subject(fabric.ib_ports(snap(fabric=Fabric(ib_ports=ports))))
    assert results["mlx5_0/1"].status is Status.PASS and "unused" in results["mlx5_0/1"].summary
    assert results["mlx5_1/1"].status is Status.WARN and not results["mlx5_1/1"].critical
    assert results["mlx5_2/1"].status is Status.WARN and "subnet manager" in results["mlx5_2/1"].summary
    assert results["mlx5_3/1"].status is Status.PASS
    # Only a port the subnet manager left unconfigured names the SM as its cause; a cable is the node's.
    assert results["mlx5_2/1"].shared_dependency == "InfiniBand subnet manager"
    assert [results[p].shared_dependency for p in ("mlx5_0/1", "mlx5_1/1", "mlx5_3/1")] == [None] * 3


def test_no_ports_and_none_expected_is_a_skip_and_a_wedged_adapter_fails() -> None:
    assert fabric.ib_ports(snap())[0].status is Status.SKIP
    wedged = fabric.ib_errors(snap(fabric=Fabric(ib_error="the RDMA adapters did not answer within 5 s")))[0]
    assert wedged.status is Status.FAIL and wedged.critical


@pytest.mark.parametrize("counter", sorted(fabric.IB_COUNTER_WARN))
def test_each_ib_counter_warns_at_its_threshold(counter: str) -> None:
    limit = fabric.IB_COUNTER_WARN[counter]
    below = fabric.ib_errors(snap(fabric=Fabric(ib_ports=(port(counters={counter: limit - 1}),))))[0]
    at = fabric.ib_errors(snap(fabric=Fabric(ib_ports=(port(counters={counter: limit}),))))[0]
    assert below.status is Status.PASS, below.summary
    assert at.status is Status.WARN and counter in at.summary


def test_ib_counters_that_rise_since_the_previous_audit() -> None:
    key = "fabric.ib_errors|mlx5_0/1"
    now = port(counters={"symbol_error": 30, "link_downed": 2})
    calm = snap(fabric=Fabric(ib_ports=(now,)), previous={key: {"symbol_error": 21, "link_downed": 2}})
    rising = snap(fabric=Fabric(ib_ports=(now,)), previous={key: {"symbol_error": 20, "link_downed": 2}})
    flapping = snap(fabric=Fabric(ib_ports=(now,)), previous={key: {"symbol_error": 30, "link_downed": 1}})
    assert fabric.ib_errors(calm)[0].status is Status.PASS
    assert fabric.ib_errors(rising)[0].status is Status.WARN
    assert "+10 since the previous audit" in fabric.ib_errors(rising)[0].summary
    flap = fabric.ib_errors(flapping)[0]
    assert flap.status is Status.FAIL and "flaps" in flap.summary


def test_a_saturated_counter_is_named() -> None:
    result = fabric.ib_errors(snap(fabric=Fabric(ib_ports=(port(counters={"symbol_error": 0xFFFF}),))))[0]
    assert result.status is Status.WARN and "at the counter's maximum" in result.summary


def test_hca_pcie_width_and_speed() -> None:
    def judge(**link: Any) -> Result:
        device = PciDevice("0000:1a:00.0", "hca", "0x15b3", "0x020700", None, **link)
        return fabric.hca_pcie(snap(fabric=Fabric(pci=(device,))))[0]

    full = {
        "link_width": 16,
        "link_width_max": 16,
        "link_speed": "32.0 GT/s PCIe",
        "link_speed_max": "32.0 GT/s PCIe",
    }
    assert judge(**full).status is Status.PASS
    assert judge(**{**full, "link_width": 8}).status is Status.FAIL
    assert judge(**{**full, "link_speed": "16.0 GT/s PCIe"}).status is Status.WARN
    assert judge().status is Status.SKIP
    assert fabric.hca_pcie(snap())[0].status is Status.SKIP


def test_ipoib() -> None:
    results = by_subject(
        fabric.ipoib(snap(fabric=Fabric(ipoib={"ib0": "up", "ib1": "down", "ib2": "absent"})))
    )
    assert [results[n].status for n in ("ib0", "ib1", "ib2")] == [Status.PASS, Status.FAIL, Status.FAIL]
    assert fabric.ipoib(snap())[0].status is Status.SKIP


# ------------------------------------------------------------------------------------- GPUDirect


@pytest.mark.parametrize(
    ("modules", "open_module", "kernel", "status"),
    [
        ({"nvidia", "nvidia_peermem"}, False, "5.4.0-150-generic", Status.PASS),
        ({"nvidia"}, True, "5.15.0-91-generic", Status.PASS),
        ({"nvidia"}, True, "5.12.0", Status.PASS),
        ({"nvidia"}, True, "5.11.22", Status.FAIL),
        ({"nvidia"}, False, "6.8.0-49-generic", Status.FAIL),
        (set(), None, "6.8.0-49-generic", Status.FAIL),
    ],
)
def test_gpudirect_where_required(
    modules: set[str], open_module: bool | None, kernel: str, status: Status
) -> None:
    node = snap(
        kernel_modules=frozenset(modules),
        fabric=Fabric(open_kernel_module=open_module, kernel_release=kernel),
        expected={"health": {"ib_ports": [], "gpudirect_rdma": True}},
    )
    assert fabric.gpudirect(node).status is status
    not_required = dataclasses.replace(node, expected={"health": {"ib_ports": []}})
    assert fabric.gpudirect(not_required).status is Status.SKIP


# ----------------------------------------------------------------------------------------- NVLink


def links(count: int, down: tuple[int, ...] = (), **errors: int) -> tuple[NvLink, ...]:
    return tuple(NvLink(i, i not in down, **errors) for i in range(count))


def nvlink_result(gpu_links: tuple[NvLink, ...] | None, **changes: Any) -> Result:
    gpu = Gpu(index=0, uuid="GPU-0", nvlinks=gpu_links)
    (result,) = fabric.nvlink(snap(nvml=NvmlState(True, gpus=(gpu,)), **changes))
    return result


def test_nvlink_states() -> None:
    assert nvlink_result(links(18)).status is Status.PASS
    down = nvlink_result(links(18, down=(4, 7)))
    assert down.status is Status.FAIL and down.critical and "16 of 18" in down.summary
    assert nvlink_result(()).status is Status.SKIP, "a PCIe card has none"
    bridge_less = nvlink_result(links(18, down=tuple(range(18))))
    assert bridge_less.status is Status.PASS and "none expected" in bridge_less.summary
    on_nvswitch = nvlink_result(
        links(18, down=tuple(range(18))), expected={"nvidia_driver": {"branch": "580", "nvswitch_count": 4}}
    )
    assert on_nvswitch.status is Status.FAIL


def test_nvlink_expectation_from_the_manifest() -> None:
    twelve = {"health": {"ib_ports": [], "nvlink_links_per_gpu": 12}}
    assert nvlink_result(links(18, down=tuple(range(12, 18))), expected=twelve).status is Status.PASS
    assert nvlink_result(links(18, down=tuple(range(11, 18))), expected=twelve).status is Status.FAIL
    missing = nvlink_result((), expected=twelve)
    assert missing.status is Status.FAIL and "12 expected" in missing.summary


def test_nvlink_error_thresholds_and_rises() -> None:
    assert nvlink_result(links(2, replay_errors=fabric.NVLINK_REPLAY_WARN - 1)).status is Status.PASS
    assert nvlink_result(links(2, replay_errors=fabric.NVLINK_REPLAY_WARN)).status is Status.WARN
    assert nvlink_result(links(2, recovery_errors=fabric.NVLINK_RECOVERY_WARN - 1)).status is Status.PASS
    assert nvlink_result(links(2, recovery_errors=fabric.NVLINK_RECOVERY_WARN)).status is Status.WARN
    before = {"fabric.nvlink|0:GPU-0": {"0:recovery": 2, "1:recovery": 3}}
    rose = nvlink_result(links(2, recovery_errors=3), previous=before)
    assert rose.status is Status.WARN and "link 0 recovery +1" in rose.summary


def test_nvlink_without_nvml_skips() -> None:
    (result,) = fabric.nvlink(snap(nvml=NvmlState(False, error="NVML Shared Library Not Found")))
    assert result.status is Status.SKIP and "NVML" in result.summary


# --------------------------------------------------------------------------------- Fabric Manager


def fm_node(
    running: bool | None, fm_version: str | None, switches_on_bus: int = 0, recorded: int = 4
) -> Snapshot:
    packages = (Package("nvidia-fabricmanager-580", fm_version, True),) if fm_version else ()
    pci = tuple(
        PciDevice(f"0000:0{i}:01.0", "nvswitch", "0x10de", "0x068000") for i in range(switches_on_bus)
    )
    return snap(
        nvml=NvmlState(True, driver_version="580.95.05"),
        driver_packages=packages,
        fabric=Fabric(pci=pci, fabric_manager_running=running),
        expected={"nvidia_driver": {"branch": "580", "nvswitch_count": recorded}},
    )


def test_fabric_manager() -> None:
    assert fabric.fabric_manager(fm_node(True, "580.95.05-1")).status is Status.PASS
    stopped = fabric.fabric_manager(fm_node(False, "580.95.05-1"))
    assert stopped.status is Status.FAIL and stopped.critical
    upgraded = fabric.fabric_manager(fm_node(True, "580.105.08-1"))
    assert upgraded.status is Status.FAIL and "differs from the driver 580.95.05" in upgraded.summary
    assert fabric.fabric_manager(fm_node(None, None, recorded=0)).status is Status.SKIP
    # NVSwitches on the bus count even where no manifest recorded them
    assert fabric.fabric_manager(fm_node(False, None, switches_on_bus=4, recorded=0)).status is Status.FAIL


# ------------------------------------------------------------------------------------ gpu.firmware


def test_firmware_consistency_per_model() -> None:
    def judge(*gpus: Gpu) -> Result:
        return firmware(snap(nvml=NvmlState(True, gpus=gpus)))

    h100 = "NVIDIA H100 80GB HBM3"
    same = [
        Gpu(index=i, name=h100, vbios_version="96.00.99.00.01", inforom_image="G520.0200.00.05")
        for i in range(4)
    ]
    assert judge(*same).status is Status.PASS
    odd = dataclasses.replace(same[2], vbios_version="96.00.61.00.01")
    mixed = judge(same[0], same[1], odd, same[3])
    assert mixed.status is Status.WARN and "on GPU 2" in mixed.summary
    other_model = Gpu(index=4, name="NVIDIA L40S", vbios_version="95.02.5D.00.01")
    assert judge(*same, other_model).status is Status.PASS, "versions are compared within one model"
    assert judge(Gpu(index=0, name=h100)).status is Status.SKIP


# ------------------------------------------------------------------------------- probes on trees


def test_a_healthy_hgx_tree_passes_every_fabric_check(tmp_path: Path) -> None:
    hgx_node(tmp_path)
    snapshot = collect_snapshot(tmp_path, areas=["fabric"])
    assert len(snapshot.fabric.ib_ports) == 8
    assert snapshot.fabric.ib_ports[0].pci_address == "0000:1a:00.0"
    assert snapshot.fabric.fabric_manager_running and snapshot.fabric.open_kernel_module
    results = fabric_results(snapshot)
    assert {r.status for r in results if r.id != "fabric.nvlink"} == {Status.PASS}, [
        (r.id, r.summary) for r in results if r.status is not Status.PASS
    ]


def fabric_results(snapshot: Snapshot) -> list[Result]:
    from dltune.checks import run_checks

    return run_checks(snapshot, ["fabric"])


def test_faults_in_a_tree_are_found_by_the_probes(tmp_path: Path) -> None:
    hgx_node(tmp_path)
    ib_port(tmp_path, Port("mlx5_3", state="DOWN", phys_state="Polling", counters={"link_downed": 7}))
    pci_device(tmp_path, "0000:ee:00.0", vendor="0x15b3", device_class="0x020700", aer={"fatal": 2}, width=8)
    (tmp_path / "proc/4242/comm").write_text("bash\n")
    write(tmp_path, "/sys/class/net/ib0/operstate", "down\n")
    results = fabric_results(collect_snapshot(tmp_path, areas=["fabric"]))
    failed = {(r.id, r.subject) for r in results if r.status is Status.FAIL}
    assert ("fabric.ib_ports", "mlx5_3/1") in failed
    assert ("fabric.pcie_aer", "0000:ee:00.0") in failed
    assert ("fabric.hca_pcie", "0000:ee:00.0") in failed
    assert ("fabric.fabric_manager", None) in failed
    assert ("fabric.ipoib", "ib0") in failed


def test_an_adapter_that_blocks_its_reader_is_a_finding_not_a_hung_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A counter file that never answers (a FIFO nobody writes: a read that blocks, as on a wedged
    adapter) stops the child that reads it at the deadline, never the audit."""
    ib_port(tmp_path, Port("mlx5_0"))
    counter = tmp_path / "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    counter.unlink()
    os.mkfifo(counter)
    monkeypatch.setattr("dltune.probes.fabric.IB_TIMEOUT_S", 0.5)
    deadline = Deadline(30)
    ports, error = read_ib_ports(HostFS(tmp_path), deadline)
    assert ports == () and error is not None and "did not answer within 0.5 s" in error
    assert fabric.ib_ports(snap(fabric=Fabric(ib_error=error)))[0].critical


def test_rate_strings() -> None:
    assert parse_rate("200 Gb/sec (2X NDR)") == (200.0, "2X")
    assert parse_rate("2.5 Gb/sec (1X SDR)") == (2.5, "1X")
    assert parse_rate("10 Gb/sec (4X)") == (10.0, "4X")
    assert parse_rate("garbage") == (None, None)


def test_a_corrupt_health_fragment_is_never_read_as_nothing_expected(tmp_path: Path) -> None:
    ib_port(tmp_path, Port("mlx5_0", state="DOWN", phys_state="Polling"))
    manifest(tmp_path, "health", {"ib_ports": "mlx5_0"})
    results = fabric_results(collect_snapshot(tmp_path, areas=["fabric"]))
    ports = [r for r in results if r.id == "fabric.ib_ports"]
    assert ports[0].status is Status.FAIL and "cannot judge" in ports[0].summary


# ------------------------------------------------------------------------------------ --previous


def audit_json(root: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dltune.cli",
            "audit",
            "--root",
            str(root),
            "--only",
            "fabric",
            "--format",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_counters_are_compared_with_the_previous_output(tmp_path: Path) -> None:
    tree, outputs = tmp_path / "node", tmp_path / "out"
    outputs.mkdir()
    hgx_node(tree)
    facts = outputs / "dltune.fact"
    rc, _, err = audit_json(tree, "--facts-file", str(facts))
    assert rc == 0, err
    saved = outputs / "before.json"
    saved.write_text(facts.read_text())
    write(tree, "/sys/class/infiniband/mlx5_2/ports/1/counters/link_downed", "1\n")
    # implicitly: the facts file this run replaces
    rc, doc, _ = audit_json(tree, "--facts-file", str(facts))
    flapping = [r for r in doc["results"] if r["id"] == "fabric.ib_errors" and r["status"] == "fail"]
    assert rc == 1 and [r["subject"] for r in flapping] == ["mlx5_2/1"]
    # explicitly, with --previous; and without any previous output, one link-down is no finding
    assert audit_json(tree, "--previous", str(saved))[0] == 1
    assert audit_json(tree)[0] == 0


def test_an_unusable_previous_output_is_a_usage_error(tmp_path: Path) -> None:
    hgx_node(tmp_path / "node")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, err = audit_json(tmp_path / "node", "--previous", str(bad))
    assert rc == 2 and "--previous" in err


def test_application_clocks() -> None:
    from dltune.checks.gpu import app_clocks

    def judge(now: int | None, default: int | None) -> Status:
        gpu = Gpu(index=0, uuid="GPU-0", app_clock_mhz=now, app_clock_default_mhz=default)
        return app_clocks(snap(nvml=NvmlState(True, gpus=(gpu,))))[0].status

    assert judge(1980, 1980) is Status.PASS
    assert judge(1961, 1980) is Status.PASS, "within 1% of the default"
    assert judge(1960, 1980) is Status.WARN
    assert judge(None, 1980) is Status.SKIP


def test_nvml_fabric_registration() -> None:
    """Hopper's NVSwitches need not show on the PCI bus: NVML's fabric state of the GPUs says there is
    a fabric, and which GPUs Fabric Manager has not (successfully) taken in."""
    registered = tuple(Gpu(index=i, fabric_state=3, fabric_status=0) for i in range(4))
    node = snap(
        nvml=NvmlState(True, driver_version="580.95.05", gpus=registered),
        fabric=Fabric(fabric_manager_running=True),
        expected={"nvidia_driver": {"branch": "580"}},
    )
    assert fabric.fabric_manager(node).status is Status.PASS, "a fabric known from NVML alone is judged"
    pending = dataclasses.replace(
        node,
        nvml=NvmlState(
            True, driver_version="580.95.05", gpus=(*registered[:3], Gpu(index=3, fabric_state=2))
        ),
    )
    result = fabric.fabric_manager(pending)
    assert result.status is Status.FAIL and result.critical and "GPU 3 in progress" in result.summary
    failed = dataclasses.replace(
        node,
        nvml=NvmlState(True, gpus=(*registered[:3], Gpu(index=3, fabric_state=3, fabric_status=999))),
    )
    assert "completed with error 999" in fabric.fabric_manager(failed).summary
    stopped = dataclasses.replace(node, fabric=Fabric(fabric_manager_running=False))
    assert fabric.fabric_manager(stopped).status is Status.FAIL
    pcie_cards = dataclasses.replace(node, nvml=NvmlState(True, gpus=(Gpu(index=0, fabric_state=0),)))
    assert fabric.fabric_manager(pcie_cards).status is Status.SKIP


def test_ib_errors_skip_without_active_ports_or_counters() -> None:
    assert fabric.ib_errors(snap())[0].status is Status.SKIP
    down = port(state="DOWN", phys_state="Disabled")
    (none_active,) = fabric.ib_errors(snap(fabric=Fabric(ib_ports=(down,))))
    assert none_active.status is Status.SKIP and "no active RDMA port" in none_active.summary
    (unreadable,) = fabric.ib_errors(snap(fabric=Fabric(ib_ports=(port(counters={}),))))
    assert unreadable.status is Status.SKIP and "cannot be read" in unreadable.summary
