"""Published dense peak figures of common datacenter GPUs (no structured sparsity), keyed by the exact
device names NVML and torch report (tests/fixtures/real/gpu_names holds the names as published in
`nvidia-smi -L`, `nvidia-smi -q` and torch logs). TFLOPS per dtype, memory bandwidth in GB/s.

Peaks: NVIDIA's V100, V100S, A100, H100, H200, GH200 and L40S datasheets (dense = the datasheet's
"with sparsity" figure halved); B200, B300, GB200 and GB300 from the DGX B200/B300 and GB200/GB300
NVL72 datasheets as tabulated in Stas Bekman's ml-engineering (compute/accelerator/README.md).

What a healthy card reaches is lower than its datasheet: ``achievable`` is the fraction of the dense
bf16 peak that a best-shape matmul search measured on healthy cards (ml-engineering's "Maximum
Achievable Matmul FLOPS comparison table", August 2026: H100 SXM 794.5 of 989 TFLOPS (80.3%, "H200
is the same"), GH200 828.6 (83.8%), A100 SXM 271.2 of 312 (86.9%), A100 PCIe 252.9 (81.1%), B200
1745 of 2250 (77.6%), B300 1769 (78.6%), GB200 1822 of 2500 (72.9%); github.com/mag-/gpu_benchmark
for H100 PCIe 500 of 756 (66%), H100 NVL 489 of 835 (58%), L40S 252 of 362 (70%)). Models without a
published measurement get DEFAULT_ACHIEVABLE, and say so.

Memory bandwidth is judged against what healthy cards of the model measured (``memory_healthy_gb_s``):
dltune's own device copy where it has met a healthy card of the model (H100 SXM, H200 SXM), else the
figure published in DCGM's nvvs/diag-skus.yaml.in (the measured figure whose 75% is DCGM's own pass
line; its kernel measures less than dltune's copy, so these lines are lenient). Models without either
fall back to the datasheet.

Only names dltune maps with certainty get a spec: the whole name must match one of a model's known
spellings. A MIG GPU instance ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), a MIG compute instance ("NVIDIA
H100 MIG 1c.4g.48gb"), a vGPU profile ("GRID A100-4C", "NVIDIA H100XM-80C") or any unlisted name
gets none, and is compared with the node's other devices of the same name only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_ACHIEVABLE = 0.75
MAMF = "best-shape matmul measured on a healthy card (ml-engineering's MAMF table, mamf-finder)"
NO_MEASUREMENT = "no published measurement for this model: a conservative 75% of the peak"
DCGM_SKUS = "DCGM nvvs/diag-skus.yaml.in (dcgmproftester -t 1005 on a healthy card)"
# dltune's own device copy measures more than DCGM's figure on the same healthy card (118% on an H100
# SXM, 134-137% on an H200), so a DCGM figure judges leniently; where dltune's method has met a
# healthy card of the model, its figure replaces DCGM's.
DLTUNE_MEASURED = (
    "dltune's device copy (512 MB read and written) on a healthy card, 2026-11-26: tests/fixtures/real/bench/"
)


@dataclass(frozen=True)
class Spec:
    model: str
    tflops: dict[str, float] = field(default_factory=dict)  # dtype -> dense peak
    memory_gb_s: float | None = None
    achievable: float = DEFAULT_ACHIEVABLE  # fraction of the dense peak a healthy card reaches
    achievable_source: str = NO_MEASUREMENT
    memory_healthy_gb_s: float | None = None  # device memory bandwidth measured on healthy cards
    memory_healthy_source: str = ""

    def achievable_tflops(self, dtype: str) -> float | None:
        peak = self.tflops.get(dtype)
        return peak * self.achievable if peak else None


def _tensor(bf16: float, fp32: float | None = None) -> dict[str, float]:
    """Tensor Core dtypes of Ampere and later: fp16 as bf16, tf32 at half of it; fp32 (CUDA cores)
    where the datasheet states it."""
    figures = {"bf16": bf16, "fp16": bf16, "tf32": bf16 / 2}
    return figures | ({"fp32": fp32} if fp32 else {})


def _card(
    model: str,
    tflops: dict[str, float],
    memory: float,
    achievable: float = DEFAULT_ACHIEVABLE,
    source: str = NO_MEASUREMENT,
    healthy: float | None = None,
    healthy_source: str = DCGM_SKUS,
) -> Spec:
    return Spec(model, tflops, memory, achievable, source, healthy, healthy_source if healthy else "")


# Device copy on healthy cards by dltune's method: H100 SXM 2983-3025 GB/s, H200 4168-4244 (DCGM's
# figures for them: 2540 and 3110).
H100_SXM = _card("H100 SXM", _tensor(989.5, 66.9), 3350, 0.803, MAMF, 3000, DLTUNE_MEASURED)
_HOPPER_SAME = "as H100 SXM (same GH100 compute and clocks; ml-engineering: 'H200 is the same'): " + MAMF
_A100_SXM = _tensor(312.0, 19.5)
# The whole device name (upper case, "NVIDIA "/"Tesla " dropped, blanks single) must match one of a
# model's spellings: a name dltune does not know, a MIG instance or a vGPU profile matches none.
SPECS: tuple[tuple[str, Spec], ...] = (
    (r"GH200 144G HBM3E", _card("GH200 144GB HBM3e", _tensor(989.5, 67.0), 4900, 0.838, MAMF)),
    (r"GH200(?: 480GB| 96GB HBM3)?", _card("GH200 96GB HBM3", _tensor(989.5, 67.0), 4000, 0.838, MAMF)),
    (r"H200 NVL", _card("H200 NVL", _tensor(835.5, 60.0), 4800, healthy=2950)),
    (
        r"H200(?: 141GB HBM3E)?",
        _card("H200 SXM", _tensor(989.5, 66.9), 4800, 0.803, _HOPPER_SAME, 4200, DLTUNE_MEASURED),
    ),
    (r"H100(?: 80GB)? PCIE", _card("H100 PCIe", _tensor(756.0, 51.2), 2000, 0.66, MAMF, 1639)),
    (r"H100 NVL", _card("H100 NVL", _tensor(835.5, 60.0), 3900, 0.58, MAMF, 2725)),
    (r"H100(?: 80GB HBM3| SXM5 80GB)?", H100_SXM),
    (r"A100-SXM4?-80GB", _card("A100 80GB SXM", _A100_SXM, 2039, 0.869, MAMF, 1564)),
    (r"A100 80GB PCIE|A100-PCIE-80GB", _card("A100 80GB PCIe", _A100_SXM, 1935, 0.811, MAMF)),
    (r"A100-PCIE-40GB|A100 PCIE", _card("A100 40GB PCIe", _A100_SXM, 1555, 0.811, MAMF, 1293)),
    (r"A100-SXM4?-40GB", _card("A100 40GB SXM", _A100_SXM, 1555, 0.869, MAMF)),
    (
        r"L40S",
        _card("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}, 864, 0.70, MAMF, 700),
    ),
    (r"B200", _card("B200", _tensor(2250.0), 8000, 0.776, MAMF, 5430)),
    (r"B300(?: SXM6 AC)?", _card("B300", _tensor(2250.0), 8000, 0.786, MAMF, 6020)),
    (r"GB200", _card("GB200", _tensor(2500.0), 8000, 0.729, MAMF, 3470)),
    (
        r"GB300",
        _card("GB300", _tensor(2500.0), 8000, 0.729, "as GB200 (no published MAMF for GB300): " + MAMF, 6030),
    ),
    # Volta has no bf16 and no tf32 Tensor Core path: fp16 is its Tensor Core dtype.
    (r"V100S-PCIE-32GB", Spec("V100S PCIe", {"fp16": 130.0, "fp32": 16.4}, 1134)),
    (r"V100-PCIE-(?:16|32)GB", Spec("V100 PCIe", {"fp16": 112.0, "fp32": 14.0}, 900)),
    # DGX-2's V100 SXM3 32GB: the SXM2 figures (its higher power limit is not in NVIDIA's datasheet).
    (r"V100-SXM[23]-(?:16|32)GB(?:-LS|-H)?", Spec("V100 SXM2", {"fp16": 125.0, "fp32": 15.7}, 900)),
)
_COMPILED = tuple((re.compile(pattern), spec) for pattern, spec in SPECS)
# MIG GPU instances ("MIG 1g.10gb", "MIG 7g.80gb") and compute instances ("MIG 1c.4g.48gb").
MIG_NAME = re.compile(r"\bMIG\s+(?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb", re.IGNORECASE)
_VENDOR_PREFIX = re.compile(r"^(?:NVIDIA|TESLA)\s+")


def is_mig(device_name: str) -> bool:
    return MIG_NAME.search(device_name) is not None


def spec_for(device_name: str) -> Spec | None:
    """The card's spec, or None where no whole-card figure applies with certainty: an unknown card, a
    MIG instance, a vGPU profile."""
    name = _VENDOR_PREFIX.sub("", " ".join(device_name.upper().split()))
    for pattern, spec in _COMPILED:
        if pattern.fullmatch(name):
            return spec
    return None


@dataclass(frozen=True)
class AllreduceFigure:
    """What one node's all-reduce reaches on `gpus` healthy cards of a model, as bus bandwidth (GB/s,
    nccl-tests' busbw), and the peer's pass line below it."""

    gpus: int
    pass_gb_s: float
    healthy_gb_s: float | None
    source: str


_AZURE_NHC = "Azure HPC node health checks (check_nccl_allreduce, 16 GB messages, one VM of 8 GPUs)"
_H100_SHARP = (
    "NVIDIA (sjeaugey, nccl-tests #212): 'On 8 GPUs, you should reach a peak busBw of ~480GB/s "
    "(algbw ~275GB/s). You need to run on larger sizes though; 256M is too small'"
)
# Single-node 8-GPU figures over NVLink/NVSwitch, by Spec.model. Only a node with exactly this many
# GPUs of the model is judged: busbw on fewer GPUs, or over PCIe, has no published figure here.
ALLREDUCE_8GPU: dict[str, AllreduceFigure] = {
    "H100 SXM": AllreduceFigure(8, 460.0, 480.0, f"{_AZURE_NHC}, conf/nd96isr_h100_v5.conf; {_H100_SHARP}"),
    "H200 SXM": AllreduceFigure(8, 431.0, None, f"{_AZURE_NHC}, conf/nd96isr_h200_v5.conf"),
    "A100 80GB SXM": AllreduceFigure(8, 228.0, 235.0, f"{_AZURE_NHC}, NDm A100 v4 (as cited in issue 33)"),
    "A100 40GB SXM": AllreduceFigure(8, 228.0, 235.0, f"{_AZURE_NHC}, ND A100 v4 (as cited in issue 33)"),
}


def allreduce_figure(device_names: list[str]) -> AllreduceFigure | None:
    """The healthy figure for an all-reduce over exactly these GPUs: all of one model that has one,
    as many as the figure was measured on; else None."""
    models = {spec.model if spec else None for spec in map(spec_for, device_names)}
    if len(models) != 1:
        return None
    (model,) = models
    figure = ALLREDUCE_8GPU.get(model) if model else None
    return figure if figure and figure.gpus == len(device_names) else None


@dataclass(frozen=True)
class PairFigure:
    """A GPU pair's unidirectional copy bandwidth that a healthy node of the model passes (GB/s)."""

    model: str
    pass_gb_s: float
    source: str


# By Spec.model, over NVLink (SXM boards). A PCIe card's pairs are judged against the node's own median
# only: their bandwidth depends on the board's PCIe switches, which no table knows.
PAIR_COPY: dict[str, PairFigure] = {
    "H100 SXM": PairFigure(
        "H100 SXM", 335.0, "Azure HPC node health checks, nd96isr_h100_v5.conf: check_gpu_bw 48 335"
    ),
    "A100 80GB SXM": PairFigure(
        "A100 80GB SXM", 235.0, "Azure HPC node health checks (as cited in issue 33)"
    ),
    "A100 40GB SXM": PairFigure(
        "A100 40GB SXM", 235.0, "Azure HPC node health checks (as cited in issue 33)"
    ),
}


def pair_figure(device_names: list[str]) -> PairFigure | None:
    """The per-pair figure when every GPU is of one model that has one; else None."""
    models = {spec.model if spec else None for spec in map(spec_for, device_names)}
    if len(models) != 1:
        return None
    (model,) = models
    return PAIR_COPY.get(model) if model else None
