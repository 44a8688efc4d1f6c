"""Judgements of benchmark measurements: pure functions from numbers to Results (area ``bench``).

Thresholds follow what a cluster admin acts on: matmul below 80% of what a healthy card of the model
reaches is a finding (below 55% a failure); memory bandwidth below 85% of what healthy cards of the
model measured (75%, DCGM's own line), or where no such figure is published below 70% of the
datasheet (50%); a GPU
more than 15% slower than the node's best of the same model is an outlier even for a model with no
spec; training is input-bound when its real-data step waits more than 10% of its time for data (the
gap to synthetic data is reported, not judged: it also holds the host-to-device copy).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dltune.bench.specs import (
    ALLREDUCE_8GPU,
    DCGM_SKUS,
    AllreduceFigure,
    Spec,
    allreduce_figure,
    is_mig,
    pair_figure,
    spec_for,
)
from dltune.model import EXIT_NOT_PROVED, EXIT_OK, Result, Status, exit_code
from dltune.records import field, record

SPEC_WARN, SPEC_FAIL = 0.70, 0.50
# Memory bandwidth against what healthy cards of the model measured (specs.Spec.memory_healthy_gb_s):
# DCGM's own diag passes a card at 75% of that figure; below 85% is worth a look.
HEALTHY_MEMORY_WARN, HEALTHY_MEMORY_FAIL = 0.85, 0.75
# Matmul is judged against what a healthy card of the model reaches (specs.Spec.achievable), not the
# datasheet: below 80% of that is a finding, below 55% a failure.
ACHIEVABLE_WARN, ACHIEVABLE_FAIL = 0.80, 0.55
# A second of back-to-back products against the card's own burst: healthy H100 SXM and H200 cards held
# 85-89% at their 700 W power cap (Tensor Core dtypes; fp32 100%), measured 2026-11-26
# (tests/fixtures/real/bench/). Below 70% a GPU does not hold its clocks under load: a lowered power
# limit, thermal or power-brake slowdown. GPUs only (a CPU's figure is reported, not judged so).
SUSTAINED_WARN = 0.70
OUTLIER = 0.85
# Per lane and direction, what a PCIe link of each generation carries (GB/s after line encoding):
# 2.5 and 5 GT/s with 8b/10b, then 8, 16, 32 GT/s with 128b/130b.
PCIE_LANE_GB_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938}
# A pinned host copy below this share of the link's rate is a finding. Azure's HPC node health checks
# pass 21 GB/s on Gen4 x16 (67% of 31.5) and 48 GB/s on Gen5 x16 (76% of 63); healthy H100 SXM and H200
# copied 54.3-55.0 GB/s each way on Gen5 x16 (86-87%, tests/fixtures/real/bench/). Other generations:
# the Gen4 share.
HOST_LINK_WARN = {4: 21 / 31.5, 5: 48 / 63}
HOST_LINK_WARN_OTHER = 21 / 31.5
# The all-reduce is judged at 4 GB messages or more (busbw is within a few percent of its plateau there
# on 8-GPU NVSwitch nodes; dltune asks for 8 GB, run.ALLREDUCE_MB); below half the pass line it fails.
ALLREDUCE_JUDGED_MB = 4096
ALLREDUCE_FAIL_SHARE = 0.5
INPUT_BOUND_GAP = 10.0  # percent
# A figure beyond what the hardware can do is a broken measurement, never a pass: above the card's
# published peak (2% for rounding of the datasheet), data-parallel efficiency above 100% (5% for
# timer noise), or repeats whose interquartile range exceeds 25% of their median.
PEAK_TOLERANCE = 1.02
EFFICIENCY_LIMIT = 1.05
REPEAT_SPREAD = 0.25
UNRELIABLE_REMEDY = (
    "rerun `dltune bench` on an idle node (no job, no other benchmark on it: other load on the node is "
    "the usual cause); if it repeats, report it with the JSON"
)


@record(frozen=True)
class Matmul:
    device: str  # "cuda:0", "cpu"
    name: str  # NVML/torch device name
    dtype: str
    n: int
    tflops: float  # in a short burst: what published healthy figures measure (measure.burst_seconds)
    spread: float | None = None  # interquartile range of the sustained repeats / their median
    sustained_tflops: float | None = None  # back to back for the bench's run time (the power limit)


@record(frozen=True)
class Bandwidth:
    device: str
    name: str
    kind: str  # "device copy", "h2d pinned", "h2d pageable", "d2h pinned", "d2h pageable"
    gb_s: float
    spread: float | None = None


@record(frozen=True)
class PairCopy:
    """One ordered GPU pair's unidirectional copy bandwidth (measure.pair_copy)."""

    source: str  # "cuda:0"
    destination: str
    name: str  # the source GPU's model name
    gb_s: float
    peer: bool | None = None  # peer-to-peer access (NVLink or PCIe); False: staged through the host


@record(frozen=True)
class PcieLink:
    """A GPU's PCIe link as NVML reports it: the generation and width it runs now, and the most this
    GPU and its slot can train to (nvmlDeviceGetMaxPcieLinkGeneration/Width)."""

    gen: int | None
    width: int | None
    max_gen: int | None = None
    max_width: int | None = None


@record
class PowerReading:
    """What NVML said of one GPU over the measured steps; `skipped` says why a figure is missing."""

    peak_w: float | None = None
    peak_source: str | None = None  # "instantaneous" or "1 s average"
    joules: float | None = None
    window_s: float | None = None
    skipped: str | None = None


@record(frozen=True)
class Training:
    device: str
    model: str
    data: str  # "synthetic" | "real"
    batch: int
    steps: int
    images_per_s: float
    data_ms: float
    forward_ms: float
    backward_ms: float
    max_memory_mb: float | None = None
    peak_power_w: float | None = None
    joules_per_image: float | None = None
    settings: dict[str, object] = field(default_factory=dict)
    power: PowerReading | None = None


def unreliable(figure: str, measured: float, peak: float | None, spread: float | None) -> str | None:
    """Why a measured figure cannot be true (None when it can): above the published peak (with
    PEAK_TOLERANCE for the datasheet's rounding), or repeats that disagree by more than REPEAT_SPREAD."""
    if peak and measured > peak * PEAK_TOLERANCE:
        return f"unreliable measurement: {figure} is above what the hardware can do"
    if spread is not None and spread > REPEAT_SPREAD:
        return f"unreliable measurement: repeats disagree by {spread:.0%} (more than {REPEAT_SPREAD:.0%})"
    return None


def _unreliable_result(
    check_id: str, subject: str, why: str, evidence: Mapping[str, object], metrics: Mapping[str, float]
) -> Result:
    return Result(
        check_id,
        Status.WARN,
        why,
        subject=subject,
        evidence=evidence,
        metrics=metrics,
        remedy=UNRELIABLE_REMEDY,
    )


# long: one verdict per case (unreliable, above peak, below spec, outlier), judged in this order
def judge_matmul(samples: Sequence[Matmul], lookup: Callable[[str], Spec | None] = spec_for) -> list[Result]:
    """Each GPU against what a healthy card of its model reaches (the spec's achievable fraction of the
    dense peak), and against the node's best GPU of the same name (MIG slices: the same profile)."""
    results = []
    best: dict[tuple[str, str], float] = {}
    for s in samples:
        spec = lookup(s.name)
        # The node's best among figures that can be true: one GPU timed above its peak (or with
        # repeats that disagree) must not make every healthy GPU beside it an outlier.
        if unreliable("", s.tflops, spec.tflops.get(s.dtype) if spec else None, s.spread) is None:
            best[(s.dtype, s.name)] = max(best.get((s.dtype, s.name), 0.0), s.tflops)
    for s in samples:
        spec = lookup(s.name)
        peak = spec.tflops.get(s.dtype) if spec else None
        evidence: dict[str, object] = {
            "name": s.name,
            "dtype": s.dtype,
            "n": s.n,
            "tflops": round(s.tflops, 3),
        }
        metrics = {"tflops": s.tflops}
        status, summary, remedy = Status.PASS, f"{s.dtype} matmul {s.tflops:.2f} TFLOPS", None
        if spec and peak:
            expected = peak * spec.achievable
            fraction = s.tflops / expected
            evidence.update(
                spec=spec.model,
                peak_tflops=peak,
                achievable_tflops=round(expected, 1),
                judged_against=f"{spec.achievable:.0%} of the dense peak: {spec.achievable_source}",
            )
            metrics["fraction_of_spec"] = s.tflops / peak
            metrics["fraction_of_achievable"] = fraction
            summary += (
                f", {fraction:.0%} of what a healthy {spec.model} reaches ({expected:.0f}; "
                f"{s.tflops / peak:.0%} of its {peak:g} dense peak) at n={s.n}"
            )
            if fraction < ACHIEVABLE_WARN:
                status = Status.FAIL if fraction < ACHIEVABLE_FAIL else Status.WARN
                remedy = "check clocks and power (dltune audit --only gpu: throttle reasons), cooling, PCIe"
        elif is_mig(s.name):
            summary += " (a MIG slice: compared with the node's other slices of this profile only)"
        else:
            summary += " (no published peak for this device: compared with the node's others only)"
        top = best.get((s.dtype, s.name), 0.0)
        ratio = s.tflops / top if top else 1.0
        metrics["fraction_of_best"] = ratio
        figure = f"{s.tflops:.1f} TFLOPS ({s.tflops / peak:.0%} of the dense peak)" if peak else ""
        broken = unreliable(figure, s.tflops, peak, s.spread)
        if broken:
            evidence["spread"] = s.spread
            subject = f"{s.device}:{s.dtype}"
            results.append(
                _unreliable_result("bench.matmul", subject, f"{s.dtype} matmul: {broken}", evidence, metrics)
            )
            continue
        if ratio < OUTLIER:
            status = Status.FAIL if status is Status.FAIL else Status.WARN
            summary += f"; {ratio:.0%} of the node's best GPU (an outlier)"
            remedy = remedy or "compare clocks, power and PCIe of this GPU with the others; reseat or RMA"
        if s.sustained_tflops is not None and s.tflops > 0:
            held = s.sustained_tflops / s.tflops
            evidence["sustained_tflops"] = round(s.sustained_tflops, 3)
            metrics["sustained_tflops"] = s.sustained_tflops
            metrics["sustained_fraction"] = held
            summary += f"; {s.sustained_tflops:.0f} sustained ({held:.0%} of the burst)"
            # Judged on GPUs only, where the line was measured; a CPU's short burst is mostly timer
            # and cache effects at the bench's sizes.
            if held < SUSTAINED_WARN and s.device.startswith("cuda"):
                status = Status.FAIL if status is Status.FAIL else Status.WARN
                summary += ": the GPU does not hold its clocks under load"
                remedy = remedy or (
                    "look for a lowered power limit or thermal/power-brake slowdown while it runs "
                    "(dltune audit --only gpu: power limit, throttle reasons); check cooling"
                )
        results.append(
            Result(
                "bench.matmul",
                status,
                summary,
                subject=f"{s.device}:{s.dtype}",
                evidence=evidence,
                remedy=remedy,
                metrics=metrics,
            )
        )
    return results


def _band(fraction: float, warn_below: float, fail_below: float) -> Status:
    return Status.PASS if fraction >= warn_below else Status.WARN if fraction >= fail_below else Status.FAIL


def judge_bandwidth(
    samples: Sequence[Bandwidth], lookup: Callable[[str], Spec | None] = spec_for
) -> list[Result]:
    results = []
    for s in samples:
        spec = lookup(s.name)
        metrics = {"gb_s": s.gb_s}
        evidence: dict[str, Any] = {"name": s.name, "kind": s.kind}
        summary, status = f"{s.kind} {s.gb_s:.1f} GB/s", Status.PASS
        peak = spec.memory_gb_s if s.kind == "device copy" and spec else None
        figure = (
            f"{s.gb_s:.0f} GB/s ({s.gb_s / peak:.0%} of the card's published {peak:g} GB/s)" if peak else ""
        )
        broken = unreliable(figure, s.gb_s, peak, s.spread)
        if broken:
            check_id = "bench.memory" if s.kind == "device copy" else "bench.host_transfer"
            evidence["spread"] = s.spread
            results.append(
                _unreliable_result(check_id, f"{s.device}:{s.kind}", f"{s.kind}: {broken}", evidence, metrics)
            )
            continue
        if s.kind == "device copy" and spec and spec.memory_gb_s:
            fraction = s.gb_s / spec.memory_gb_s
            metrics["fraction_of_spec"] = fraction
            summary += f", {fraction:.0%} of {spec.memory_gb_s:g} GB/s"
            status = (
                Status.PASS
                if fraction >= SPEC_WARN
                else Status.WARN
                if fraction >= SPEC_FAIL
                else Status.FAIL
            )
            if spec.memory_healthy_gb_s:
                healthy = s.gb_s / spec.memory_healthy_gb_s
                metrics["fraction_of_healthy"] = healthy
                evidence["judged_against"] = (
                    f"{spec.memory_healthy_gb_s:g} GB/s measured on a healthy {spec.model}: "
                    f"{spec.memory_healthy_source}"
                )
                if spec.memory_healthy_source == DCGM_SKUS:
                    summary += f" ({healthy:.0%} of DCGM's figure for a healthy {spec.model})"
                else:
                    summary += f" ({healthy:.0%} of what a healthy {spec.model} measures)"
                status = _band(healthy, HEALTHY_MEMORY_WARN, HEALTHY_MEMORY_FAIL)
        results.append(
            Result(
                "bench.memory" if s.kind == "device copy" else "bench.host_transfer",
                status,
                summary,
                subject=f"{s.device}:{s.kind}",
                evidence=evidence,
                metrics=metrics,
                remedy=None if status is Status.PASS else "check the GPU's memory clocks and ECC (audit gpu)",
            )
        )
    return results


def judge_training(run: Training) -> Result:
    per_step = run.data_ms + run.forward_ms + run.backward_ms
    metrics = {
        "images_per_s": run.images_per_s,
        "data_ms": run.data_ms,
        "forward_ms": run.forward_ms,
        "backward_ms": run.backward_ms,
    }
    for name, value in (
        ("max_memory_mb", run.max_memory_mb),
        ("peak_power_w", run.peak_power_w),
        ("joules_per_image", run.joules_per_image),
    ):
        if value is not None:
            metrics[name] = value
    return Result(
        f"bench.train_{run.data}",
        Status.PASS,
        f"{run.model} batch {run.batch}, {run.data} data: {run.images_per_s:.1f} images/s "
        f"(per step: data {run.data_ms:.1f} ms, forward {run.forward_ms:.1f} ms, "
        f"backward+optimizer {run.backward_ms:.1f} ms of {per_step:.1f} ms)",
        subject=run.device,
        evidence={"model": run.model, "batch": run.batch, "steps": run.steps, **run.settings},
        metrics=metrics,
    )


def judge_power(run: Training) -> Result:
    """Peak power and energy per image of the measured steps, or skip with NVML's reason."""
    reading = run.power
    if reading is None:
        return Result("bench.power", Status.SKIP, "no GPU: power comes from NVML", subject=run.device)
    evidence: dict[str, object] = {
        "peak_source": reading.peak_source,
        "window_s": round(reading.window_s, 2) if reading.window_s is not None else None,
        "energy_skipped": reading.skipped,
    }
    metrics: dict[str, float] = {}
    parts = []
    if reading.peak_w:
        metrics["peak_power_w"] = reading.peak_w
        parts.append(f"peak {reading.peak_w:.0f} W ({reading.peak_source})")
    if reading.joules and run.joules_per_image is not None:
        metrics["joules_per_image"] = run.joules_per_image
        parts.append(
            f"{run.joules_per_image:.3f} J per image ({reading.joules:.0f} J over "
            f"{reading.window_s or 0:.1f} s, NVML's total-energy counter)"
        )
    if not parts:
        return Result(
            "bench.power",
            Status.SKIP,
            f"power not measured: {reading.skipped or 'NVML reported no power'}",
            subject=run.device,
            evidence=evidence,
        )
    if reading.skipped:
        parts.append(f"energy not measured: {reading.skipped}")
    return Result(
        "bench.power",
        Status.PASS,
        "; ".join(parts) + " while training",
        subject=run.device,
        evidence=evidence,
        metrics=metrics,
    )


def judge_input_gap(synthetic: Training, real: Training | None, num_workers: int | None = None) -> Result:
    """The gap is measured (real vs synthetic images/s); the verdict comes from where the real step's time
    goes: a step that waits more than INPUT_BOUND_GAP% of its time for data is input-bound."""
    if real is None:
        return Result("bench.input_gap", Status.SKIP, "no real-data run was made")
    gap = max(0.0, (synthetic.images_per_s - real.images_per_s) / synthetic.images_per_s * 100)
    waiting = real.data_ms / max(real.data_ms + real.forward_ms + real.backward_ms, 1e-9) * 100
    bound = waiting > INPUT_BOUND_GAP
    workers = num_workers if num_workers is not None else real.settings.get("num_workers")
    return Result(
        "bench.input_gap",
        Status.WARN if bound else Status.PASS,
        f"real data {real.images_per_s:.1f} vs synthetic {synthetic.images_per_s:.1f} images/s: "
        f"gap {gap:.0f}%; the step waits {waiting:.0f}% of its time for data"
        + (": input-bound" if bound else ""),
        subject=real.device,
        evidence={
            "num_workers": workers,
            "data_wait_percent": round(waiting, 1),
            "gap_percent": round(gap, 1),
        },
        remedy=(
            f"input-bound: raise num_workers (now {workers}) toward the cores per GPU, stage the data "
            "to local disk (dltune stage), or try --dataloader-sweep"
        )
        if bound
        else None,
        metrics={"gap_percent": gap, "data_wait_percent": waiting},
    )


def judge_sweep(rates: dict[str, float], default_key: str) -> Result:
    best_key = max(rates, key=lambda k: rates[k])
    default = rates.get(default_key)
    gain = (rates[best_key] / default - 1) * 100 if default else 0.0
    return Result(
        "bench.dataloader",
        Status.PASS,
        f"best DataLoader setting {best_key}: {rates[best_key]:.1f} images/s, "
        f"{gain:+.0f}% over PyTorch's defaults ({default_key})",
        evidence={
            "rates": {k: round(v, 2) for k, v in rates.items()},
            "best": best_key,
            "default": default_key,
        },
        remedy=f"use {best_key} in your DataLoader" if gain > 10 else None,
        metrics={"best_images_per_s": rates[best_key], "gain_percent": gain},
    )


def judge_determinism(
    identical: bool, control_differs: bool, variable_at_start: str | None, device: str
) -> Result:
    evidence = {
        "identical": identical,
        "control_differs": control_differs,
        "CUBLAS_WORKSPACE_CONFIG_at_start": variable_at_start,
    }
    if not control_differs:
        return Result(
            "bench.determinism",
            Status.ERROR,
            "the negative control (a perturbed run) gave the same losses: the comparison is blind",
            subject=device,
            evidence=evidence,
            remedy="report this as a dltune bug",
        )
    if not identical:
        return Result(
            "bench.determinism",
            Status.FAIL,
            "two seeded runs with deterministic algorithms gave different losses: not reproducible",
            subject=device,
            evidence=evidence,
            remedy="set CUBLAS_WORKSPACE_CONFIG=:4096:8 before the process starts (role dl_env)",
        )
    needs_variable = device.startswith("cuda") and not variable_at_start
    return Result(
        "bench.determinism",
        Status.WARN if needs_variable else Status.PASS,
        "two seeded runs gave bitwise-identical losses; a perturbed run differed"
        + ("; CUBLAS_WORKSPACE_CONFIG was not set at start" if needs_variable else "")
        + (f" (CUBLAS_WORKSPACE_CONFIG={variable_at_start} at start)" if variable_at_start else ""),
        subject=device,
        evidence=evidence,
        remedy="apply role dl_env so every job starts with CUBLAS_WORKSPACE_CONFIG"
        if needs_variable
        else None,
    )


def _pair_label(pair: PairCopy) -> str:
    return f"{pair.source} -> {pair.destination}"


def judge_gpu_pairs(pairs: Sequence[PairCopy]) -> Result:
    """Every ordered GPU pair's copy bandwidth in one result: a pair below OUTLIER of the node's median
    pair warns (one bad NVLink or PCIe switch shows only there, naming both GPUs); where every GPU is of
    a model with a published per-pair figure (specs.PAIR_COPY) and the pair has peer access, below
    that figure warns and below half of it fails. The whole matrix is in the evidence."""
    if not pairs:
        return Result("bench.gpu_pairs", Status.SKIP, "fewer than two GPUs: no GPU pairs to measure")
    median = statistics.median(p.gb_s for p in pairs)
    figure = pair_figure([p.name for p in pairs])
    findings: list[str] = []
    status = Status.PASS
    for pair in sorted(pairs, key=lambda p: p.gb_s):
        problems = []
        verdict = Status.PASS
        if pair.gb_s < OUTLIER * median:
            problems.append(f"{pair.gb_s / median:.0%} of the node's median pair ({median:.0f} GB/s)")
            verdict = Status.WARN
        line = allreduce_verdict(pair.gb_s, figure.pass_gb_s) if figure and pair.peer is not False else None
        if line is not None and line is not Status.PASS:
            problems.append(f"below the {figure.pass_gb_s:g} GB/s a healthy {figure.model} pair passes")  # type: ignore[union-attr]
            verdict = Status.FAIL if Status.FAIL in (verdict, line) else Status.WARN
        if problems:
            findings.append(f"{_pair_label(pair)} {pair.gb_s:.0f} GB/s: " + ", ".join(problems))
            status = Status.FAIL if Status.FAIL in (status, verdict) else verdict
    lowest, highest = min(p.gb_s for p in pairs), max(p.gb_s for p in pairs)
    no_peer = sorted(_pair_label(p) for p in pairs if p.peer is False)
    evidence: dict[str, Any] = {"gb_s": {_pair_label(p): round(p.gb_s, 1) for p in pairs}}
    if figure is not None:
        evidence["judged_against"] = f"{figure.pass_gb_s:g} GB/s per pair: {figure.source}"
    if no_peer:
        evidence["without_peer_access"] = no_peer
    summary = f"{len(pairs)} GPU pairs copied {lowest:.0f}-{highest:.0f} GB/s (median {median:.0f})" + (
        f"; {len(no_peer)} without peer access (staged through host memory)" if no_peer else ""
    )
    if findings:
        summary += (
            "; " + "; ".join(findings[:4]) + (f"; and {len(findings) - 4} more" if len(findings) > 4 else "")
        )
    return Result(
        "bench.gpu_pairs",
        status,
        summary,
        evidence=evidence,
        metrics={"min_gb_s": lowest, "median_gb_s": median},
        remedy=None
        if status is Status.PASS
        else "a slow pair names both GPUs: check their NVLinks (`nvidia-smi nvlink -s -i <gpu>`, audit "
        "fabric) and `nvidia-smi topo -m`; the same GPU in every slow pair is the GPU (or its slot)",
    )


def allreduce_verdict(busbw_gb_s: float, pass_gb_s: float) -> Status:
    """At or above the pass line passes; below it warns; below ALLREDUCE_FAIL_SHARE of it fails."""
    if busbw_gb_s >= pass_gb_s:
        return Status.PASS
    return Status.WARN if busbw_gb_s >= pass_gb_s * ALLREDUCE_FAIL_SHARE else Status.FAIL


NVLINK = "NVLink"
NVLINK_REMEDY = (
    "check each GPU's NVLinks (audit fabric, `nvidia-smi nvlink -s`), the fabric manager and the GPU "
    "pairs (bench.gpu_pairs); NCCL_DEBUG=INFO shows the transport NCCL chose"
)
_OFF = ("1", "true", "yes", "on")


def path_between(path: Mapping[str, Any] | None) -> str | None:
    """How the run's GPUs reached each other (dltune.bench.ddp.gpu_path): NVLink (peer-to-peer between
    every pair, every GPU with NVLinks up), "peer-to-peer" (the link not known to be NVLink: PCIe, or
    NVML could not say), "host memory" (a pair without peer access: NCCL stages through the host), or
    None when not recorded."""
    if not path:
        return None
    peer, nvlinks = path.get("peer_to_peer"), path.get("nvlinks_up") or []
    if peer is True and nvlinks and all(isinstance(n, int) and n > 0 for n in nvlinks):
        return NVLINK
    if peer is True:
        return "peer-to-peer"
    return "host memory" if peer is False else None


def p2p_turned_off(path: Mapping[str, Any] | None) -> str | None:
    """The NCCL setting that keeps it off NVLink and PCIe peer-to-peer, as set: NCCL_P2P_DISABLE=1, or
    NCCL_P2P_LEVEL=LOC (NCCL's environment variables: P2P never used)."""
    settings = (path or {}).get("nccl") or {}
    if str(settings.get("NCCL_P2P_DISABLE", "")).strip().lower() in _OFF:
        return f"NCCL_P2P_DISABLE={settings['NCCL_P2P_DISABLE']}"
    if str(settings.get("NCCL_P2P_LEVEL", "")).strip().upper() in ("LOC", "0"):
        return f"NCCL_P2P_LEVEL={settings['NCCL_P2P_LEVEL']}"
    return None


def model_figure(device_names: list[str]) -> AllreduceFigure | None:
    """The published all-reduce figure of the run's one model, whatever the run's GPU count."""
    models = {spec.model if spec else None for spec in map(spec_for, device_names)}
    (model,) = models if len(models) == 1 else (None,)
    return ALLREDUCE_8GPU.get(model) if model else None


# long: bandwidth and scaling of one run share their evidence; split, they would compute it twice
def judge_allreduce(
    world: int,
    backend: str,
    size_bytes: int,
    seconds: float,
    scaling: float | None,
    hosts: list[str] | None = None,
    per_rank: list[float] | None = None,
    device_names: list[str] | None = None,
    path: Mapping[str, Any] | None = None,
) -> list[Result]:
    """All-reduce bandwidth and data-parallel scaling; `hosts` (each rank's host) for a multi-node run,
    whose results have ids of their own (bench.multinode_*: a column apart from the node's own run).
    `seconds` is the slowest rank's time (a collective ends when its last rank does); `per_rank` each
    rank's own, as evidence. One node's NCCL run over GPUs whose model and count have a published
    figure (specs.ALLREDUCE_8GPU) is judged on its busbw: below the peer's pass line a finding, below
    half of it a failure (a ring that lost its NVLinks runs at PCIe speed, an order of magnitude less).
    Over fewer GPUs of such a model joined by NVLink (``path``), no published figure gives a pass line,
    but NVSwitch keeps busbw near the full node's (a DGX A100 over 4 GPUs: 222-235 GB/s): below half
    of the full node's pass line fails as far below what NVLink allows (the same 4 GPUs with P2P off in
    NCCL: 5.2 GB/s). A run NCCL was told to keep off peer-to-peer says so."""
    prefix = "bench.multinode_" if hosts else "bench."
    algbw = size_bytes / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    nodes = sorted(set(hosts)) if hosts else []
    where = f" on {len(nodes)} nodes ({', '.join(nodes)})" if hosts else ""
    evidence: dict[str, object] = {"world_size": world, "bytes": size_bytes, "seconds": seconds}
    if per_rank:
        evidence["seconds_per_rank"] = per_rank
    if hosts:
        evidence["hosts"] = hosts
    summary = (
        f"{backend} all-reduce over {world} processes{where}, {size_bytes / 1e6:.0f} MB: "
        f"algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s"
    )
    status, remedy = Status.PASS, None
    one_node_nccl = bool(device_names) and backend == "nccl" and not hosts
    figure = allreduce_figure(device_names or []) if one_node_nccl else None
    route, turned_off = path_between(path), p2p_turned_off(path)
    if route:
        evidence["path"] = route
        summary += f" over {route}"
    if path and path.get("nccl"):
        evidence["nccl_settings"] = dict(path["nccl"])
    if turned_off:
        summary += f" ({turned_off}: NCCL uses neither NVLink nor PCIe peer-to-peer)"
    full = model_figure(device_names or []) if one_node_nccl and figure is None else None
    fewer_over_nvlink = full is not None and route == NVLINK and world < full.gpus
    small = size_bytes < ALLREDUCE_JUDGED_MB << 20
    if (figure is not None or fewer_over_nvlink) and small:
        evidence["not_judged"] = (
            f"{size_bytes / 1e6:.0f} MB is below the {ALLREDUCE_JUDGED_MB} MB where busbw nears its plateau"
        )
    elif one_node_nccl and figure is None and not fewer_over_nvlink:
        evidence["not_judged"] = (
            f"no published figure for {world} GPUs of this model over "
            f"{route or 'a path dltune could not read'}"
        )
    elif full is not None and fewer_over_nvlink:
        floor = full.pass_gb_s * ALLREDUCE_FAIL_SHARE
        evidence["judged_against"] = (
            f"no published figure for {world} GPUs: half of the {full.pass_gb_s:g} GB/s a healthy "
            f"{full.gpus}-GPU node passes ({full.source})"
        )
        if busbw < floor:
            status = Status.FAIL
            summary += (
                f", {busbw / full.pass_gb_s:.0%} of the {full.pass_gb_s:g} GB/s a healthy {full.gpus}-GPU "
                "node passes: far below what NVLink allows"
            )
            remedy = (
                f"unset {turned_off.split('=')[0]} for training jobs (the site's environment, the job "
                "script, /etc/nccl.conf)"
                if turned_off
                else NVLINK_REMEDY
            )
    elif figure is not None:
        status = allreduce_verdict(busbw, figure.pass_gb_s)
        evidence["judged_against"] = f"{figure.pass_gb_s:g} GB/s on {figure.gpus} GPUs: {figure.source}"
        summary += f", {busbw / figure.pass_gb_s:.0%} of the {figure.pass_gb_s:g} GB/s a healthy node passes"
        if status is not Status.PASS:
            remedy = NVLINK_REMEDY
    results = [
        Result(
            f"{prefix}allreduce",
            status,
            summary,
            subject=backend,
            evidence=evidence,
            metrics={"algbw_gb_s": algbw, "busbw_gb_s": busbw},
            remedy=remedy,
        )
    ]
    cpu_note = (
        (
            " (gloo on CPU: proves the nodes train together, not a GPU figure)"
            if hosts
            else " (CPU processes share the same cores: not a GPU figure)"
        )
        if backend == "gloo"
        else ""
    )
    if scaling is not None and scaling > EFFICIENCY_LIMIT:
        results.append(
            Result(
                f"{prefix}scaling",
                Status.WARN,
                f"data-parallel scaling 1 -> {world}{where}: unreliable measurement: {scaling:.0%} "
                "efficiency is more than 100%, which data-parallel training cannot reach (the single-process "
                "baseline ran slower than it can: other load on the node)" + cpu_note,
                subject=backend,
                metrics={"efficiency": scaling},
                remedy=UNRELIABLE_REMEDY,
            )
        )
    elif scaling is not None:
        results.append(
            Result(
                f"{prefix}scaling",
                Status.PASS if scaling >= 0.8 or backend == "gloo" else Status.WARN,
                f"data-parallel scaling 1 -> {world}{where}: {scaling:.0%} efficiency" + cpu_note,
                subject=backend,
                metrics={"efficiency": scaling},
                remedy=None
                if scaling >= 0.8 or backend == "gloo"
                else "check the network between the nodes (InfiniBand/RoCE, GPUDirect RDMA) and NCCL "
                "settings (NCCL_DEBUG=INFO)"
                if hosts
                else "check NVLink/PCIe topology (nvidia-smi topo -m) and NCCL settings",
            )
        )
    return results


def judge_gain(check_id: str, what: str, baseline: float, tuned: float) -> Result:
    gain = (tuned / baseline - 1) * 100 if baseline else 0.0
    return Result(
        check_id,
        Status.PASS,
        f"{what}: {gain:+.0f}% images/s ({baseline:.1f} -> {tuned:.1f})",
        metrics={"gain_percent": gain, "baseline_images_per_s": baseline, "tuned_images_per_s": tuned},
    )


def judge_threads(cores: int, threads: int, processes: int) -> Result:
    used = threads * processes
    over = used > cores
    return Result(
        "bench.threads",
        Status.WARN if over else Status.PASS,
        f"{processes} process(es) x {threads} CPU threads = {used} on {cores} core(s) available"
        + (": oversubscribed" if over else ""),
        evidence={"cores": cores, "threads_per_process": threads, "processes": processes},
        remedy=f"set OMP_NUM_THREADS={max(1, cores // processes)} (cores / processes per node)"
        if over
        else None,
        metrics={"cores": cores, "threads": threads},
    )


# Why `dltune check` did not run its bench: bench.run's evidence["cause"]. Deliberate (the audit's exit
# code stands): --no-bench, a critical failure, a job on the GPUs. Not proved (exit 3 where nothing
# failed or erred, check_exit_code): the bench should have run and could not.
NOT_PROVED_CAUSES = frozenset({"no_torch", "torch_sees_no_gpu", "torch_cuda_newer_than_driver"})
# What gives dltune's Python a PyTorch: the role variables, named in bench.run's summary and remedy.
TORCH_FIX = (
    "set dltune_bench_torch_packages (+ dltune_bench_pip_args) or dltune_bench_python of role "
    "dltune.cluster.dltune"
)
TORCH_REMEDY = (
    "role dltune.cluster.dltune: dltune_bench_torch_packages installs PyTorch into dltune's venv from the "
    "site's index or wheelhouse (with dltune_bench_pip_args), or dltune_bench_python names an existing "
    "Python environment with PyTorch (conda, a module) whose packages dltune's venv then sees; apply the "
    "role, then rerun `dltune check` (without the role: pip install 'dltune[bench]' into dltune's Python)"
)
# What torch warns when its CUDA runtime is newer than the driver: "The NVIDIA driver on your system is
# too old (found version 11040)" (the driver's CUDA, 11.4), or CUDA error 35, "CUDA driver version is
# insufficient for CUDA runtime version".
DRIVER_TOO_OLD = re.compile(r"too old|insufficient for CUDA runtime", re.I)
DRIVER_CUDA_FOUND = re.compile(r"found version (\d{4,6})")


@record(frozen=True)
class TorchCuda:
    """What the installed PyTorch says of CUDA, read by `dltune check` only where its bench may run."""

    version: str  # torch.__version__
    cuda: str | None  # torch.version.cuda: None for a CPU-only build
    available: bool  # torch.cuda.is_available()
    warning: str | None = None  # what torch warned while it looked (a driver too old for its CUDA)
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES, where the process has it


def bench_gate(
    audit: Sequence[Result],
    busy_gpus: Mapping[int, Sequence[int]],
    torch_installed: bool,
    asked_not_to: bool,
) -> Result | None:
    """Why `dltune check` must not run the bench after its audit (None: it may). A bench on a node
    whose audit failed critically measures a broken node; on a GPU a job is using, it disturbs the job
    and measures a share of the card. Without PyTorch it cannot run: not proved (NOT_PROVED_CAUSES)."""
    if asked_not_to:
        return Result("bench.run", Status.SKIP, "bench not run: --no-bench", evidence={"cause": "no_bench"})
    critical = sorted({r.id for r in audit if r.status is Status.FAIL and r.critical})
    if critical:
        return Result(
            "bench.run",
            Status.SKIP,
            f"bench not run: critical check(s) failed: {', '.join(critical)}",
            evidence={"cause": "critical_failure", "critical_failures": critical},
            remedy="fix the critical findings above, then rerun `dltune check`",
        )
    if busy_gpus:
        described = "; ".join(
            f"GPU {index}: pid {', '.join(map(str, pids))}" for index, pids in sorted(busy_gpus.items())
        )
        return Result(
            "bench.run",
            Status.SKIP,
            f"bench not run: compute processes are running ({described}): a job is using the node",
            evidence={"cause": "busy_gpus", "compute_pids": {str(i): list(p) for i, p in busy_gpus.items()}},
            remedy="run `dltune check` when the node is idle (e.g. drained, or inside an exclusive job)",
        )
    if not torch_installed:
        return Result(
            "bench.run",
            Status.SKIP,
            f"bench not run, node not proved: PyTorch (torch and torchvision) is not installed where dltune "
            f"runs; {TORCH_FIX}",
            evidence={"cause": "no_torch"},
            remedy=TORCH_REMEDY,
        )
    return None


def torch_gpu_gate(torch: TorchCuda, nvml_gpus: int, driver_version: str | None) -> Result | None:
    """Whether the PyTorch `dltune check` found can bench the GPUs NVML reports (None: it can, or the
    node has none, and the bench runs on the CPU). A PyTorch that sees none of them would bench the
    CPU and pass: not proved, saying what torch reports (torch.version.cuda None: a CPU-only build)."""
    if torch.available or nvml_gpus <= 0:
        return None
    driver = f"driver {driver_version}" if driver_version else "the driver"
    sees = f"NVML reports {nvml_gpus} GPU(s)"
    sees_on = f"{sees} ({driver})" if driver_version else sees
    evidence: dict[str, object] = {
        "torch_version": torch.version,
        "torch_cuda": torch.cuda,
        "torch_cuda_available": False,
        "nvml_gpus": nvml_gpus,
        "driver_version": driver_version,
    }
    if torch.warning:
        evidence["torch_warning"] = torch.warning
    if torch.visible_devices is not None:
        evidence["CUDA_VISIBLE_DEVICES"] = torch.visible_devices
    cause = "torch_sees_no_gpu"
    if torch.cuda is None:
        why = f"PyTorch {torch.version} is a CPU-only build (torch.version.cuda: None), {sees_on}"
        fix = "install a CUDA build"
    elif torch.warning and DRIVER_TOO_OLD.search(torch.warning):
        cause = "torch_cuda_newer_than_driver"
        found = DRIVER_CUDA_FOUND.search(torch.warning)
        supports = f" (CUDA {_cuda_version(int(found[1]))})" if found else ""
        why = (
            f"PyTorch {torch.version} (torch.version.cuda: {torch.cuda}) sees no GPU: its CUDA is newer "
            f"than {driver}{supports} supports; {sees}"
        )
        fix = "install a PyTorch built for the driver's CUDA (or a newer driver, role nvidia_driver)"
    else:
        hidden = "" if torch.visible_devices is None else f", CUDA_VISIBLE_DEVICES={torch.visible_devices!r}"
        why = f"PyTorch {torch.version} (torch.version.cuda: {torch.cuda}{hidden}) sees no GPU, {sees_on}"
        fix = "install a PyTorch that sees them (compare `nvidia-smi` with torch.cuda.is_available())"
    return Result(
        "bench.run",
        Status.SKIP,
        f"bench not run, node not proved: {why}; {fix}: {TORCH_FIX}",
        evidence={"cause": cause, **evidence},
        remedy=TORCH_REMEDY,
    )


def _cuda_version(encoded: int) -> str:
    """CUDA's version as its API encodes it (1000 x major + 10 x minor: 11040 is 11.4)."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def not_proved(result: Result) -> bool:
    """A bench.run that says the bench should have run and could not (NOT_PROVED_CAUSES)."""
    return result.id == "bench.run" and result.evidence.get("cause") in NOT_PROVED_CAUSES


def check_exit_code(results: Iterable[Result]) -> int:
    """`dltune check`'s exit code: a fail 1, else an error 2 (model.exit_code), else 3 where the bench
    should have run and could not (EXIT_NOT_PROVED), else 0. A deliberate skip of the bench (--no-bench,
    a critical failure, a job on the GPUs) leaves the audit's code."""
    results = list(results)
    code = exit_code(results)
    if code == EXIT_OK and any(not_proved(r) for r in results):
        return EXIT_NOT_PROVED
    return code


def judge_host_transfers(
    transfers: Sequence[Bandwidth] | None, links: Mapping[str, PcieLink | None] | None = None
) -> list[Result]:
    """Host-to-device and back; None on a CPU-only run, which has no such link. With the GPUs' PCIe
    links (device -> link, from NVML), each pinned copy is also judged against its link's rate."""
    if transfers is None:
        return [
            Result(
                "bench.host_transfer",
                Status.SKIP,
                "no GPU: host-to-device bandwidth needs one",
                subject="cpu",
            )
        ]
    results = judge_bandwidth(transfers)
    if links is not None:
        results += [judge_host_link(t, links.get(t.device)) for t in transfers if t.kind.endswith("pinned")]
    return results


def judge_host_link(transfer: Bandwidth, link: PcieLink | None) -> Result:
    """A pinned copy against what the GPU's PCIe link carries: the most this GPU and its slot train
    to (a link running narrower or slower than that is why a copy falls short, and is named), against
    HOST_LINK_WARN's share. Without NVML's link (no NVML, a MIG slice, a vGPU) a skip says so."""
    subject = f"{transfer.device}:{transfer.kind}"
    gen = (link.max_gen or link.gen) if link else None
    width = (link.max_width or link.width) if link else None
    if link is None or gen not in PCIE_LANE_GB_S or not width:
        return Result(
            "bench.host_link",
            Status.SKIP,
            f"{transfer.kind} {transfer.gb_s:.1f} GB/s: NVML gives no PCIe link for this GPU to judge it by",
            subject=subject,
            metrics={"gb_s": transfer.gb_s},
        )
    rate = PCIE_LANE_GB_S[gen] * width
    share, line = transfer.gb_s / rate, HOST_LINK_WARN.get(gen, HOST_LINK_WARN_OTHER)
    running = f"Gen{link.gen} x{link.width}" if link.gen and link.width else "unknown"
    trained_short = (link.gen is not None and link.gen < gen) or (
        link.width is not None and link.width < width
    )
    summary = (
        f"{transfer.kind} {transfer.gb_s:.1f} GB/s, {share:.0%} of a Gen{gen} x{width} link ({rate:.1f} GB/s)"
    )
    if trained_short:
        summary += f"; the link runs {running}"
    status = Status.PASS if share >= line else Status.WARN
    return Result(
        "bench.host_link",
        status,
        summary,
        subject=subject,
        evidence={
            "name": transfer.name,
            "link": f"Gen{gen} x{width}",
            "running": running,
            "healthy_share": round(line, 3),
            "judged_against": "Azure HPC health checks (21 GB/s Gen4 x16, 48 GB/s Gen5 x16); healthy "
            "H100/H200 measured 86-87% of Gen5 x16",
        },
        metrics={"gb_s": transfer.gb_s, "link_gb_s": rate, "fraction_of_link": share},
        remedy=None
        if status is Status.PASS
        else "run it on the GPU's own NUMA node (the CPU affinity `nvidia-smi topo -m` shows; memory on "
        "the other socket crosses the CPU interconnect), then check the GPU's PCIe link (`dltune audit "
        "--only gpu`; `nvidia-smi -q`, GPU Link Info: generation, width, replays), the slot, riser and "
        "BIOS PCIe settings, and other traffic on the same PCIe switch",
    )


def judge_compile(
    eager_images_per_s: float, compiled_images_per_s: float | None, error: str | None
) -> Result:
    """torch.compile's gain over the eager step; neither rate nor error: it was not asked for."""
    if error is not None:
        return Result("bench.compile", Status.WARN, f"torch.compile failed: {error}"[:300])
    if compiled_images_per_s is None:
        return Result(
            "bench.compile",
            Status.SKIP,
            "not measured: compiling takes minutes (run with --compile, without --quick)",
        )
    return judge_gain(
        "bench.compile", "torch.compile of the training step", eager_images_per_s, compiled_images_per_s
    )


def judge_determinism_refused(message: str, variable_at_start: str | None, device: str) -> Result:
    """The deterministic run raised: cuBLAS refusing for want of its variable is the node's fault; any
    other refusal is an operation of dltune's own model without a deterministic kernel."""
    evidence = {"CUBLAS_WORKSPACE_CONFIG_at_start": variable_at_start, "error": message[:1000]}
    if "CUBLAS_WORKSPACE_CONFIG" in message:
        return Result(
            "bench.determinism",
            Status.FAIL,
            "deterministic run refused: cuBLAS needs CUBLAS_WORKSPACE_CONFIG set before the process starts",
            subject=device,
            evidence=evidence,
            remedy="set CUBLAS_WORKSPACE_CONFIG=:4096:8 before the process starts (role dl_env)",
        )
    return Result(
        "bench.determinism",
        Status.ERROR,
        f"the determinism model hit an operation without a deterministic implementation: {message}"[:300],
        subject=device,
        evidence=evidence,
        remedy="report this as a dltune bug, with this JSON",
    )


@record(frozen=True)
class SdcRun:
    """One device's replay for bench.sdc (measure.sdc_replay): the sha256 of its weights before training
    (step 0) and after each step, or what PyTorch refused."""

    device: str  # "cuda:3"; on a CPU "cpu#1" and "cpu#2", two runs that stand for two devices
    name: str  # the device's model (NVML/torch name): devices are compared within one model
    digests: tuple[str, ...] = ()
    error: str | None = None


SDC_REMEDY = (
    "a GPU that computes wrong must not train: keep the node out of scheduling, rerun `dltune bench` "
    "(the same device diverging again is the GPU, not a passing event), run DCGM's diagnostic "
    "(`dltune check --dcgm 3`), then replace the GPU; the evidence holds every device's digest per step"
)
SDC_NO_MAJORITY_REMEDY = (
    "a GPU that computes wrong must not train: keep the node out of scheduling; with no majority on the "
    "node, `dltune report` over nodes with the same replay key names the GPU whose digest differs from "
    "the fleet's (or run DCGM's diagnostic, `dltune check --dcgm 3`); then replace it"
)


def _step_said(step: int) -> str:
    return "before training (the weights as copied to the device)" if step == 0 else f"at step {step}"


def _first_difference(one: Sequence[str], other: Sequence[str]) -> int:
    """The first step (0: before training) at which two replays' digests differ."""
    return next(
        (i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other))
    )


def judge_sdc(runs: Sequence[SdcRun], key: Mapping[str, Any], injected: str | None = None) -> list[Result]:
    """bench.sdc, one result per device model on the node: the replays' digests compared bit for bit.
    A device whose digests differ from the majority's fails, critical, naming it and the first step it
    left them; with no majority (two devices that differ) every device is named. `key` is what the
    digests depend on besides the hardware (measure.sdc_key; the model is added here): `dltune report`
    compares the digests of nodes with the same key. `injected`: the test seam's flip, said so."""
    groups: dict[str, list[SdcRun]] = {}
    for run in runs:
        groups.setdefault(run.name, []).append(run)
    return [_judge_sdc_model(name, group, key, injected) for name, group in groups.items()]


def _sdc_divergence(
    name: str, noun: str, ran: Sequence[SdcRun], steps: int
) -> tuple[str, str, dict[str, int]] | None:
    """(summary, remedy, device -> first step it left the others) when the replays differ, else None:
    the devices outside a majority's digests, or with no majority every device, parting where the
    replays first part."""
    traces: dict[tuple[str, ...], list[str]] = {}
    for r in ran:
        traces.setdefault(r.digests, []).append(r.device)
    if len(traces) < 2:
        return None
    majority, holders = max(traces.items(), key=lambda item: len(item[1]))
    if len(holders) * 2 > len(ran):
        diverged = {r.device: _first_difference(r.digests, majority) for r in ran if r.digests != majority}
        named = ", ".join(f"{d} ({_step_said(s)})" for d, s in diverged.items())
        summary = (
            f"{named} computed differently from the other {len(holders)} {name} {noun} of this node: the "
            f"same seeded training replay ({steps} steps) gave weights that are not bit for bit theirs, "
            "silent data corruption"
        )
        return summary, SDC_REMEDY, diverged
    parted = min(_first_difference(a, b) for a in traces for b in traces if a != b)
    summary = (
        f"no majority among {len(ran)} {name} {noun}: {', '.join(r.device for r in ran)} replayed the same "
        f"seeded training to {len(traces)} different results, parting {_step_said(parted)} of {steps}: at "
        "least one computes wrong (silent data corruption), the node alone cannot say which"
    )
    return summary, SDC_NO_MAJORITY_REMEDY, {r.device: parted for r in ran}


def _sdc_refused(refused: Sequence[SdcRun]) -> tuple[Status, str, str]:
    """A replay PyTorch refused: cuBLAS without its variable is the node's setting (a fail, not
    critical: bench.determinism says the same); anything else an error naming the devices."""
    devices = ", ".join(r.device for r in refused)
    if any("CUBLAS_WORKSPACE_CONFIG" in (r.error or "") for r in refused):
        return (
            Status.FAIL,
            f"deterministic replay refused on {devices}: cuBLAS needs CUBLAS_WORKSPACE_CONFIG set before the "
            "process starts",
            "set CUBLAS_WORKSPACE_CONFIG=:4096:8 before the process starts (role dl_env)",
        )
    return (
        Status.ERROR,
        f"the replay failed on {devices}: {(refused[0].error or 'no digest')[:200]}",
        "a CUDA error on one GPU alone: `dltune audit --only gpu` (Xid, ECC); otherwise report this as a "
        "dltune bug, with this JSON",
    )


# long: one model's verdicts in their order (divergence, refusal, blindness, a lone device), one evidence
def _judge_sdc_model(
    name: str, runs: Sequence[SdcRun], key: Mapping[str, Any], injected: str | None
) -> Result:
    """One device model's replays, in this order: a divergence (critical), a refusal, a blind replay
    (a step that left the weights unchanged), a lone device (nothing to compare on the node), a pass."""
    ran = [r for r in runs if r.error is None and r.digests]
    refused = [r for r in runs if r.error is not None or not r.digests]
    steps = max((len(r.digests) - 1 for r in ran), default=0)
    evidence: dict[str, Any] = {
        "key": {**key, "gpu": name},
        "devices": {r.device: {"digest": r.digests[-1], "steps": list(r.digests)} for r in ran},
    }
    if refused:
        evidence["errors"] = {r.device: (r.error or "no digest")[:500] for r in refused}
    if injected:
        evidence["injected"] = injected
    noun = "GPU(s)" if all(r.device.startswith("cuda") for r in runs) else "device(s)"
    said_injected = f" [a bit flipped on purpose: {injected}]" if injected else ""
    metrics = {"devices": float(len(ran)), "diverged": 0.0}

    def result(status: Status, summary: str, remedy: str | None = None, critical: bool = False) -> Result:
        return Result(
            "bench.sdc",
            status,
            summary + said_injected,
            subject=name,
            evidence=evidence,
            metrics=metrics,
            remedy=remedy,
            critical=critical,
        )

    divergence = _sdc_divergence(name, noun, ran, steps)
    if divergence is not None:
        summary, remedy, diverged = divergence
        evidence["diverged"] = diverged
        metrics["diverged"] = float(len(diverged))
        if refused:
            summary += f"; the replay failed on {', '.join(r.device for r in refused)}"
        return result(Status.FAIL, summary, remedy, critical=True)
    if refused:
        return result(*_sdc_refused(refused))
    unchanged = [r.device for r in ran if len(set(r.digests)) < len(r.digests)]
    if unchanged:
        return result(
            Status.ERROR,
            f"the replay is blind: a step left the weights unchanged on {', '.join(unchanged)}, so their "
            "digests cannot show what that step computed",
            "report this as a dltune bug, with this JSON",
        )
    digest = f"weights sha256 {ran[0].digests[-1][:16]}"
    if len(ran) < 2:
        return result(
            Status.SKIP,
            f"one {name} {noun.removesuffix('(s)')}: nothing on this node to compare its replay with "
            f"({digest} after {steps} steps); `dltune report` compares it with other nodes' of the same key",
        )
    return result(
        Status.PASS,
        f"{len(ran)} {name} {noun} replayed {steps} seeded training steps bit for bit alike ({digest})",
    )


# The worker's own error is printed before torchrun's summary of the failure, which can alone fill
# the end of stderr: the evidence keeps the first error's lines and the end.
FIRST_ERROR = re.compile(r"^.*(Traceback \(most recent call last\)|terminate called|Error|error:).*$", re.M)
FIRST_ERROR_CHARS, STDERR_TAIL_CHARS = 2000, 1500


def stderr_excerpt(stderr: str) -> str:
    """The first error in a torchrun's stderr (where a worker's own traceback is) and the end."""
    if len(stderr) <= FIRST_ERROR_CHARS + STDERR_TAIL_CHARS:
        return stderr
    tail = stderr[-STDERR_TAIL_CHARS:]
    first = FIRST_ERROR.search(stderr)
    if first is None or first.start() >= len(stderr) - STDERR_TAIL_CHARS:
        return tail
    return stderr[first.start() : first.start() + FIRST_ERROR_CHARS] + "\n[...]\n" + tail


def judge_torchrun_failed(summary: str, stderr: str) -> Result:
    return Result(
        "bench.allreduce",
        Status.ERROR,
        summary,
        evidence={"stderr": stderr_excerpt(stderr)},
        remedy="see the evidence (the first worker error in torchrun's stderr, then its end)",
    )


def _from_ddp(
    world: int,
    backend: str,
    numbers: Mapping[str, Any],
    scaling: float | None,
    hosts: list[str] | None = None,
) -> list[Result]:
    """The all-reduce and scaling results of what rank 0 of dltune.bench.ddp wrote."""
    return judge_allreduce(
        world,
        backend,
        numbers["bytes"],
        numbers["seconds"],
        scaling,
        hosts=hosts,
        per_rank=numbers.get("seconds_per_rank"),
        device_names=numbers.get("device_names"),
        path=numbers.get("path"),
    )


def judge_data_parallel(
    devices: list[str],
    numbers: Mapping[str, Any] | None,
    error: Result | None,
    single_images_per_s: float,
) -> list[Result]:
    on_cpu = devices == ["cpu"]
    world = 2 if on_cpu else len(devices)
    if world < 2:
        return [Result("bench.allreduce", Status.SKIP, "one GPU: no data-parallel to measure")]
    if error is not None or numbers is None:
        return [error or Result("bench.allreduce", Status.ERROR, "torchrun wrote no results")]
    backend = "gloo" if on_cpu else "nccl"
    if on_cpu:
        # The CPU processes split one set of cores: compare with the one process that had them all.
        scaling = numbers["images_per_s_total"] / single_images_per_s if single_images_per_s else None
    else:
        # n processes' total against n times what each process trained alone, in the same run.
        baseline = numbers.get("baseline_images_per_s") or single_images_per_s
        scaling = numbers["images_per_s_total"] / (world * baseline) if baseline else None
    return _from_ddp(world, backend, numbers, scaling)


def judge_multi_node(
    hosts: list[str], node_rank: int, backend: str, numbers: Mapping[str, Any] | None, error: Result | None
) -> list[Result]:
    """The multi-node run as the first node reports it (or the failure of any node, as that node)."""
    if error is not None:
        return [
            Result(
                "bench.multinode_allreduce",
                error.status,
                f"the data-parallel run over {', '.join(hosts)} failed on {hosts[node_rank]}",
                evidence=error.evidence,
                remedy=error.remedy,
            )
        ]
    if numbers is None:
        return [Result("bench.multinode_allreduce", Status.ERROR, "torchrun wrote no results on node 0")]
    world, baseline = numbers["world"], numbers["baseline_images_per_s"]
    scaling = numbers["images_per_s_total"] / (world * baseline) if baseline else None
    return _from_ddp(world, backend, numbers, scaling, hosts=numbers["hosts"])
