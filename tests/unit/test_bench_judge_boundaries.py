"""The bench judgements at each of their thresholds: at the limit, one step either side, with the whole
Result asserted (status, summary, evidence, metrics, remedy). A card of round figures (a test spec,
given through the judges' `lookup`) makes each fraction exact in floating point, so a test at 80%
is at 80%, not a rounding away from it. The golden file (test_golden_bench_verdicts.py) holds typical
measurements; this file holds the edges."""

from __future__ import annotations

import math

import pytest

from dltune.bench.judge import (
    PEAK_TOLERANCE,
    UNRELIABLE_REMEDY,
    Bandwidth,
    Matmul,
    PowerReading,
    Training,
    bench_gate,
    judge_allreduce,
    judge_bandwidth,
    judge_compile,
    judge_data_parallel,
    judge_determinism,
    judge_determinism_refused,
    judge_input_gap,
    judge_matmul,
    judge_multi_node,
    judge_power,
    judge_sweep,
    judge_threads,
    judge_training,
    stderr_excerpt,
)
from dltune.bench.specs import Spec
from dltune.model import Result, Status

# A card whose healthy figures are round: a healthy one reaches half its 1000 TFLOPS dense peak (500),
# and measures 1000 of its 2000 GB/s datasheet bandwidth.
CARD = Spec(
    "Test Card",
    tflops={"bf16": 1000.0},
    memory_gb_s=2000.0,
    achievable=0.5,
    achievable_source="the test table",
    memory_healthy_gb_s=1000.0,
    memory_healthy_source="the test diag",
)
# A card with a datasheet only: no bf16 figure, no healthy memory figure.
OLD = Spec("Old Card", tflops={"fp16": 100.0}, memory_gb_s=1000.0)
SPECS = {"Test Card": CARD, "Old Card": OLD}
lookup = SPECS.get

CLOCKS = "check clocks and power (dltune audit --only gpu: throttle reasons), cooling, PCIe"
OUTLIER_REMEDY = "compare clocks, power and PCIe of this GPU with the others; reseat or RMA"
MEMORY_REMEDY = "check the GPU's memory clocks and ECC (audit gpu)"


def above(value: float) -> float:
    return math.nextafter(value, math.inf)


# --- matmul -------------------------------------------------------------------------------------------


def card_matmul(tflops: float, summary: str, status: Status, remedy: str | None, best: float = 1.0) -> Result:
    return Result(
        "bench.matmul",
        status,
        summary,
        subject="cuda:0:bf16",
        evidence={
            "name": "Test Card",
            "dtype": "bf16",
            "n": 8192,
            "tflops": round(tflops, 3),
            "spec": "Test Card",
            "peak_tflops": 1000.0,
            "achievable_tflops": 500.0,
            "judged_against": "50% of the dense peak: the test table",
        },
        remedy=remedy,
        metrics={
            "tflops": tflops,
            "fraction_of_spec": tflops / 1000.0,
            "fraction_of_achievable": tflops / 500.0,
            "fraction_of_best": best,
        },
    )


@pytest.mark.parametrize(
    ("tflops", "status", "percent", "remedy"),
    [
        (400.0, Status.PASS, "80%", None),  # 80% of achievable: not below it
        (399.5, Status.WARN, "80%", CLOCKS),
        (275.0, Status.WARN, "55%", CLOCKS),  # 55%: a finding, not yet a failure
        (274.5, Status.FAIL, "55%", CLOCKS),
    ],
)
def test_matmul_bands_at_80_and_55_percent_of_what_a_healthy_card_reaches(
    tflops: float, status: Status, percent: str, remedy: str | None
) -> None:
    (result,) = judge_matmul([Matmul("cuda:0", "Test Card", "bf16", 8192, tflops)], lookup)
    of_peak = f"{tflops / 1000:.0%}"
    summary = (
        f"bf16 matmul {tflops:.2f} TFLOPS, {percent} of what a healthy Test Card reaches "
        f"(500; {of_peak} of its 1000 dense peak) at n=8192"
    )
    assert result == card_matmul(tflops, summary, status, remedy)


def test_matmul_at_the_dense_peak_and_at_the_tolerance_above_it_is_a_measurement() -> None:
    """The datasheet is rounded: up to 2% above the peak is believed; beyond that it is not."""
    for tflops in (1000.0, 1000.0 * PEAK_TOLERANCE):
        (result,) = judge_matmul([Matmul("cuda:0", "Test Card", "bf16", 8192, tflops)], lookup)
        assert result.status is Status.PASS and "unreliable" not in result.summary
        assert result.remedy is None and result.metrics["fraction_of_best"] == 1.0
    too_fast = above(1000.0 * PEAK_TOLERANCE)
    (result,) = judge_matmul([Matmul("cuda:0", "Test Card", "bf16", 8192, too_fast)], lookup)
    expected = card_matmul(
        too_fast,
        "bf16 matmul: unreliable measurement: 1020.0 TFLOPS (102% of the dense peak) is above what the "
        "hardware can do",
        Status.WARN,
        UNRELIABLE_REMEDY,
    )
    assert result == Result(
        expected.id,
        expected.status,
        expected.summary,
        subject=expected.subject,
        evidence={**expected.evidence, "spread": None},
        metrics=expected.metrics,
        remedy=UNRELIABLE_REMEDY,
    )


@pytest.mark.parametrize(("spread", "reliable"), [(0.25, True), (above(0.25), False), (None, True)])
def test_matmul_repeats_may_disagree_by_25_percent(spread: float | None, reliable: bool) -> None:
    (result,) = judge_matmul([Matmul("cuda:0", "Test Card", "bf16", 8192, 450.0, spread)], lookup)
    if reliable:
        assert result.status is Status.PASS and result.remedy is None
        assert "spread" not in result.evidence
    else:
        assert result.status is Status.WARN and result.remedy == UNRELIABLE_REMEDY
        assert (
            result.summary == "bf16 matmul: unreliable measurement: repeats disagree by 25% (more than 25%)"
        )
        assert result.evidence["spread"] == spread


def test_a_gpu_whose_only_figure_is_unreliable_is_its_own_best() -> None:
    """No reliable figure of its name on the node: nothing to be an outlier against (1.0 of the best)."""
    (result,) = judge_matmul([Matmul("cuda:0", "Test Card", "bf16", 8192, 300.0, 0.3)], lookup)
    assert result.status is Status.WARN and result.metrics["fraction_of_best"] == 1.0
    (unknown,) = judge_matmul([Matmul("cuda:0", "Mystery", "bf16", 8192, 300.0, 0.3)], lookup)
    assert unknown.metrics == {"tflops": 300.0, "fraction_of_best": 1.0}
    assert unknown.summary == "bf16 matmul: unreliable measurement: repeats disagree by 30% (more than 25%)"


def test_a_fast_gpu_with_repeats_that_disagree_never_sets_the_nodes_best() -> None:
    """Below the peak but noisy: 480 against a steady 400 would make the steady GPU an outlier (83%)."""
    results = judge_matmul(
        [
            Matmul("cuda:0", "Test Card", "bf16", 8192, 400.0, 0.01),
            Matmul("cuda:1", "Test Card", "bf16", 8192, 480.0, 0.3),
        ],
        lookup,
    )
    assert [r.status for r in results] == [Status.PASS, Status.WARN]
    assert results[0].metrics["fraction_of_best"] == 1.0 and "outlier" not in results[0].summary


def mystery(tflops: float, device: str) -> Matmul:
    return Matmul(device, "Mystery", "fp16", 4096, tflops)


@pytest.mark.parametrize(
    ("tflops", "outlier"), [(850.0, False), (849.5, True), (1000.0, False)]
)  # fmt: skip
def test_a_gpu_below_85_percent_of_the_nodes_best_is_an_outlier(tflops: float, outlier: bool) -> None:
    best, result = judge_matmul([mystery(1000.0, "cuda:0"), mystery(tflops, "cuda:1")], lookup)
    assert best.status is Status.PASS and best.metrics["fraction_of_best"] == 1.0
    summary = (
        f"fp16 matmul {tflops:.2f} TFLOPS (no published peak for this device: compared with the node's "
        "others only)"
    )
    if outlier:
        summary += "; 85% of the node's best GPU (an outlier)"
    assert result == Result(
        "bench.matmul",
        Status.WARN if outlier else Status.PASS,
        summary,
        subject="cuda:1:fp16",
        evidence={"name": "Mystery", "dtype": "fp16", "n": 4096, "tflops": tflops},
        remedy=OUTLIER_REMEDY if outlier else None,
        metrics={"tflops": tflops, "fraction_of_best": tflops / 1000.0},
    )


def test_a_failing_outlier_stays_a_failure_with_the_spec_s_remedy() -> None:
    _, slow = judge_matmul(
        [
            Matmul("cuda:0", "Test Card", "bf16", 8192, 500.0),
            Matmul("cuda:1", "Test Card", "bf16", 8192, 200.0),
        ],
        lookup,
    )
    assert slow.status is Status.FAIL and slow.remedy == CLOCKS
    assert slow.summary.endswith("; 40% of the node's best GPU (an outlier)")


def test_matmul_evidence_keeps_three_decimals() -> None:
    (result,) = judge_matmul([mystery(123.45678, "cuda:0")], lookup)
    assert result.evidence["tflops"] == 123.457 and result.summary.startswith("fp16 matmul 123.46 TFLOPS")


def test_a_known_card_without_a_figure_for_the_dtype_is_compared_with_the_node_only() -> None:
    """A card of the spec table whose datasheet has no bf16 figure (V100): no peak to judge against."""
    (result,) = judge_matmul([Matmul("cuda:0", "Old Card", "bf16", 8192, 50.0)], lookup)
    assert result == Result(
        "bench.matmul",
        Status.PASS,
        "bf16 matmul 50.00 TFLOPS (no published peak for this device: compared with the node's others only)",
        subject="cuda:0:bf16",
        evidence={"name": "Old Card", "dtype": "bf16", "n": 8192, "tflops": 50.0},
        metrics={"tflops": 50.0, "fraction_of_best": 1.0},
    )


# --- memory bandwidth ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gb_s", "status", "healthy"),
    [
        (850.0, Status.PASS, "85%"),  # 85% of the healthy figure: not below it
        (849.5, Status.WARN, "85%"),
        (750.0, Status.WARN, "75%"),  # DCGM's own line: still a pass of its diag
        (749.5, Status.FAIL, "75%"),
    ],
)
def test_memory_bands_at_85_and_75_percent_of_what_a_healthy_card_measures(
    gb_s: float, status: Status, healthy: str
) -> None:
    (result,) = judge_bandwidth([Bandwidth("cuda:0", "Test Card", "device copy", gb_s)], lookup)
    assert result == Result(
        "bench.memory",
        status,
        f"device copy {gb_s:.1f} GB/s, {gb_s / 2000:.0%} of 2000 GB/s ({healthy} of what a healthy Test Card "
        "measures)",
        subject="cuda:0:device copy",
        evidence={
            "name": "Test Card",
            "kind": "device copy",
            "judged_against": "1000 GB/s measured on a healthy Test Card: the test diag",
        },
        metrics={"gb_s": gb_s, "fraction_of_spec": gb_s / 2000, "fraction_of_healthy": gb_s / 1000},
        remedy=None if status is Status.PASS else MEMORY_REMEDY,
    )


@pytest.mark.parametrize(
    ("gb_s", "status", "percent"),
    [
        (900.0, Status.PASS, "90%"),
        (700.0, Status.PASS, "70%"),  # 70% of the datasheet: not below it
        (699.5, Status.WARN, "70%"),
        (500.0, Status.WARN, "50%"),
        (499.5, Status.FAIL, "50%"),
        (100.0, Status.FAIL, "10%"),
    ],
)
def test_memory_without_a_healthy_figure_is_judged_at_70_and_50_percent_of_the_datasheet(
    gb_s: float, status: Status, percent: str
) -> None:
    (result,) = judge_bandwidth([Bandwidth("cuda:0", "Old Card", "device copy", gb_s)], lookup)
    assert result == Result(
        "bench.memory",
        status,
        f"device copy {gb_s:.1f} GB/s, {percent} of 1000 GB/s",
        subject="cuda:0:device copy",
        evidence={"name": "Old Card", "kind": "device copy"},
        metrics={"gb_s": gb_s, "fraction_of_spec": gb_s / 1000},
        remedy=None if status is Status.PASS else MEMORY_REMEDY,
    )


def test_memory_above_the_published_bandwidth_beyond_the_tolerance_is_unreliable() -> None:
    at_limit = 2000.0 * PEAK_TOLERANCE
    (believed,) = judge_bandwidth([Bandwidth("cuda:0", "Test Card", "device copy", at_limit)], lookup)
    assert believed.status is Status.PASS
    (broken,) = judge_bandwidth([Bandwidth("cuda:0", "Test Card", "device copy", above(at_limit))], lookup)
    assert broken == Result(
        "bench.memory",
        Status.WARN,
        "device copy: unreliable measurement: 2040 GB/s (102% of the card's published 2000 GB/s) is above "
        "what the hardware can do",
        subject="cuda:0:device copy",
        evidence={"name": "Test Card", "kind": "device copy", "spread": None},
        metrics={"gb_s": above(at_limit)},
        remedy=UNRELIABLE_REMEDY,
    )


@pytest.mark.parametrize("kind", ["h2d pinned", "d2h pageable"])
def test_a_host_transfer_whose_repeats_disagree_is_an_unreliable_host_transfer(kind: str) -> None:
    (result,) = judge_bandwidth([Bandwidth("cuda:1", "Test Card", kind, 20.0, 0.3)], lookup)
    assert result == Result(
        "bench.host_transfer",
        Status.WARN,
        f"{kind}: unreliable measurement: repeats disagree by 30% (more than 25%)",
        subject=f"cuda:1:{kind}",
        evidence={"name": "Test Card", "kind": kind, "spread": 0.3},
        metrics={"gb_s": 20.0},
        remedy=UNRELIABLE_REMEDY,
    )
    (steady,) = judge_bandwidth([Bandwidth("cuda:1", "Test Card", kind, 20.0, 0.25)], lookup)
    assert steady == Result(
        "bench.host_transfer",
        Status.PASS,
        f"{kind} 20.0 GB/s",
        subject=f"cuda:1:{kind}",
        evidence={"name": "Test Card", "kind": kind},
        metrics={"gb_s": 20.0},
    )


# --- training, power ----------------------------------------------------------------------------------


def training(**changes: object) -> Training:
    run: dict[str, object] = {
        "device": "cuda:0",
        "model": "resnet50",
        "data": "real",
        "batch": 64,
        "steps": 20,
        "images_per_s": 1000.0,
        "data_ms": 10.0,
        "forward_ms": 45.0,
        "backward_ms": 45.0,
    }
    run.update(changes)
    return Training(**run)  # type: ignore[arg-type]


def test_training_metrics_name_memory_power_and_energy_when_measured() -> None:
    result = judge_training(
        training(max_memory_mb=2000.0, peak_power_w=300.0, joules_per_image=0.25, settings={"amp": True})
    )
    assert result == Result(
        "bench.train_real",
        Status.PASS,
        "resnet50 batch 64, real data: 1000.0 images/s (per step: data 10.0 ms, forward 45.0 ms, "
        "backward+optimizer 45.0 ms of 100.0 ms)",
        subject="cuda:0",
        evidence={"model": "resnet50", "batch": 64, "steps": 20, "amp": True},
        metrics={
            "images_per_s": 1000.0,
            "data_ms": 10.0,
            "forward_ms": 45.0,
            "backward_ms": 45.0,
            "max_memory_mb": 2000.0,
            "peak_power_w": 300.0,
            "joules_per_image": 0.25,
        },
    )


def test_power_with_peak_and_energy() -> None:
    reading = PowerReading(peak_w=650.0, peak_source="instantaneous", joules=4100.0, window_s=8.12345)
    assert judge_power(training(power=reading, joules_per_image=0.5)) == Result(
        "bench.power",
        Status.PASS,
        "peak 650 W (instantaneous); 0.500 J per image (4100 J over 8.1 s, NVML's total-energy counter) "
        "while training",
        subject="cuda:0",
        evidence={"peak_source": "instantaneous", "window_s": 8.12, "energy_skipped": None},
        metrics={"peak_power_w": 650.0, "joules_per_image": 0.5},
    )


def test_power_energy_without_a_window_says_zero_seconds() -> None:
    reading = PowerReading(joules=10.0)
    assert judge_power(training(power=reading, joules_per_image=0.125)) == Result(
        "bench.power",
        Status.PASS,
        "0.125 J per image (10 J over 0.0 s, NVML's total-energy counter) while training",
        subject="cuda:0",
        evidence={"peak_source": None, "window_s": None, "energy_skipped": None},
        metrics={"joules_per_image": 0.125},
    )


def test_power_peak_with_the_energy_skipped_says_why() -> None:
    reading = PowerReading(
        peak_w=300.0, peak_source="1 s average", window_s=2.0, skipped="NVML: Not Supported"
    )
    assert judge_power(training(power=reading)) == Result(
        "bench.power",
        Status.PASS,
        "peak 300 W (1 s average); energy not measured: NVML: Not Supported while training",
        subject="cuda:0",
        evidence={"peak_source": "1 s average", "window_s": 2.0, "energy_skipped": "NVML: Not Supported"},
        metrics={"peak_power_w": 300.0},
    )


def test_power_with_nothing_measured_and_no_reason_is_skipped_as_nvml_s_silence() -> None:
    assert judge_power(training(power=PowerReading())) == Result(
        "bench.power",
        Status.SKIP,
        "power not measured: NVML reported no power",
        subject="cuda:0",
        evidence={"peak_source": None, "window_s": None, "energy_skipped": None},
    )
    # Energy counted but no figure per image: not a part of its own.
    only_joules = judge_power(training(power=PowerReading(joules=5.0, window_s=1.0)))
    assert only_joules.status is Status.SKIP and only_joules.metrics == {}


# --- input gap, sweep, threads ------------------------------------------------------------------------

INPUT_REMEDY = (
    "input-bound: raise num_workers (now {}) toward the cores per GPU, stage the data to local disk "
    "(dltune stage), or try --dataloader-sweep"
)


@pytest.mark.parametrize(
    ("data_ms", "bound", "waiting"),
    [(10.0, False, 10.0), (10.01, True, 10.01 / (10.01 + 45.0 + 45.0) * 100), (9.0, False, 9.0 / 99.0 * 100)],
)
def test_a_step_waiting_more_than_10_percent_for_data_is_input_bound(
    data_ms: float, bound: bool, waiting: float
) -> None:
    result = judge_input_gap(training(data="synthetic", images_per_s=1250.0), training(data_ms=data_ms), 4)
    assert result == Result(
        "bench.input_gap",
        Status.WARN if bound else Status.PASS,
        f"real data 1000.0 vs synthetic 1250.0 images/s: gap 20%; the step waits {waiting:.0f}% of its time "
        "for data" + (": input-bound" if bound else ""),
        subject="cuda:0",
        evidence={"num_workers": 4, "data_wait_percent": round(waiting, 1), "gap_percent": 20.0},
        remedy=INPUT_REMEDY.format(4) if bound else None,
        metrics={"gap_percent": 20.0, "data_wait_percent": waiting},
    )


def test_real_data_faster_than_synthetic_is_no_gap() -> None:
    result = judge_input_gap(training(data="synthetic", images_per_s=900.0), training(data_ms=1.0), 2)
    assert result.summary.startswith("real data 1000.0 vs synthetic 900.0 images/s: gap 0%;")
    assert result.evidence["gap_percent"] == 0.0 and result.metrics["gap_percent"] == 0.0


def test_a_step_shorter_than_a_millisecond_is_still_judged_by_its_own_share() -> None:
    """0.1 ms of a 0.5 ms step waits for data: 20%, input-bound, however short the step."""
    result = judge_input_gap(
        training(data="synthetic"), training(data_ms=0.1, forward_ms=0.2, backward_ms=0.2), 1
    )
    assert result.status is Status.WARN and result.metrics["data_wait_percent"] == pytest.approx(20.0)


def test_num_workers_comes_from_the_run_s_settings_when_not_given() -> None:
    real = training(data_ms=50.0, settings={"num_workers": 6})
    result = judge_input_gap(training(data="synthetic"), real)
    assert result.evidence["num_workers"] == 6 and result.remedy == INPUT_REMEDY.format(6)
    assert judge_input_gap(training(data="synthetic"), real, 0).evidence["num_workers"] == 0
    assert judge_input_gap(training(data="synthetic"), training(data_ms=50.0)).evidence["num_workers"] is None


def test_a_sweep_without_the_default_s_rate_reports_no_gain() -> None:
    for rates in ({"amp": 100.0}, {"amp": 100.0, "default": 0.0}):
        result = judge_sweep(rates, "default")
        assert result.summary == (
            "best DataLoader setting amp: 100.0 images/s, +0% over PyTorch's defaults (default)"
        )
        assert result.metrics == {"best_images_per_s": 100.0, "gain_percent": 0.0} and result.remedy is None


def test_sweep_evidence_keeps_two_decimals() -> None:
    result = judge_sweep({"a": 123.4567, "b": 100.0}, "b")
    assert result.evidence == {"rates": {"a": 123.46, "b": 100.0}, "best": "a", "default": "b"}


@pytest.mark.parametrize(("best", "advised"), [(110.0, True), (109.99, False), (125.0, True)])
def test_a_sweep_advises_a_setting_more_than_10_percent_faster(best: float, advised: bool) -> None:
    """110/100 is a gain of 10.000000000000009% in floating point: just above the line (a gain of
    exactly 10.0 cannot be computed from two rates)."""
    result = judge_sweep({"fast": best, "default": 100.0}, "default")
    assert result.remedy == ("use fast in your DataLoader" if advised else None)


def test_oversubscribed_threads_are_advised_one_thread_per_process_at_least() -> None:
    result = judge_threads(4, 2, 4)
    assert result.remedy == "set OMP_NUM_THREADS=1 (cores / processes per node)"
    assert judge_threads(2, 2, 4).remedy == "set OMP_NUM_THREADS=1 (cores / processes per node)"
    assert judge_threads(16, 8, 4).remedy == "set OMP_NUM_THREADS=4 (cores / processes per node)"


# --- determinism, compile -----------------------------------------------------------------------------

REPRODUCIBLE = "two seeded runs gave bitwise-identical losses; a perturbed run differed"
DL_ENV = "apply role dl_env so every job starts with CUBLAS_WORKSPACE_CONFIG"


@pytest.mark.parametrize(
    ("device", "variable", "status", "suffix", "remedy"),
    [
        ("cuda:0", None, Status.WARN, "; CUBLAS_WORKSPACE_CONFIG was not set at start", DL_ENV),
        ("cuda:0", "", Status.WARN, "; CUBLAS_WORKSPACE_CONFIG was not set at start", DL_ENV),
        ("cuda:0", ":4096:8", Status.PASS, " (CUBLAS_WORKSPACE_CONFIG=:4096:8 at start)", None),
        ("cpu", None, Status.PASS, "", None),
        ("cpu", ":16:8", Status.PASS, " (CUBLAS_WORKSPACE_CONFIG=:16:8 at start)", None),
    ],
)
def test_reproducible_runs_warn_only_on_a_gpu_without_the_variable(
    device: str, variable: str | None, status: Status, suffix: str, remedy: str | None
) -> None:
    assert judge_determinism(True, True, variable, device) == Result(
        "bench.determinism",
        status,
        REPRODUCIBLE + suffix,
        subject=device,
        evidence={"identical": True, "control_differs": True, "CUBLAS_WORKSPACE_CONFIG_at_start": variable},
        remedy=remedy,
    )


def test_long_refusals_are_cut_at_300_characters_of_summary_and_1000_of_evidence() -> None:
    message = "op_without_kernel " * 100  # 1800 characters, no cuBLAS variable named
    result = judge_determinism_refused(message, None, "cuda:0")
    assert result.status is Status.ERROR and len(result.summary) == 300
    assert (
        result.summary
        == ("the determinism model hit an operation without a deterministic implementation: " + message)[:300]
    )
    assert result.evidence == {"CUBLAS_WORKSPACE_CONFIG_at_start": None, "error": message[:1000]}


def test_compile_failures_are_cut_at_300_characters_and_not_asked_is_a_skip() -> None:
    error = "E" * 400
    assert judge_compile(100.0, None, error) == Result(
        "bench.compile", Status.WARN, ("torch.compile failed: " + error)[:300]
    )
    assert judge_compile(100.0, None, None) == Result(
        "bench.compile",
        Status.SKIP,
        "not measured: compiling takes minutes (run with --compile, without --quick)",
    )


# --- all-reduce, data-parallel scaling ----------------------------------------------------------------

TOPOLOGY = "check NVLink/PCIe topology (nvidia-smi topo -m) and NCCL settings"
NETWORK = (
    "check the network between the nodes (InfiniBand/RoCE, GPUDirect RDMA) and NCCL "
    "settings (NCCL_DEBUG=INFO)"
)


def scaling_of(results: list[Result]) -> Result:
    (scaling,) = [r for r in results if r.id.endswith("scaling")]
    return scaling


@pytest.mark.parametrize(
    ("efficiency", "status", "remedy"),
    [(0.8, Status.PASS, None), (0.79, Status.WARN, TOPOLOGY), (1.0, Status.PASS, None)],
)
def test_nccl_scaling_below_80_percent_warns(efficiency: float, status: Status, remedy: str | None) -> None:
    assert scaling_of(judge_allreduce(8, "nccl", 1 << 30, 0.01, efficiency)) == Result(
        "bench.scaling",
        status,
        f"data-parallel scaling 1 -> 8: {efficiency:.0%} efficiency",
        subject="nccl",
        metrics={"efficiency": efficiency},
        remedy=remedy,
    )


def test_poor_scaling_over_several_nodes_points_at_the_network() -> None:
    hosts = ["node2", "node1", "node2", "node1"]
    assert scaling_of(judge_allreduce(4, "nccl", 1 << 30, 0.01, 0.5, hosts=hosts)) == Result(
        "bench.multinode_scaling",
        Status.WARN,
        "data-parallel scaling 1 -> 4 on 2 nodes (node1, node2): 50% efficiency",
        subject="nccl",
        metrics={"efficiency": 0.5},
        remedy=NETWORK,
    )


@pytest.mark.parametrize(
    ("hosts", "note"),
    [
        (None, " (CPU processes share the same cores: not a GPU figure)"),
        (["a", "b"], " (gloo on CPU: proves the nodes train together, not a GPU figure)"),
    ],
)
def test_gloo_scaling_is_never_a_finding_and_says_it_is_no_gpu_figure(
    hosts: list[str] | None, note: str
) -> None:
    scaling = scaling_of(judge_allreduce(2, "gloo", 1 << 20, 0.01, 0.5, hosts=hosts))
    where = " on 2 nodes (a, b)" if hosts else ""
    assert scaling == Result(
        f"bench.{'multinode_' if hosts else ''}scaling",
        Status.PASS,
        f"data-parallel scaling 1 -> 2{where}: 50% efficiency{note}",
        subject="gloo",
        metrics={"efficiency": 0.5},
    )


def test_scaling_up_to_105_percent_is_timer_noise_above_it_unreliable() -> None:
    at_limit = scaling_of(judge_allreduce(2, "nccl", 1 << 20, 0.01, 1.05))
    assert (
        at_limit.status is Status.PASS and at_limit.summary == "data-parallel scaling 1 -> 2: 105% efficiency"
    )
    beyond = scaling_of(judge_allreduce(2, "nccl", 1 << 20, 0.01, above(1.05)))
    assert beyond.status is Status.WARN and beyond.remedy == UNRELIABLE_REMEDY
    assert "unreliable measurement: 105% efficiency is more than 100%" in beyond.summary


def test_allreduce_size_is_shown_in_megabytes_rounded() -> None:
    (result,) = judge_allreduce(2, "nccl", 1_500_000, 0.001, None)
    assert result.summary == "nccl all-reduce over 2 processes, 2 MB: algbw 1.50 GB/s, busbw 1.50 GB/s"


def ddp_numbers(**changes: object) -> dict[str, object]:
    numbers: dict[str, object] = {"bytes": 1 << 20, "seconds": 0.01, "images_per_s_total": 160.0}
    numbers.update(changes)
    return numbers


def test_gpu_scaling_uses_the_run_s_own_baseline_before_the_single_process_one() -> None:
    """160 images/s over 2 GPUs that each trained 100 alone: 80%; against the single-GPU run's 200, 40%."""
    results = judge_data_parallel(["cuda:0", "cuda:1"], ddp_numbers(baseline_images_per_s=100.0), None, 200.0)
    assert scaling_of(results).metrics == {"efficiency": 0.8} and scaling_of(results).status is Status.PASS
    without = judge_data_parallel(["cuda:0", "cuda:1"], ddp_numbers(), None, 200.0)
    assert scaling_of(without).metrics == {"efficiency": 0.4}


@pytest.mark.parametrize("devices", [["cpu"], ["cuda:0", "cuda:1"]])
def test_no_baseline_means_no_scaling_figure(devices: list[str]) -> None:
    results = judge_data_parallel(devices, ddp_numbers(baseline_images_per_s=0.0), None, 0.0)
    assert [r.id for r in results] == ["bench.allreduce"]


def test_multi_node_keeps_the_failed_node_s_remedy_and_needs_a_baseline_to_scale() -> None:
    failed = Result("bench.allreduce", Status.ERROR, "torchrun failed", evidence={"x": 1}, remedy="look here")
    assert judge_multi_node(["n1", "n2"], 1, "nccl", None, failed) == [
        Result(
            "bench.multinode_allreduce",
            Status.ERROR,
            "the data-parallel run over n1, n2 failed on n2",
            evidence={"x": 1},
            remedy="look here",
        )
    ]
    numbers = ddp_numbers(world=4, baseline_images_per_s=0.0, hosts=["n1", "n1", "n2", "n2"])
    assert [r.id for r in judge_multi_node(["n1", "n2"], 0, "nccl", numbers, None)] == [
        "bench.multinode_allreduce"
    ]


# --- torchrun's stderr, the gate ----------------------------------------------------------------------


def lines_of(count: int) -> str:
    return ("x" * 99 + "\n") * count


def test_stderr_up_to_3500_characters_is_kept_whole() -> None:
    whole = "x" * 3499 + "\n"
    assert stderr_excerpt(whole) == whole
    longer = whole + "y"
    assert stderr_excerpt(longer) == longer[-1500:]


def test_stderr_keeps_2000_characters_from_the_first_error_then_the_end() -> None:
    stderr = lines_of(1) + "RuntimeError: boom\n" + lines_of(50)
    assert stderr_excerpt(stderr) == stderr[100:2100] + "\n[...]\n" + stderr[-1500:]


@pytest.mark.parametrize(("error_at", "excerpted"), [(2500, False), (2499, True)])
def test_an_error_within_the_end_is_kept_once_as_part_of_it(error_at: int, excerpted: bool) -> None:
    stderr = "x" * (error_at - 1) + "\n" + "ValueError: bad\n"
    stderr += "z" * (4000 - len(stderr))
    tail = stderr[-1500:]
    expected = stderr[error_at : error_at + 2000] + "\n[...]\n" + tail if excerpted else tail
    assert stderr_excerpt(stderr) == expected


def test_the_gate_names_every_critical_failure() -> None:
    audit = [
        Result("gpu.xid", Status.FAIL, "xid 79", critical=True),
        Result("gpu.ecc", Status.FAIL, "uncorrected", critical=True),
        Result("gpu.ecc", Status.FAIL, "again", critical=True),
        Result("storage.noatime", Status.FAIL, "not critical"),
    ]
    assert bench_gate(audit, {}, True, False) == Result(
        "bench.run",
        Status.SKIP,
        "bench not run: critical check(s) failed: gpu.ecc, gpu.xid",
        evidence={"cause": "critical_failure", "critical_failures": ["gpu.ecc", "gpu.xid"]},
        remedy="fix the critical findings above, then rerun `dltune check`",
    )
