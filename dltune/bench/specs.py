"""Published dense peak figures of datacenter and workstation GPUs (no structured sparsity), keyed by the
exact device names NVML and torch report (tests/fixtures/real/gpu_names holds the names as published in
`nvidia-smi -L`, `nvidia-smi -q` and torch logs; the driver's own product names are in the "Product Name"
table of NVIDIA/open-gpu-kernel-modules' README). TFLOPS per dtype, memory bandwidth in GB/s.

Peaks: NVIDIA's V100, V100S, A10, A40, A100, L4, L40, L40S, H100, H800, H200 and GH200 datasheets,
the GA102 whitepaper for the RTX A6000 (dense = the datasheet's "with sparsity" figure halved); the
A800 SXM4 80GB as the A100 80GB SXM and the H800 PCIe as the H100 PCIe from secondary tables named in
their entries; the H20, L20, L2 and A30 from Arthur Chiao's datasheet quick reference (its dense figures,
named in each entry); the RTX 5000 Ada from its datasheet's table as reproduced in a named repository; B200,
B300, GB200 and GB300 from the DGX B200/B300 and GB200/GB300 NVL72 datasheets as tabulated in Stas
Bekman's ml-engineering (compute/accelerator/README.md). Each entry names its source; where a datasheet
prints no bf16/fp16 Tensor Core figure (RTX 6000 Ada, RTX 5000 Ada, RTX PRO 6000 Blackwell Workstation:
FP8 or FP4 with sparsity only; the A10G: none published) the entry has no such figure, and those dtypes
are judged against the node's other GPUs only. Cards whose peak no sustained matmul holds and whose
achieved share nobody published (the 70 W T4; the L2, a 300 GB/s Ada inference card like the L4 that
measured 58.6%; the RTX 6000 Ada, RTX 5000 Ada and RTX PRO 6000 Blackwell's dual-issue fp32 peaks) keep
their memory figure only: a default share would warn on healthy cards. Boards without a sourced figure
(A16, A2, H20-3e, H20 NVL16, H800 NVL, A800 PCIe, A800 40GB Active, A800-SXM4-40GB, B100, RTX PRO 6000
Blackwell Server and Max-Q Editions, GH200 120GB, the RTX A-series below the A6000, RTX 4000/4500 Ada,
RTX PRO 4000/4500/5000 Blackwell, Quadro RTX and Volta workstation boards) get no spec.

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

from dltune.records import field, record

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


@record(frozen=True)
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
    # H800 (2324, "NVIDIA H800" in the driver's table; the PCIe card is "NVIDIA H800 PCIe", 2322): NVIDIA's
    # H800 datasheet (linked from github.com/astroC86/gpu-datasheet: "80 GB | 3.35 TB/s | 1979 TFLOPS
    # (BF16 / FP16)", the sparsity figure) halved, tf32 at half of it as for H100 SXM above; NVIDIA's DCGM
    # measures ~2560 GB/s on it (diag-skus.yaml.in "Nvidia H800 80GB"), as on H100 SXM (~2540).
    # The same GH100 compute, clocks and memory as H100 SXM: its measured share, and DCGM's 2560 GB/s.
    (r"H800", _card("H800 SXM", _tensor(989.5), 3350, 0.803, "as H100 SXM (same GH100): " + MAMF, 2560)),
    # H800 PCIe (2322, "NVIDIA H800 PCIe"): no NVIDIA datasheet found; secondary tables give it the H100
    # PCIe's figures: "H800 PCIe | ... 2.0 TB/s | ... BF16 Tensor Core | ... 756 TFLOPS" (a Chinese GPU spec
    # reference table, search-corpus file 66885247134, whose note says the H800 is the H100's China version
    # with the same compute) and "H800 PCIe peak F8: 3026 TFLOPS" (FP8 with sparsity: 4 x 756; a gemm_sp
    # benchmark README measured on one, file 69472046894); tf32 at half of bf16. NVIDIA's DCGM measures ~1646
    # GB/s on it (diag-skus.yaml.in "H800 PCIe", 2322) as on H100 PCIe (~1639): the same GH100 PCIe board, so
    # the H100 PCIe's measured share.
    (
        r"H800 PCIE",
        _card("H800 PCIe", _tensor(756.0), 2000, 0.66, "as H100 PCIe (same GH100 PCIe board): " + MAMF, 1646),
    ),
    # H20 (2329, "NVIDIA H20"; the "NVIDIA H20-3e" 232C and "NVIDIA H20 NVL16" 230E are other boards, without
    # a sourced figure here). No public NVIDIA datasheet; Arthur Chiao's "GPU Performance (Data Sheets) Quick
    # Reference (2023)" (github.com/ArthurChiao/arthurchiao.github.io, _posts/2023-10-25-gpu-data-sheets.md,
    # section 4, "*: with sparsity"): "96G HBM3", "4.0TB/s", FP32 44, TF32 74, BF16 "148 | 148" TFLOPS;
    # fp16 as bf16. NVIDIA's DCGM measures ~2010 GB/s on it (diag-skus.yaml.in "H20A", 2329).
    (r"H20", _card("H20", _tensor(148.0, 44.0), 4000, healthy=2010)),
    # A800 SXM4 80GB: the A100 80GB SXM's figures (secondary, no NVIDIA datasheet found: hahnyuan/LLM-Viewer
    # hardwares/hardware_params.py "nvidia_A800_80G_SXM": 2039 GB/s, FP16 312 TFLOPS); NVIDIA's DCGM measures
    # ~1566 GB/s on it and ~1564 on the A100-SXM4-80GB (diag-skus.yaml.in).
    # The same GA100 as the A100 80GB SXM: its measured share, and DCGM's 1566 GB/s.
    (
        r"A800-SXM4-80GB",
        _card("A800 80GB SXM", _A100_SXM, 2039, 0.869, "as A100 80GB SXM (same GA100): " + MAMF, 1566),
    ),
    (
        r"L40S",
        _card("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}, 864, 0.70, MAMF, 700),
    ),
    (r"B200", _card("B200", _tensor(2250.0), 8000, 0.776, MAMF, 5430)),
    (r"B300(?: SXM6 AC)?", _card("B300", _tensor(2250.0), 8000, 0.786, MAMF, 6020)),
    # "NVIDIA HGX GB200" is the driver's name for the same device (2941) in 570.124.04-570.1xx, "NVIDIA
    # GB200" before and after (NVIDIA/open-gpu-kernel-modules README, "Product Name").
    (r"(?:HGX )?GB200", _card("GB200", _tensor(2500.0), 8000, 0.729, MAMF, 3470)),
    (
        r"GB300",
        _card("GB300", _tensor(2500.0), 8000, 0.729, "as GB200 (no published MAMF for GB300): " + MAMF, 6030),
    ),
    # Volta has no bf16 and no tf32 Tensor Core path: fp16 is its Tensor Core dtype.
    (r"V100S-PCIE-32GB", Spec("V100S PCIe", {"fp16": 130.0, "fp32": 16.4}, 1134)),
    (r"V100-PCIE-(?:16|32)GB", Spec("V100 PCIe", {"fp16": 112.0, "fp32": 14.0}, 900)),
    # DGX-2's V100 SXM3 32GB: the SXM2 figures (its higher power limit is not in NVIDIA's datasheet).
    (r"V100-SXM[23]-(?:16|32)GB(?:-LS|-H)?", Spec("V100 SXM2", {"fp16": 125.0, "fp32": 15.7}, 900)),
    # Turing: fp16 (FP16/FP32 mixed precision) is its Tensor Core dtype. NVIDIA T4 datasheet
    # (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf):
    # single precision 8.1, mixed precision 65 TFLOPS, 320 GB/s (no sparsity on Turing).
    # A 70 W card does not hold its peak clocks under a sustained matmul, and no measured share is
    # published: its peaks stay out (a default share would warn on healthy cards; compared with the
    # node's other T4s only); memory against DCGM's measured 244 GB/s (diag-skus.yaml.in "Tesla T4").
    (r"T4", _card("T4", {}, 320, healthy=244)),
    # Ampere GA102 cards: tf32 as the datasheet prints it (the "with sparsity" figure halved).
    # NVIDIA A10 datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf):
    # FP32 31.2, TF32 62.5 | 125*, BF16 and FP16 125 | 250* TFLOPS, 600 GB/s.
    (r"A10", _card("A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}, 600)),
    # A10G (AWS G5): no NVIDIA datasheet, and its Tensor Core rates differ from the A10's, so no peak; its
    # memory is the A10's (Baseten, "NVIDIA A10 vs A10G for ML model inference": "The A10 and A10G share the
    # same GPU memory stats: 24 gigabytes of GDDR6 VRAM with a memory bandwidth of 600 gigabytes per second").
    (r"A10G", _card("A10G", {}, 600, healthy=484)),  # DCGM's measured 484 GB/s
    # NVIDIA A40 datasheet (https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf):
    # FP32 37.4, TF32 74.8 | 149.6*, BF16 (FP32 accumulate) and FP16 149.7 | 299.4* TFLOPS, 696 GB/s.
    (r"A40", _card("A40", {"bf16": 149.7, "fp16": 149.7, "tf32": 74.8, "fp32": 37.4}, 696, healthy=565)),
    # NVIDIA A30 (20B7): Arthur Chiao's quick reference (as for H20, section 2, from NVIDIA's A30 page,
    # https://www.nvidia.com/en-us/data-center/products/a30-gpu/): "FP32 10.3", "BF16 165", "FP16 165",
    # "INT8 330", "INT4 661" TFLOPS (no "*": dense), "933GB/s"; tf32 at half of bf16 (not printed there).
    # NVIDIA's DCGM measures ~780 GB/s on it (diag-skus.yaml.in "A30", 20b7).
    (r"A30", _card("A30", _tensor(165.0, 10.3), 933, healthy=780)),
    # NVIDIA Ampere GA102 whitepaper v2, RTX A6000
    # (https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf): "Peak BF16
    # Tensor TFLOPS with FP32 Accumulate 154.8/309.6", 768 GB/s; FP32 38.7; tf32 at half of bf16.
    (
        r"RTX A6000",
        _card("RTX A6000", {"bf16": 154.8, "fp16": 154.8, "tf32": 77.4, "fp32": 38.7}, 768, healthy=675),
    ),
    # Ada. NVIDIA L20 (26BA, "NVIDIA L20"): Arthur Chiao's quick reference (as for H20, section 4): "48G
    # GDDR6", "864GB/s", FP32 59.8, TF32 59.8, BF16 "119 | 119" TFLOPS; fp16 as bf16. NVIDIA's DCGM measures
    # ~655 GB/s on it (diag-skus.yaml.in "L20A", 26ba).
    (r"L20", _card("L20", {"bf16": 119.0, "fp16": 119.0, "tf32": 59.8, "fp32": 59.8}, 864, healthy=655)),
    # NVIDIA L2 (27B6, "NVIDIA L2"): the same quick reference (section 2): "24GB GDDR6", "300 GB/s", FP32
    # 24.1, TF32 48.3, BF16 95.6 TFLOPS. Like the L4 (the other 300 GB/s Ada inference card, which measured
    # 58.6% of its peak) and without a published share of its own, its peaks stay out: memory only, against
    # DCGM's measured ~254 GB/s (diag-skus.yaml.in "L2", 27b6).
    (r"L2", _card("L2", {}, 300, healthy=254)),
    # NVIDIA L4 datasheet (https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet),
    # sparsity figures only: TF32 120*, BF16 and FP16 242*; FP32 30.3 TFLOPS, 300 GB/s.
    # A 72 W card: a healthy L4 measured 70.9 bf16 TFLOPS (58.6% of the dense peak) and 15.4 fp32
    # (github.com/zzc0721/torch-performance-test-data, a torch matmul sweep, not a MAMF search);
    # memory against DCGM's measured 265 GB/s.
    (
        r"L4",
        _card(
            "L4",
            {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
            300,
            0.586,
            "a torch matmul sweep on a healthy L4 (zzc0721/torch-performance-test-data): 70.9 of 121 TFLOPS",
            265,
        ),
    ),
    # NVIDIA L40 datasheet (with the L40S's, as above; also the Ada whitepaper v2.1,
    # https://images.nvidia.com/aem-dam/Solutions/Data-Center/l4/nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf):
    # FP32 90.5, TF32 90.5 | 181*, BF16 and FP16 181.05 | 362.1* TFLOPS, 864 GB/s.
    (r"L40", _card("L40", {"bf16": 181.05, "fp16": 181.05, "tf32": 90.5, "fp32": 90.5}, 864)),
    # Workstation boards whose datasheet gives no bf16/fp16 Tensor Core figure (only FP8 or FP4 with
    # sparsity): single precision and memory only. NVIDIA RTX 6000 Ada Generation datasheet (no URL found;
    # its table as reproduced in github.com/atineoSE/coding-model-seeks-gpu, rtx6000ada_specs.md):
    # "Single-precision performance 91.1 TFLOPS", "Memory bandwidth 960 GB/s" ("Tensor performance 1457.0
    # TFLOPS": FP8, sparse).
    # Its fp32 peak (91.1 TFLOPS, dual-issue) is not what a matmul reaches: memory only.
    (r"RTX 6000 ADA GENERATION", _card("RTX 6000 Ada", {}, 960)),
    # NVIDIA RTX 5000 Ada Generation (26B2) datasheet, its table as reproduced in the same repository
    # (github.com/atineoSE/coding-model-seeks-gpu, pipeline/pipeline/sources/rtx5000ada_specs.md): "Memory
    # Bandwidth | 576GB/s", "Single-Precision Performance | 65.3 TFLOPS" (dual-issue), "Tensor Performance |
    # 1044.4 TFLOPS" ("Effective FP8 teraFLOPS (TFLOPS) using sparsity"): memory only.
    (r"RTX 5000 ADA GENERATION", _card("RTX 5000 Ada", {}, 576)),
    # NVIDIA RTX PRO 6000 Blackwell Workstation Edition datasheet
    # (https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/rtx-pro-6000-blackwell-workstation-edition/workstation-blackwell-rtx-pro-6000-workstation-edition-nvidia-us-3519208-web.pdf):
    # "Single-precision performance 125 TFLOPS", "Memory bandwidth 1792 GB/s" ("4000 AI TOPS": FP4, sparse).
    # The Max-Q Workstation (300 W) and Server Editions are other boards, without a sourced figure here.
    (
        r"RTX PRO 6000 BLACKWELL WORKSTATION EDITION",
        # Healthy cards measured 74-77 of its 125 fp32 TFLOPS (dual-issue peak): memory only.
        _card("RTX PRO 6000 Blackwell Workstation", {}, 1792),
    ),
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


@record(frozen=True)
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


@record(frozen=True)
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
