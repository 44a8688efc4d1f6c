"""Each host and GPU health judgement at its boundary (snapshots given as data: no GPU, no EDAC driver,
no NVMe controller here; NVML's and the tools' answers are the lowest boundary faked)."""

from __future__ import annotations

from dltune.checks.gpu import CORRECTABLE_RISE_WARN, ecc, sxid
from dltune.checks.storage import ENDURANCE_WARN, judge_nvme, nvme_health
from dltune.checks.system import memory_errors
from dltune.model import Status
from dltune.probes.memory_errors import parse_memory_log
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import Gpu, MemoryController, MemoryErrors, NvmeHealth, NvmlState, Snapshot


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
