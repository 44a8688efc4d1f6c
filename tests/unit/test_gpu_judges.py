"""Each per-GPU judgement of checks/gpu.py at its boundary, as a table (NVML's answers given as data:
no GPU here). A judge that moves its threshold by one step, or inverts a comparison, fails a row."""

from __future__ import annotations

import pytest

from dltune.checks.gpu import (
    HW_SLOWDOWN,
    IDLE,
    POWER_LIMIT_LOWERED,
    SUSTAINED_SHARE,
    SW_POWER_CAP,
    SW_THERMAL,
    THERMAL_MARGIN_C,
    app_clocks,
    clocks,
    ecc,
    pcie,
    persistence,
    power_limit,
    present,
    thermal_power,
)
from dltune.model import Status
from dltune.snapshot import Gpu, NvmlState, Snapshot


def judged(check, gpu: Gpu, **snapshot) -> Status:  # type: ignore[no-untyped-def]
    (result,) = check(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,)), **snapshot))
    return result.status


@pytest.mark.parametrize(("uncorrected", "status"), [(0, Status.PASS), (1, Status.FAIL), (2, Status.FAIL)])
def test_ecc_one_uncorrected_error_fails(uncorrected: int, status: Status) -> None:
    gpu = Gpu(
        index=0,
        ecc_uncorrected_volatile=uncorrected,
        remapped_rows_failure=False,
        remapped_rows_pending=False,
    )
    assert judged(ecc, gpu) is status


@pytest.mark.parametrize(
    ("width", "width_max", "gen", "gen_max", "reasons", "status"),
    [
        (16, 16, 5, 5, 0, Status.PASS),
        (15, 16, 5, 5, 0, Status.FAIL),  # one lane short
        (8, 16, 5, 5, IDLE, Status.WARN),  # narrow while idle: NVIDIA's width "may be reduced when the GPU
        # is not in use", so idle is a warning to recheck under load (test_gpu_idle_real.py)
        (8, 16, 5, 5, 0, Status.FAIL),  # narrow, load unknown (the mask alone says nothing): fails
        (16, 8, 5, 5, 0, Status.PASS),  # wider than the max NVML states: not narrow
        (16, 16, 4, 5, 0, Status.PASS),  # below its generation, load unknown: no evidence of load
        (16, 16, 4, 5, IDLE, Status.PASS),  # idle GPUs lower the generation
        (16, 16, 5, 4, 0, Status.PASS),
    ],
)
def test_pcie_width_and_generation(
    width: int, width_max: int, gen: int, gen_max: int, reasons: int, status: Status
) -> None:
    gpu = Gpu(index=0, pcie_width=width, pcie_width_max=width_max, pcie_gen=gen, pcie_gen_max=gen_max,
              clock_event_reasons=reasons)  # fmt: skip
    assert judged(pcie, gpu) is status


@pytest.mark.parametrize(
    ("share", "status", "critical"),
    [
        (SUSTAINED_SHARE, Status.FAIL, True),
        (SUSTAINED_SHARE - 0.01, Status.WARN, False),
        (0.0, Status.PASS, False),
    ],
)
def test_a_hardware_slowdown_held_half_the_window_is_critical(
    share: float, status: Status, critical: bool
) -> None:
    reasons = HW_SLOWDOWN if share else 0
    gpu = Gpu(index=0, clock_event_reasons=reasons, clock_event_reasons_later=reasons,
              clock_event_share={HW_SLOWDOWN: share}, clock_window_s=0.5)  # fmt: skip
    (result,) = clocks(Snapshot(root="/", nvml=NvmlState(True, gpus=(gpu,))))
    assert (result.status, result.critical) == (status, critical)


def test_software_thermal_held_warns_and_in_passing_does_not() -> None:
    held = Gpu(index=0, clock_event_reasons=SW_THERMAL, clock_event_share={SW_THERMAL: SUSTAINED_SHARE},
               clock_window_s=0.5)  # fmt: skip
    passing = Gpu(index=0, clock_event_reasons=0, clock_event_reasons_later=0,
                  clock_event_share={SW_THERMAL: SUSTAINED_SHARE - 0.01}, clock_window_s=0.5)  # fmt: skip
    assert judged(clocks, held) is Status.WARN
    assert judged(clocks, passing) is Status.PASS


@pytest.mark.parametrize(
    ("temperature", "status"),
    [(85 - THERMAL_MARGIN_C - 1, Status.PASS), (85 - THERMAL_MARGIN_C, Status.WARN), (85, Status.WARN)],
)
def test_temperature_within_five_degrees_of_slowdown_warns(temperature: int, status: Status) -> None:
    assert judged(thermal_power, Gpu(index=0, temperature_c=temperature, slowdown_c=85)) is status


@pytest.mark.parametrize(("power", "status"), [(714.0, Status.PASS), (714.1, Status.WARN)])
def test_power_over_its_limit_by_two_percent_warns(power: float, status: Status) -> None:
    assert judged(thermal_power, Gpu(index=0, power_w=power, power_limit_w=700.0)) is status


@pytest.mark.parametrize(
    ("limit", "status"),
    [(700 * POWER_LIMIT_LOWERED, Status.PASS), (700 * POWER_LIMIT_LOWERED - 1, Status.WARN)],
)
def test_power_limit_lowered_below_98_percent_of_the_default(limit: float, status: Status) -> None:
    assert judged(power_limit, Gpu(index=0, power_limit_w=limit, power_default_limit_w=700.0)) is status


@pytest.mark.parametrize(
    ("clock", "default", "status"),
    [(1980, 1980, Status.PASS), (1961, 1980, Status.PASS), (1960, 1980, Status.WARN), (99, 100, Status.PASS)],
)
def test_application_clock_below_99_percent_of_its_default(clock: int, default: int, status: Status) -> None:
    assert judged(app_clocks, Gpu(index=0, app_clock_mhz=clock, app_clock_default_mhz=default)) is status


@pytest.mark.parametrize(
    ("limit", "status"),
    [(700 * POWER_LIMIT_LOWERED, Status.PASS), (700 * POWER_LIMIT_LOWERED - 1, Status.WARN)],
)
def test_clocks_held_by_the_power_cap_warn_only_under_a_lowered_limit(limit: float, status: Status) -> None:
    """gpu.clocks shares gpu.power_limit's rule: a power cap at the default limit is a loaded GPU's
    normal state; under a limit lowered below 98% of the default it is a finding."""
    gpu = Gpu(index=0, power_limit_w=limit, power_default_limit_w=700.0, utilization_percent=100,
              clock_event_reasons=SW_POWER_CAP, clock_event_reasons_later=SW_POWER_CAP,
              clock_event_share={SW_POWER_CAP: 0.9})  # fmt: skip
    assert judged(clocks, gpu) is status


@pytest.mark.parametrize(("mode", "status"), [(True, Status.PASS), (False, Status.WARN), (None, Status.SKIP)])
def test_persistence_mode(mode: bool | None, status: Status) -> None:
    assert judged(persistence, Gpu(index=0, persistence=mode)) is status


def test_a_gpu_hidden_by_the_job_s_cgroup_counts_as_present() -> None:
    """The manifest counts 2 GPUs; NVML refuses this process one of them (a job's device cgroup): both
    are present, none is lost; a third missing one would fail."""
    gpus = (Gpu(index=0, name="NVIDIA H100 80GB HBM3"), Gpu(index=1, unreadable="Insufficient Permissions"))
    counted = {"nvidia_driver": {"gpu_count": 2}}
    (result,) = present(Snapshot(root="/", nvml=NvmlState(True, gpus=gpus), expected=counted))
    assert result.status is Status.PASS
    (result,) = present(
        Snapshot(root="/", nvml=NvmlState(True, gpus=gpus), expected={"nvidia_driver": {"gpu_count": 3}})
    )
    assert (result.status, result.critical) == (Status.FAIL, True)


FOUR_GPUS = tuple(Gpu(index=i, name="NVIDIA H100 80GB HBM3") for i in range(4))


@pytest.mark.parametrize(
    ("expected", "status", "summary"),
    [
        ({}, Status.PASS, "4 GPUs answer"),
        ({"health": {"gpu_count": 4}}, Status.PASS, "4 GPUs answer"),
        ({"health": {"gpu_count": 5}}, Status.FAIL,
         "4 of 5 GPUs answer (5 expected by dltune_health_gpu_count)"),
        ({"health": {"gpu_count": None}}, Status.PASS, "4 GPUs answer"),
        # Where role nvidia_driver counted them, its count is the one judged.
        ({"nvidia_driver": {"gpu_count": 4}, "health": {"gpu_count": 8}}, Status.PASS, "4 GPUs answer"),
        ({"nvidia_driver": {"gpu_count": 5}, "health": {"gpu_count": 4}}, Status.FAIL,
         "4 of 5 GPUs answer (5 expected by nvidia_driver)"),
    ],
)  # fmt: skip
def test_the_sites_gpu_count_is_judged_where_the_driver_role_counts_none(
    expected: dict[str, dict[str, int | None]], status: Status, summary: str
) -> None:
    """Nodes whose driver another party manages (nvidia_driver_excluded: DGX OS) get their count from
    the inventory (role dltune's dltune_health_gpu_count, in health.json): one GPU short fails."""
    results = present(Snapshot(root="/", nvml=NvmlState(True, gpus=FOUR_GPUS), expected=expected))
    assert [(r.status, r.summary) for r in results][-1:] == [(status, summary)]
    assert results[-1].critical is (status is Status.FAIL)
