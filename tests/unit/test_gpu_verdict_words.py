"""The per-GPU checks as a user reads them: status, critical, the summary's words, the remedy and the
evidence of each case (NVML's answers as data: no GPU here). For gpu.clocks, older drivers give only
the reason mask at both ends of the window; newer ones each reason's share of it."""

from __future__ import annotations

from typing import Any

import pytest

from dltune.checks.gpu import SUSTAINED_SHARE, clocks, ecc, pcie, thermal_power
from dltune.model import Result, Status
from dltune.snapshot import (
    APPLICATIONS_CLOCKS_SETTING,
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL,
    IDLE,
    SW_POWER_CAP,
    SW_THERMAL,
    Gpu,
    NvmlState,
    Snapshot,
)

HARDWARE_REMEDY = "check cooling, power supply and the PSU/power brake cabling"
PASSING_REMEDY = "rerun `dltune audit --only gpu`; if it recurs, check cooling and power cabling"


def judge(
    first: int | None, later: int | None = None, share: dict[int, float] | None = None, **gpu: Any
) -> Result:
    g = Gpu(index=0, clock_event_reasons=first, clock_event_reasons_later=later, clock_event_share=share,
            clock_window_s=0.5 if share is not None else None, **gpu)  # fmt: skip
    (result,) = clocks(Snapshot(root="/", nvml=NvmlState(True, gpus=(g,))))
    return result


def test_no_reason_mask_is_a_skip() -> None:
    result = judge(None)
    assert (result.status, result.summary) == (Status.SKIP, "clock event reasons not supported")


@pytest.mark.parametrize("bit", [HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE])
def test_old_driver_a_hardware_reason_in_both_reads_is_critical(bit: int) -> None:
    result = judge(bit, bit)
    assert (result.status, result.critical, result.remedy) == (Status.FAIL, True, HARDWARE_REMEDY)
    name = {HW_SLOWDOWN: "hw slowdown", HW_THERMAL: "hw thermal slowdown", HW_POWER_BRAKE: "hw power brake"}[
        bit
    ]
    assert result.summary.endswith(f"clocks held down by hardware: {name} (in both reads of the reason mask)")
    assert result.evidence["share_of_window"] is None  # no counters: nothing to show, not an empty table
    assert (result.evidence["mask"], result.evidence["mask_later"]) == (hex(bit), hex(bit))


@pytest.mark.parametrize(("first", "later"), [(HW_SLOWDOWN, 0), (0, HW_SLOWDOWN)])
def test_old_driver_a_hardware_reason_in_one_read_only_warns(first: int, later: int) -> None:
    result = judge(first, later)
    assert (result.status, result.critical, result.remedy) == (Status.WARN, False, PASSING_REMEDY)
    assert result.summary.endswith("hardware slowdown seen but not sustained: hw slowdown")
    assert result.evidence["reasons"] == ["hw slowdown"]


def test_two_hardware_reasons_in_passing_are_both_named() -> None:
    result = judge(HW_SLOWDOWN | HW_THERMAL, 0)
    assert result.summary.endswith(
        "hardware slowdown seen but not sustained: hw slowdown, hw thermal slowdown"
    )


def test_two_hardware_reasons_held_are_both_labelled_with_their_share() -> None:
    result = judge(0, 0, {HW_SLOWDOWN: 0.6, HW_THERMAL: 0.75})
    assert result.summary.endswith(
        "clocks held down by hardware: hw slowdown (60% of a 0.5 s window), "
        "hw thermal slowdown (75% of a 0.5 s window)"
    )


@pytest.mark.parametrize(
    ("masks", "share", "status"),
    [
        ((0, 0), {HW_SLOWDOWN: 0.01}, Status.WARN),  # seen only in the counters: in passing
        ((0, 0), {HW_SLOWDOWN: 0.3}, Status.WARN),
        ((0, 0), {HW_SLOWDOWN: 0.0}, Status.PASS),
        ((HW_SLOWDOWN, HW_SLOWDOWN), {HW_SLOWDOWN: 0.0}, Status.WARN),  # the masks saw it; the share decides
        ((HW_SLOWDOWN, HW_SLOWDOWN), {SW_POWER_CAP: 0.2}, Status.FAIL),  # no counter for it: the masks decide
        ((0, 0), {HW_SLOWDOWN: SUSTAINED_SHARE}, Status.FAIL),
    ],
)
def test_with_counters_a_reason_is_seen_in_either_and_held_by_its_share(
    masks: tuple[int, int], share: dict[int, float], status: Status
) -> None:
    assert judge(*masks, share).status is status


def test_the_share_of_each_reason_is_evidence_rounded_to_a_thousandth() -> None:
    result = judge(SW_POWER_CAP, SW_POWER_CAP, {SW_POWER_CAP: 0.123456, IDLE: 0.5}, power_limit_w=700.0,
                   power_default_limit_w=700.0)  # fmt: skip
    assert result.evidence["share_of_window"] == {"idle": 0.5, "sw power cap": 0.123}
    assert result.evidence["window_s"] == 0.5
    assert (result.evidence["power_limit_w"], result.evidence["power_default_limit_w"]) == (700.0, 700.0)


def test_software_thermal_held_names_its_share_and_the_airflow_remedy() -> None:
    result = judge(SW_THERMAL, SW_THERMAL, {SW_THERMAL: 0.8})
    assert (result.status, result.critical) == (Status.WARN, False)
    assert result.summary.endswith("clocks held down: sw thermal slowdown (80% of a 0.5 s window)")
    assert result.remedy == "check airflow and inlet temperature (nvidia-smi -q -d TEMPERATURE)"


def test_a_power_cap_under_a_lowered_limit_says_both_limits() -> None:
    result = judge(
        SW_POWER_CAP, SW_POWER_CAP, {SW_POWER_CAP: 0.9}, power_limit_w=500.0, power_default_limit_w=700.0
    )
    assert result.status is Status.WARN
    assert result.summary.endswith(
        "held at a power limit lowered to 500 W (default 700 W): sw power cap (90% of a 0.5 s window)"
    )
    assert (
        result.remedy == "restore the default power limit (nvidia-smi -pl) unless it was lowered on purpose"
    )


@pytest.mark.parametrize(
    ("first", "later", "summary"),
    [
        (SW_POWER_CAP, SW_POWER_CAP, "at its power limit (the normal state of a loaded GPU)"),
        (0, 0, "clocks free (busy)"),
        (IDLE, IDLE, "clocks free (idle)"),
        (IDLE | APPLICATIONS_CLOCKS_SETTING, IDLE, "clocks free (idle, applications clocks setting)"),
    ],
)
def test_a_gpu_held_by_nothing_that_matters_passes_saying_what_was_seen(
    first: int, later: int, summary: str
) -> None:
    result = judge(first, later, power_limit_w=700.0, power_default_limit_w=700.0)
    assert (result.status, result.remedy) == (Status.PASS, None)
    assert result.summary.endswith(summary)


# --- gpu.ecc: the words and figures of each memory-wear verdict ------------------------------------------


def ecc_of(**gpu: Any) -> Result:
    (result,) = ecc(Snapshot(root="/", nvml=NvmlState(True, gpus=(Gpu(index=0, **gpu),))))
    return result


def test_row_remapping_readable_without_any_counter_is_judged_not_skipped() -> None:
    """A GPU that answers the remap query (no failure, nothing pending) and no ECC counter passes:
    only a GPU that answers none of the memory queries is a skip."""
    result = ecc_of(remapped_rows_failure=False, remapped_rows_pending=False)
    assert (result.status, result.summary) == (Status.PASS, "no uncorrected ECC errors, no remap pending")
    assert ecc_of().status is Status.SKIP


def test_pages_retired_at_the_limit_fail_saying_how_many_were_double_bit() -> None:
    result = ecc_of(ecc_uncorrected_volatile=0, retired_pages_sbe=63)
    assert (result.status, result.critical) == (Status.FAIL, False)
    assert result.summary == "63 memory pages retired (0 for double-bit errors): at the driver's limit"
    assert ecc_of(ecc_uncorrected_volatile=0, retired_pages_sbe=62).status is Status.WARN


def test_a_bank_with_no_spare_row_fails_with_the_rma_remedy_and_its_evidence() -> None:
    result = ecc_of(ecc_uncorrected_volatile=0, remapped_rows_failure=False, ecc_corrected_volatile=4,
                    remap_histogram={"max": 0, "high": 10, "partial": 2, "low": 1, "none": 2})  # fmt: skip
    assert (result.status, result.critical) == (Status.FAIL, False)
    assert result.summary == (
        "2 memory bank(s) with no spare row left: the next uncorrectable error there cannot be remapped"
    )
    assert result.remedy == "plan the GPU's replacement; run the field diagnostic for the RMA"
    assert result.evidence["remap_histogram"]["none"] == 2
    assert result.evidence["counters"] == {"corrected_volatile": 4, "uncorrected_volatile": 0}
    assert result.metrics == {"corrected_volatile": 4.0, "uncorrected_volatile": 0.0}


def test_every_wear_finding_is_listed_in_one_warning() -> None:
    result = ecc_of(ecc_uncorrected_volatile=0, remapped_rows_failure=False, remapped_rows_pending=True,
                    retired_pages_pending=True, remapped_rows_corrected=3)  # fmt: skip
    assert result.status is Status.WARN
    assert result.summary == (
        "a row remap is pending until the GPU is reset; a page retirement is pending until the GPU is reset; "
        "3 row(s) remapped (3 for correctable, 0 for uncorrectable errors)"
    )
    only_uncorrectable = ecc_of(
        ecc_uncorrected_volatile=0, remapped_rows_failure=False, remapped_rows_uncorrected=2
    )
    assert only_uncorrectable.summary == "2 row(s) remapped (0 for correctable, 2 for uncorrectable errors)"


# --- gpu.pcie, gpu.thermal_power, gpu.processes and gpu.xid's words -----------------------------------------


def one(check: Any, **gpu: Any) -> Result:
    (result,) = check(Snapshot(root="/", nvml=NvmlState(True, gpus=(Gpu(index=0, **gpu),))))
    return result


LINK = {"pcie_gen": 4, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16}


def test_a_lowered_generation_under_load_warns_with_the_link_and_the_bios_remedy() -> None:
    result = one(pcie, clock_event_reasons=0, utilization_percent=88, **LINK)
    assert (result.status, result.remedy) == (Status.WARN, "check BIOS PCIe speed and the riser")
    assert result.summary.endswith(
        "link below its generation under load (utilization 88 %): Gen4 x16 (max Gen5 x16)"
    )
    assert result.evidence == {
        "gen": 4,
        "gen_max": 5,
        "width": 16,
        "width_max": 16,
        "idle": False,
        "idle_by": "utilization 88 %",
    }


def test_the_reason_mask_alone_without_its_idle_bit_is_no_evidence_of_load() -> None:
    """Idle cards at P8 show "Idle: Not Active" with "SW Power Cap: Active" (test_gpu_idle_real.py)."""
    result = one(pcie, clock_event_reasons=0x4, **LINK)
    assert result.status is Status.PASS and "whether the GPU is busy is not reported" in result.summary


@pytest.mark.parametrize(
    ("utilization", "status", "note"),
    [
        (0, Status.PASS, " (idle by utilization 0 %: idle GPUs lower the generation to save power)"),
        (1, Status.WARN, None),
        (None, Status.PASS, " (the generation is lowered; whether the GPU is busy is not reported: rerun "
                            "`dltune audit --only gpu` while it trains to judge it)"),
    ],
)  # fmt: skip
def test_without_clock_reasons_utilization_says_whether_the_gpu_is_idle(
    utilization: int | None, status: Status, note: str | None
) -> None:
    result = one(pcie, utilization_percent=utilization, **LINK)
    assert result.status is status
    if note is not None:
        assert result.summary.endswith(f"Gen4 x16 (max Gen5 x16){note}")


def test_temperature_and_power_not_reported_is_a_skip_saying_so() -> None:
    result = one(thermal_power)
    assert (result.status, result.summary) == (Status.SKIP, "temperature and power not reported")


def test_two_thermal_and_power_problems_are_joined_and_a_missing_power_reads_zero() -> None:
    both = one(thermal_power, temperature_c=84, slowdown_c=85, power_w=720.0, power_limit_w=700.0)
    assert both.status is Status.WARN
    assert both.summary == "84 °C, slowdown at 85 °C; 720 W over its 700 W limit"
    cool = one(thermal_power, temperature_c=40, slowdown_c=85)
    assert cool.summary.endswith("40 °C, 0 W")


def test_processes_slurm_cannot_account_for_warn_naming_the_error_and_slurmctld() -> None:
    from dltune.checks.gpu import _whose
    from dltune.snapshot import SlurmJobs

    failed = _whose("python (pid 7)", SlurmJobs(installed=True, node="n1", error="scontrol timed out"))
    assert (failed.status, failed.summary) == (
        Status.WARN,
        "compute processes running (python (pid 7)); Slurm could not say whose: scontrol timed out",
    )
    assert failed.remedy == "check slurmctld (scontrol ping), then rerun the audit"
    jobs = _whose("python (pid 7)", SlurmJobs(installed=True, node="n1", job_ids=("41", "42")))
    assert jobs.summary == "compute processes running (python (pid 7)) while Slurm runs job(s) 41, 42 here"


def test_xid_advice_joins_each_buckets_words_once_and_has_a_fallback() -> None:
    from dltune.checks.gpu import _advice

    assert _advice(["IGNORE", "RESTART_APP", "IGNORE"]) == (
        "NVIDIA's catalog: no action needed; restart the application"
    )
    assert _advice([]) == "the GPU stays in service"


def test_no_gpu_found_fails_where_the_pci_bus_shows_a_gpu_and_only_warns_beside_an_adapter() -> None:
    from dltune.checks.gpu import xid
    from dltune.probes.packages import kernel_log_of
    from dltune.snapshot import Fabric, PciDevice

    log = kernel_log_of("NVRM: No NVIDIA GPU found.\n")

    def judged(*devices: PciDevice) -> Result:
        (result,) = xid(Snapshot(root="/", kernel_log=log, fabric=Fabric(pci=devices)))
        return result

    gpu = PciDevice("0000:3b:00.0", "gpu", "0x10de", "0x030200")
    adapter = PciDevice("0000:5e:00.0", "hca", "0x15b3", "0x020700")
    assert (judged(gpu).status, judged(gpu).critical) == (Status.FAIL, True)
    assert judged(adapter).status is Status.WARN and judged().status is Status.WARN


def test_no_gpu_found_fails_where_nvml_answers_for_a_gpu() -> None:
    from dltune.checks.gpu import xid
    from dltune.probes.packages import kernel_log_of

    snap = Snapshot(root="/", kernel_log=kernel_log_of("NVRM: No NVIDIA GPU found.\n"),
                    nvml=NvmlState(True, gpus=(Gpu(index=0),)))  # fmt: skip
    (result,) = xid(snap)
    assert (result.status, result.critical) == (Status.FAIL, True)
