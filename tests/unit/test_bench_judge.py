"""The bench judgements on numbers (no PyTorch needed): spec fractions, outliers, input-bound,
determinism with its control, bus bandwidth, oversubscription."""

from __future__ import annotations

import pytest

from dltune.bench.judge import (
    Bandwidth,
    Matmul,
    Training,
    judge_allreduce,
    judge_bandwidth,
    judge_determinism,
    judge_input_gap,
    judge_matmul,
    judge_sweep,
    judge_threads,
    judge_torchrun_failed,
)
from dltune.bench.specs import spec_for
from dltune.model import Status


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA L40S", "L40S"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("Tesla V100-SXM3-32GB", "V100 SXM2"),
    ],
)
def test_device_names_map_to_their_dense_spec(name: str, model: str) -> None:
    spec = spec_for(name)
    assert spec is not None and spec.model == model


def test_v100_has_no_bf16_figure_and_unknown_cards_none() -> None:
    v100 = spec_for("Tesla V100-SXM2-16GB")
    assert v100 is not None and "bf16" not in v100.tflops and v100.tflops["fp16"] == 125.0
    assert spec_for("NVIDIA GeForce RTX 4090") is None


def h100(tflops: float, device: str = "cuda:0") -> Matmul:
    return Matmul(device, "NVIDIA H100 80GB HBM3", "bf16", 8192, tflops)


def test_matmul_is_judged_against_what_a_healthy_card_reaches_not_the_datasheet() -> None:
    """A healthy H100 SXM reaches about 80% of its 989.5 dense bf16 TFLOPS (794.5, ml-engineering's MAMF
    table); 700 at n=8192 is a healthy card (71% of the datasheet: a warning under a datasheet-only
    rule)."""
    healthy = judge_matmul([h100(700)])[0]
    assert healthy.status is Status.PASS
    assert healthy.metrics["fraction_of_achievable"] == pytest.approx(700 / (989.5 * 0.803))
    assert "MAMF" in str(healthy.evidence["judged_against"]) and healthy.evidence["n"] == 8192
    assert judge_matmul([h100(600)])[0].status is Status.WARN  # 76% of achievable
    failed = judge_matmul([h100(400)])[0]  # 50% of achievable
    assert failed.status is Status.FAIL and failed.metrics["fraction_of_spec"] == pytest.approx(400 / 989.5)
    # An A100 reaches 87% of its 312: 250 TFLOPS is healthy (80% of the datasheet, 92% of achievable).
    a100 = judge_matmul([Matmul("cuda:0", "NVIDIA A100-SXM4-80GB", "bf16", 8192, 250)])[0]
    assert a100.status is Status.PASS and a100.metrics["fraction_of_achievable"] == pytest.approx(
        250 / (312 * 0.869)
    )


def test_mig_slices_are_compared_with_slices_of_their_own_profile_only() -> None:
    """On a node with whole GPUs and MIG slices, a 1g.10gb slice has a seventh of the engines: it is not
    judged against the H100 peak, nor is it an outlier next to a whole GPU; a slow slice among slices is."""
    whole = "NVIDIA H100 80GB HBM3"
    slice_name = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    samples = [
        Matmul("cuda:0", whole, "bf16", 8192, 750.0),
        Matmul("cuda:1", slice_name, "bf16", 8192, 100.0),
        Matmul("cuda:2", slice_name, "bf16", 8192, 98.0),
        Matmul("cuda:3", slice_name, "bf16", 8192, 60.0),
    ]
    results = {r.subject: r for r in judge_matmul(samples)}
    assert results["cuda:0:bf16"].status is Status.PASS
    assert results["cuda:1:bf16"].status is Status.PASS and "MIG slice" in results["cuda:1:bf16"].summary
    assert "peak_tflops" not in results["cuda:1:bf16"].evidence
    assert results["cuda:2:bf16"].status is Status.PASS
    assert results["cuda:3:bf16"].status is Status.WARN and "outlier" in results["cuda:3:bf16"].summary


def test_a_gpu_slower_than_the_nodes_best_is_an_outlier_even_without_a_spec() -> None:
    unknown = [Matmul(f"cuda:{i}", "Mystery GPU", "fp16", 4096, t) for i, t in enumerate((100.0, 99.0, 70.0))]
    results = {r.subject: r for r in judge_matmul(unknown)}
    assert results["cuda:0:fp16"].status is Status.PASS
    assert results["cuda:2:fp16"].status is Status.WARN and "outlier" in results["cuda:2:fp16"].summary


def run(data: str, images_per_s: float, data_ms: float, compute_ms: float) -> Training:
    return Training("cpu", "resnet18", data, 8, 5, images_per_s, data_ms, compute_ms / 2, compute_ms / 2)


def test_input_bound_follows_the_time_the_step_waits_for_data() -> None:
    bound = judge_input_gap(run("synthetic", 100, 0, 80), run("real", 50, 80, 80), num_workers=0)
    assert bound.status is Status.WARN and "input-bound" in bound.summary
    assert bound.metrics["gap_percent"] == pytest.approx(50) and "num_workers (now 0)" in (bound.remedy or "")
    noisy = judge_input_gap(run("synthetic", 100, 0, 80), run("real", 80, 1, 99))
    assert noisy.status is Status.PASS  # slower, but not waiting for data


def test_determinism_needs_a_control_that_differs() -> None:
    assert judge_determinism(True, True, ":4096:8", "cuda:0").status is Status.PASS
    assert judge_determinism(False, True, None, "cpu").status is Status.FAIL
    assert judge_determinism(True, False, None, "cpu").status is Status.ERROR
    assert judge_determinism(True, True, None, "cuda:0").status is Status.WARN


def test_busbw_uses_the_nccl_tests_convention() -> None:
    result = judge_allreduce(8, "nccl", 1_000_000_000, 0.01, 0.9)[0]
    assert result.metrics["algbw_gb_s"] == pytest.approx(100)
    assert result.metrics["busbw_gb_s"] == pytest.approx(175)


def test_sweep_reports_the_best_setting_and_its_gain_over_the_defaults() -> None:
    result = judge_sweep(
        {"num_workers=0,pin_memory=False": 100.0, "num_workers=4,pin_memory=True": 250.0},
        "num_workers=0,pin_memory=False",
    )
    assert result.evidence["best"] == "num_workers=4,pin_memory=True"
    assert result.metrics["gain_percent"] == pytest.approx(150)


def test_oversubscribed_threads_warn() -> None:
    assert judge_threads(16, 8, 4).status is Status.WARN
    assert judge_threads(16, 4, 4).status is Status.PASS


def test_figures_the_hardware_cannot_reach_are_unreliable_warnings_never_passes() -> None:
    """make demo: three nodes benchmarking at once on two cores reported 481% scaling efficiency as a
    pass. Above 100% efficiency, above the card's published peak, or repeats that disagree by more
    than 25%: a warning that names the measurement unreliable and the likely reason."""
    (scaling,) = [r for r in judge_allreduce(2, "gloo", 1 << 24, 0.01, 4.81) if r.id == "bench.scaling"]
    assert scaling.status is Status.WARN and "unreliable measurement" in scaling.summary
    assert "other load on the node" in scaling.summary and "not a GPU figure" in scaling.summary
    (nccl,) = [r for r in judge_allreduce(8, "nccl", 1 << 30, 0.01, 1.2) if r.id == "bench.scaling"]
    assert nccl.status is Status.WARN
    (honest,) = [r for r in judge_allreduce(8, "nccl", 1 << 30, 0.01, 0.93) if r.id == "bench.scaling"]
    assert honest.status is Status.PASS

    h100 = "NVIDIA H100 80GB HBM3"
    peak = spec_for(h100).tflops["bf16"]  # type: ignore[union-attr]
    (too_fast,) = judge_matmul([Matmul("cuda:0", h100, "bf16", 8192, peak * 1.3)])
    assert too_fast.status is Status.WARN and "above what the hardware can do" in too_fast.summary
    (noisy,) = judge_matmul([Matmul("cuda:0", h100, "bf16", 8192, peak * 0.8, spread=0.4)])
    assert noisy.status is Status.WARN and "repeats disagree by 40%" in noisy.summary
    (steady,) = judge_matmul([Matmul("cuda:0", h100, "bf16", 8192, peak * 0.8, spread=0.03)])
    assert steady.status is Status.PASS

    memory_peak = spec_for(h100).memory_gb_s  # type: ignore[union-attr]
    (copy,) = judge_bandwidth([Bandwidth("cuda:0", h100, "device copy", memory_peak * 1.5)])
    assert copy.status is Status.WARN and "of the card's published" in copy.summary
    assert copy.summary.count("above") == 1  # it said "above ... is above what the hardware can do"
    (real,) = judge_bandwidth([Bandwidth("cuda:0", h100, "device copy", memory_peak * 0.85)])
    assert real.status is Status.PASS


def test_memory_bandwidth_is_judged_against_what_healthy_cards_of_the_model_measure() -> None:
    """A healthy H200 measures 4168-4244 GB/s with dltune's copy (87% of its 4.8 TB/s datasheet;
    tests/fixtures/real/bench/). Against that level it passes, and a card at 70% of it (below DCGM's
    own 75% line) fails. A model that only DCGM's kernel has measured (A100 80GB SXM, 1564 GB/s) is
    judged against that figure and says whose figure it is."""
    h200 = "NVIDIA H200"
    (healthy,) = judge_bandwidth([Bandwidth("cuda:0", h200, "device copy", 4200.0)])
    assert healthy.status is Status.PASS and healthy.metrics["fraction_of_healthy"] == pytest.approx(1.0)
    assert "tests/fixtures/real/bench" in str(healthy.evidence["judged_against"])
    assert "of what a healthy H200 SXM measures" in healthy.summary
    (low,) = judge_bandwidth([Bandwidth("cuda:0", h200, "device copy", 4200.0 * 0.80)])
    assert low.status is Status.WARN
    (broken,) = judge_bandwidth([Bandwidth("cuda:0", h200, "device copy", 4200.0 * 0.70)])
    assert broken.status is Status.FAIL
    (a100,) = judge_bandwidth([Bandwidth("cuda:0", "NVIDIA A100-SXM4-80GB", "device copy", 1564.0 * 0.8)])
    assert a100.status is Status.WARN and "diag-skus" in str(a100.evidence["judged_against"])
    assert "80% of DCGM's figure for a healthy A100 80GB SXM" in a100.summary
    # No healthy figure published (V100): the datasheet fractions still apply.
    (v100,) = judge_bandwidth([Bandwidth("cuda:0", "Tesla V100-SXM2-16GB", "device copy", 900 * 0.6)])
    assert v100.status is Status.WARN and "fraction_of_healthy" not in v100.metrics


@pytest.mark.parametrize(
    ("name", "model", "bf16", "achievable"),
    [
        ("NVIDIA B200", "B200", 2250.0, 0.776),
        ("NVIDIA B300 SXM6 AC", "B300", 2250.0, 0.786),
        ("NVIDIA GB200", "GB200", 2500.0, 0.729),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5, 0.803),
        ("NVIDIA H200", "H200 SXM", 989.5, 0.803),
    ],
)
def test_blackwell_and_hopper_figures_follow_the_mamf_table(
    name: str, model: str, bf16: float, achievable: float
) -> None:
    spec = spec_for(name)
    assert spec is not None and (spec.model, spec.tflops["bf16"], spec.achievable) == (
        model,
        bf16,
        achievable,
    )


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 MIG 1c.4g.48gb",
        "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb",
        "NVIDIA H100 80GB HBM3 MIG 7g.80gb",
        "GRID A100-4C",
        "GRID V100-8Q",
        "NVIDIA H100XM-80C",
        "NVIDIA A100-40C",
        "NVIDIA H100 80GB HBM3 (custom)",
    ],
)
def test_slices_vgpus_and_uncertain_names_get_no_whole_card_spec(name: str) -> None:
    assert spec_for(name) is None


def test_a_failed_data_parallel_run_keeps_the_worker_s_own_error_not_only_torchrun_s_summary() -> None:
    """torchrun prints its own long summary after a worker's traceback: the last 2,000 characters
    held only that summary, never the cause."""
    worker = (
        'Traceback (most recent call last):\n  File "ddp.py", line 40\n'
        "RuntimeError: Gloo connectFullMesh failed\n"
    )
    summary = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 60 + "\n" * 3000
    result = judge_torchrun_failed("the data-parallel run failed", "I1125 starting\n" * 50 + worker + summary)
    kept = result.evidence["stderr"]
    assert "RuntimeError: Gloo connectFullMesh failed" in kept and "ChildFailedError" in kept
    assert len(kept) < 4000
    short = "RuntimeError: boom\n"
    assert judge_torchrun_failed("failed", short).evidence["stderr"] == short


def test_an_unreliable_figure_never_sets_the_nodes_best() -> None:
    """One GPU timed above its peak (a glitch) made every healthy H100 beside it an outlier."""
    name = "NVIDIA H100 80GB HBM3"
    results = judge_matmul(
        [
            Matmul("cuda:0", name, "bf16", 8192, 760.0, 0.01),
            Matmul("cuda:1", name, "bf16", 8192, 1200.0, 0.01),  # above the dense peak
            Matmul("cuda:2", name, "bf16", 8192, 2000.0, 0.6),  # repeats disagree
        ]
    )
    assert [r.status for r in results] == [Status.PASS, Status.WARN, Status.WARN]
    assert "outlier" not in results[0].summary
