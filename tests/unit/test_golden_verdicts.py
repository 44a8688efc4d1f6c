"""Every check's whole result (status, summary, remedy, evidence, metrics, critical), as the JSON
envelope carries it, for fixed hosts, against golden files in tests/fixtures/golden/: what a user
reads and what alerts and remediation key on must not change by accident. A deliberate change is
written back with DLTUNE_UPDATE_GOLDEN=1 and reviewed in the diff.

Hosts: each fixture tree (collect_snapshot over it, all areas) and GPU states given as NVML's
answers (no GPU here): NVML missing or hung, no GPU, a lost GPU, a GPU whose queries all fail, a
healthy H100, and GPUs at and past each judge's limits; and gpu.xid / gpu.sxid on every real kernel
log of tests/fixtures/real (kernel_log, sxid), whose verdicts test_real_corpus states."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from dltune.checks import run_checks
from dltune.checks.gpu import sxid, xid
from dltune.probes import collect_snapshot
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import HW_SLOWDOWN, IDLE, SW_POWER_CAP, SW_THERMAL, Gpu, NvLink, NvmlState, Snapshot
from tests.conftest import FIXTURES
from tests.real_corpus import Sample, samples

GOLDEN = FIXTURES / "golden"
UPDATE = os.environ.get("DLTUNE_UPDATE_GOLDEN") == "1"
TREES = sorted(
    path.name
    for path in FIXTURES.iterdir()
    if path.is_dir() and path.name not in {"golden", "real", "nvml"} and not path.name.startswith(".")
)

HEALTHY_H100 = Gpu(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    uuid="GPU-11111111-2222-3333-4444-555555555555",
    persistence=True,
    temperature_c=41,
    slowdown_c=87,
    power_w=120.0,
    power_limit_w=700.0,
    power_default_limit_w=700.0,
    pcie_gen=5,
    pcie_gen_max=5,
    pcie_width=16,
    pcie_width_max=16,
    clock_event_reasons=IDLE,
    clock_event_reasons_later=IDLE,
    clock_event_share={},
    clock_window_s=1.0,
    ecc_uncorrected_volatile=0,
    ecc_corrected_volatile=0,
    remapped_rows_pending=False,
    remapped_rows_failure=False,
    remapped_rows_corrected=0,
    remapped_rows_uncorrected=0,
    remap_histogram={"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0},
    utilization_percent=0,
    compute_pids=(),
    pci_bus_id="0000:18:00.0",
    app_clock_mhz=1980,
    app_clock_default_mhz=1980,
    vbios_version="96.00.74.00.01",
    fabric_state=3,
    fabric_status=0,
    nvlinks=tuple(NvLink(link=i, active=True) for i in range(18)),
)


def _gpu(index: int, **changes: Any) -> Gpu:
    """The healthy H100 as GPU `index` (its own UUID and bus), with these answers changed."""
    from dataclasses import replace

    uuid = f"GPU-{index:08d}-2222-3333-4444-555555555555"
    return replace(
        HEALTHY_H100, index=index, uuid=uuid, pci_bus_id=f"0000:{0x18 + index:02x}:00.0", **changes
    )


# What NVML answers where a GPU has no row remapping (pre-Ampere, GeForce) or no ECC at all.
NO_ROW_REMAPPING: dict[str, Any] = {
    "remap_histogram": None,
    "remapped_rows_pending": None,
    "remapped_rows_failure": None,
    "remapped_rows_corrected": None,
    "remapped_rows_uncorrected": None,
}
NO_ECC: dict[str, Any] = {
    "ecc_uncorrected_volatile": None,
    "ecc_corrected_volatile": None,
    **NO_ROW_REMAPPING,
}


def _v100(index: int, **changes: Any) -> Gpu:
    """A V100 (page retirement, no row remapping) as GPU `index`."""
    return _gpu(index, name="Tesla V100-SXM2-32GB", **NO_ROW_REMAPPING, **changes)


GPU_STATES: dict[str, NvmlState] = {
    "eight_healthy": NvmlState(True, driver_version="580.95.05", gpus=tuple(_gpu(i) for i in range(8))),
    "memory_wear": NvmlState(
        True,
        driver_version="580.95.05",
        gpus=(
            _gpu(0, remapped_rows_pending=True),  # a remap waits for a reset, nothing else
            _gpu(1, remapped_rows_corrected=3, remapped_rows_uncorrected=1),
            _v100(2, retired_pages_sbe=10, retired_pages_dbe=2, retired_pages_pending=False),
            _v100(3, retired_pages_sbe=0, retired_pages_dbe=0, retired_pages_pending=True),
            _gpu(4, **NO_ECC),  # a GeForce: no ECC at all
            _gpu(5, remap_histogram={"max": 500, "high": 100, "partial": 30, "low": 0, "none": 0}),
        ),
    ),
    "nvml_missing": NvmlState(False, error="NVML Shared Library Not Found", error_code=12),
    "nvml_hung": NvmlState(False, error="NVML did not answer within 10 s", hung=True),
    "no_gpus": NvmlState(True, driver_version="580.95.05"),
    "healthy_h100": NvmlState(True, driver_version="580.95.05", gpus=(HEALTHY_H100,)),
    "lost_and_unreadable": NvmlState(
        True,
        driver_version="580.95.05",
        gpus=(
            Gpu(index=0, error="GPU is lost"),
            Gpu(index=1, unreadable="Insufficient Permissions"),
            _gpu(  # its ECC queries answer Unknown Error, as a failing GPU's do
                index=2,
                nvml_errors={"GetTotalEccErrors": "Unknown Error", "GetRemappedRows": "Unknown Error"},
                **NO_ECC,
            ),
        ),
    ),
    "at_the_limits": NvmlState(
        True,
        driver_version="580.95.05",
        gpus=(
            _gpu(
                index=0,
                ecc_uncorrected_volatile=1,
                remapped_rows_pending=True,
                remap_histogram={"max": 600, "high": 0, "partial": 0, "low": 2, "none": 0},
            ),
            _gpu(index=1, remapped_rows_failure=True, remap_histogram={"max": 0, "none": 1}),
            _gpu(  # busy: a narrow link under load fails
                index=2,
                pcie_width=8,
                pcie_gen=4,
                clock_event_reasons=0,
                clock_event_reasons_later=0,
                utilization_percent=93,
                compute_pids=(4242,),
            ),
            _gpu(
                index=3,
                clock_event_reasons=HW_SLOWDOWN,
                clock_event_reasons_later=HW_SLOWDOWN | SW_THERMAL,
                clock_event_share={HW_SLOWDOWN: 0.5, SW_THERMAL: 0.2},
                temperature_c=84,
            ),
            _gpu(
                index=4,
                power_limit_w=500.0,
                clock_event_reasons=SW_POWER_CAP,
                clock_event_reasons_later=SW_POWER_CAP,
                clock_event_share={SW_POWER_CAP: 0.9},
                power_w=520.0,
            ),
            _gpu(
                index=5, persistence=False, app_clock_mhz=1410, compute_pids=(4242,), utilization_percent=97
            ),
            _gpu(
                index=6,
                name="Tesla V100-SXM2-32GB",
                remap_histogram=None,
                remapped_rows_pending=None,
                remapped_rows_failure=None,
                retired_pages_sbe=63,
                retired_pages_dbe=16,
                retired_pages_pending=True,
                ecc_corrected_volatile=5000,
            ),
            _gpu(
                index=8,
                clock_event_reasons=SW_THERMAL,
                clock_event_reasons_later=SW_THERMAL,
                clock_event_share={SW_THERMAL: 0.6},
                utilization_percent=100,
            ),
            _gpu(
                index=9,
                clock_event_reasons=SW_POWER_CAP,
                clock_event_reasons_later=SW_POWER_CAP,
                clock_event_share={SW_POWER_CAP: 0.7},
                utilization_percent=100,
            ),
            _gpu(index=10, clock_event_reasons=0, clock_event_reasons_later=0, utilization_percent=0),
            _gpu(
                index=11,
                clock_event_reasons=None,
                clock_event_reasons_later=None,
                app_clock_mhz=None,
                persistence=None,
                power_limit_w=None,
                temperature_c=None,
                pcie_width=None,
            ),
            _gpu(
                index=12,
                pcie_gen=4,
                clock_event_reasons=IDLE,
                clock_event_reasons_later=IDLE,
                utilization_percent=0,
                ecc_corrected_volatile=12,
            ),
            _gpu(
                index=7,
                fabric_state=2,
                nvlinks=(NvLink(link=0, active=False), *(NvLink(link=i, active=True) for i in range(1, 18))),
            ),
        ),
    ),
}


def _compare(name: str, results: list[dict[str, Any]]) -> None:
    golden = GOLDEN / f"{name}.json"
    golden.parent.mkdir(exist_ok=True)
    text = json.dumps(results, indent=1, sort_keys=True) + "\n"
    if UPDATE:
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: write it with DLTUNE_UPDATE_GOLDEN=1 and review it"
    want = json.loads(golden.read_text())
    for index, (got_one, want_one) in enumerate(zip(results, want, strict=False)):
        assert got_one == want_one, f"{name}: result {index} changed (DLTUNE_UPDATE_GOLDEN=1 if on purpose)"
    assert len(results) == len(want), f"{name}: {len(results)} results, the golden file has {len(want)}"


@pytest.mark.parametrize("tree", TREES)
def test_every_check_of_a_fixture_host(tree: str) -> None:
    root = FIXTURES / tree
    results = [r.to_dict() for r in run_checks(collect_snapshot(root))]
    shown = json.loads(json.dumps(results).replace(str(root), "<root>"))
    _compare(f"tree_{tree}", shown)


@pytest.mark.parametrize("state", sorted(GPU_STATES))
def test_every_gpu_check_of_a_gpu_state(state: str) -> None:
    snapshot = Snapshot(root="/", nvml=GPU_STATES[state])
    _compare(f"gpu_{state}", [r.to_dict() for r in run_checks(snapshot, areas=["gpu"])])


@pytest.mark.parametrize("sample", samples("kernel_log") + samples("sxid"), ids=str)
def test_xid_and_sxid_of_every_real_kernel_log(sample: Sample) -> None:
    snapshot = Snapshot(root="/", kernel_log=kernel_log_of(sample.body))
    results = [r.to_dict() for r in [*xid(snapshot), *sxid(snapshot)]]
    _compare(f"real_{sample.kind}/{sample.name}", results)
