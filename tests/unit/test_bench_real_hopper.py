"""The bench's matmul and memory verdicts on what two healthy Hopper cards really measured
(tests/fixtures/real/bench/: an H100 SXM and an H200 on 2026-11-26, driver 580.159.04, PyTorch
2.11.0+cu130). The GPU is the only part faked: its numbers come from those runs, not from here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltune.bench.judge import SUSTAINED_WARN, Bandwidth, Matmul, judge_bandwidth, judge_matmul
from dltune.model import Status

REAL = Path(__file__).parents[1] / "fixtures" / "real" / "bench"
CARDS = {"h100_2026-11-26": "NVIDIA H100 80GB HBM3", "h200_2026-11-26": "NVIDIA H200"}


def _calibration(folder: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((REAL / folder / "calibrate.json").read_text())
    assert record["name"] == CARDS[folder]
    return record


def _bench(folder: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = json.loads((REAL / folder / "bench.json").read_text())["results"]
    return results


@pytest.mark.parametrize("folder", sorted(CARDS))
def test_a_healthy_hopper_card_passes_every_matmul_dtype(folder: str) -> None:
    """Burst against the published healthy figure, the sustained second beside it: every dtype passes,
    and the sustained figure (at the 700 W power cap) is reported, not judged against the burst table."""
    record = _calibration(folder)
    samples = [
        Matmul(
            "cuda:0",
            record["name"],
            dtype,
            8192,
            row["burst_tflops"],
            row["dltune_spread"],
            row["dltune_tflops"],
        )
        for dtype, row in record["matmul"].items()
    ]
    results = judge_matmul(samples)
    assert [(r.subject, r.status) for r in results] == [(f"cuda:0:{s.dtype}", Status.PASS) for s in samples]
    for result, sample in zip(results, samples, strict=True):
        assert f"{sample.sustained_tflops:.0f} sustained" in result.summary
        assert result.metrics["sustained_fraction"] >= SUSTAINED_WARN


@pytest.mark.parametrize("folder", sorted(CARDS))
def test_the_sustained_figure_judged_as_a_burst_was_what_put_healthy_fp16_at_the_warn_line(
    folder: str,
) -> None:
    """The bug these runs found: dltune's one-second figure, judged against the burst table, warned on
    both cards' fp16 (their bench.json says so); the same figure is a pass as the sustained half."""
    before = {r["subject"]: r for r in _bench(folder) if r["id"] == "bench.matmul"}
    assert before["cuda:0:fp16"]["status"] == "warn"
    sustained = before["cuda:0:fp16"]["metrics"]["tflops"]
    (old_way,) = judge_matmul([Matmul("cuda:0", CARDS[folder], "fp16", 8192, sustained)])
    assert old_way.status is Status.WARN
    burst = _calibration(folder)["matmul"]["fp16"]["burst_tflops"]
    (new_way,) = judge_matmul([Matmul("cuda:0", CARDS[folder], "fp16", 8192, burst, None, sustained)])
    assert new_way.status is Status.PASS


@pytest.mark.parametrize("folder", sorted(CARDS))
def test_the_sustained_windows_sat_at_the_power_cap(folder: str) -> None:
    """What justifies 'the power limit' in the wording: NVML's clocks event reasons in every sustained
    Tensor Core window had the SW power cap bit (0x4) with the SM clock below its 1980 MHz maximum;
    fp32 (CUDA cores) kept its clock and held its burst figure."""
    matmul = _calibration(folder)["matmul"]
    for dtype in ("bf16", "fp16", "tf32"):
        windows = matmul[dtype]["sustained"]
        assert all(int(w["throttle"], 16) & 0x4 and w["sm_mhz"] < 1600 for w in windows), dtype
    fp32 = matmul["fp32"]
    assert all(w["sm_mhz"] >= 1950 and w["tflops"] >= 0.98 * fp32["burst_tflops"] for w in fp32["sustained"])


def test_a_card_that_cannot_hold_its_clocks_is_a_finding() -> None:
    """The sustained second below 70% of the card's own burst: a lowered power limit, thermal or
    power-brake slowdown. The burst alone would have passed it."""
    burst = 800.0
    (held,) = judge_matmul(
        [Matmul("cuda:0", "NVIDIA H200", "bf16", 8192, burst, None, burst * SUSTAINED_WARN)]
    )
    assert held.status is Status.PASS
    (dropped,) = judge_matmul(
        [Matmul("cuda:0", "NVIDIA H200", "bf16", 8192, burst, None, burst * SUSTAINED_WARN - 1)]
    )
    assert dropped.status is Status.WARN
    assert "does not hold its clocks under load" in dropped.summary and "power limit" in str(dropped.remedy)


@pytest.mark.parametrize("folder", sorted(CARDS))
def test_each_healthy_card_s_device_copy_passes_and_a_slowed_one_does_not(folder: str) -> None:
    """The healthy line is what dltune's own copy measured on these cards: the real figure passes;
    the same card at 80% of it (which DCGM's lower figure passed) is a warning."""
    (copy,) = [r for r in _bench(folder) if r["id"] == "bench.memory"]
    gb_s = copy["metrics"]["gb_s"]
    (real,) = judge_bandwidth([Bandwidth("cuda:0", CARDS[folder], "device copy", gb_s)])
    assert real.status is Status.PASS and 0.95 < real.metrics["fraction_of_healthy"] < 1.05
    (slowed,) = judge_bandwidth([Bandwidth("cuda:0", CARDS[folder], "device copy", gb_s * 0.8)])
    assert slowed.status is Status.WARN


def test_the_sustained_half_at_its_edges() -> None:
    """A figure of 0 TFLOPS has no burst to divide by: no sustained share, no crash; a small figure
    (a CPU, 0.5 TFLOPS) still gets one; the evidence keeps the sustained figure to 3 decimals; a card
    that already fails its burst stays a failure when it also cannot hold its clocks."""
    (zero,) = judge_matmul([Matmul("cpu", "cpu", "fp32", 512, 0.0, None, 0.0)])
    assert "sustained_fraction" not in zero.metrics and "sustained" not in zero.summary
    (small,) = judge_matmul([Matmul("cpu", "cpu", "fp32", 512, 0.5, None, 0.45)])
    assert (
        small.metrics["sustained_fraction"] == pytest.approx(0.9)
        and "0 sustained (90% of the burst)" in small.summary
    )
    (precise,) = judge_matmul([Matmul("cuda:0", "NVIDIA H200", "bf16", 8192, 800.0, None, 707.12345)])
    assert precise.evidence["sustained_tflops"] == 707.123
    (failing,) = judge_matmul([Matmul("cuda:0", "NVIDIA H200", "bf16", 8192, 400.0, None, 200.0)])
    assert failing.status is Status.FAIL and "does not hold its clocks" in failing.summary


def test_a_model_only_dcgm_measured_says_whose_figure_it_is() -> None:
    (a100,) = judge_bandwidth([Bandwidth("cuda:0", "NVIDIA A100-SXM4-80GB", "device copy", 1564.0)])
    assert (
        a100.summary
        == "device copy 1564.0 GB/s, 77% of 2039 GB/s (100% of DCGM's figure for a healthy A100 80GB SXM)"
    )


def test_a_cpu_s_sustained_figure_is_reported_not_judged() -> None:
    """The 70% line was measured on GPUs; on a CPU at the bench's sizes a burst of 10 small products
    is mostly timer and cache effects (a real CPU run here: 0.17 burst, 0.085 sustained)."""
    (cpu,) = judge_matmul([Matmul("cpu", "cpu", "fp32", 512, 0.17, None, 0.085)])
    assert cpu.status is Status.PASS and "0 sustained (50% of the burst)" in cpu.summary
    (gpu,) = judge_matmul([Matmul("cuda:0", "Some Future GPU", "bf16", 8192, 100.0, None, 50.0)])
    assert gpu.status is Status.WARN and "does not hold its clocks" in gpu.summary


@pytest.mark.parametrize("folder", sorted(CARDS))
def test_the_fixed_bench_s_own_figures_from_each_card_pass(folder: str) -> None:
    """bench-after.json: the bench with the burst/sustained split, run on each card (2026-11-26). Its
    recorded burst and sustained figures, judged again here, pass every dtype."""
    after = json.loads((REAL / folder / "bench-after.json").read_text())["results"]
    samples = [
        Matmul(
            "cuda:0",
            r["evidence"]["name"],
            r["evidence"]["dtype"],
            8192,
            r["evidence"]["tflops"],
            None,
            r["evidence"]["sustained_tflops"],
        )
        for r in after
        if r["id"] == "bench.matmul"
    ]
    assert len(samples) == 4
    assert {r.status for r in judge_matmul(samples)} == {Status.PASS}
