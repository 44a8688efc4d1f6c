"""Published dense peak figures of common datacenter GPUs (no structured sparsity), keyed by the exact
device names NVML and torch report (tests/fixtures/real/gpu_names holds the names as published in
`nvidia-smi -L`, `nvidia-smi -q` and torch logs). TFLOPS per dtype, memory bandwidth in GB/s.

Peaks: NVIDIA's V100, V100S, A100, H100, H200, GH200 and L40S datasheets (dense = the datasheet's
"with sparsity" figure halved).

What a healthy card reaches is lower than its datasheet: ``achievable`` is the fraction of the dense
bf16 peak that a best-shape matmul search (mamf-finder, github.com/mag-/gpu_benchmark and Stas
Bekman's ml-engineering "maximum achievable FLOPS") measured on healthy cards: H100 SXM 821 of 989.5
TFLOPS (83%), A100 SXM 268 of 312 (86%), A100 PCIe 256 (82%), H100 PCIe 500 of 756 (66%), H100 NVL
489 of 835 (58%), GH200 853 of 989.5 (86%), L40S 252 of 362 (70%). Models without a published
measurement get DEFAULT_ACHIEVABLE, and say so.

A MIG slice ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") has a fraction of the GPU's engines: it gets no spec,
and is compared with the node's other slices of the same profile only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEFAULT_ACHIEVABLE = 0.75
MAMF = "best-shape matmul measured on a healthy card (mamf-finder)"
NO_MEASUREMENT = "no published measurement for this model: a conservative 75% of the peak"


@dataclass(frozen=True)
class Spec:
    model: str
    tflops: dict[str, float] = field(default_factory=dict)  # dtype -> dense peak
    memory_gb_s: float | None = None
    achievable: float = DEFAULT_ACHIEVABLE  # fraction of the dense peak a healthy card reaches
    achievable_source: str = NO_MEASUREMENT

    def achievable_tflops(self, dtype: str) -> float | None:
        peak = self.tflops.get(dtype)
        return peak * self.achievable if peak else None


def _hopper(model: str, bf16: float, fp32: float, memory: float, achievable: float, source: str) -> Spec:
    return Spec(
        model, {"bf16": bf16, "fp16": bf16, "tf32": bf16 / 2, "fp32": fp32}, memory, achievable, source
    )


def _ampere(model: str, memory: float, achievable: float) -> Spec:
    return Spec(model, {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, memory, achievable, MAMF)


H100_SXM = _hopper("H100 SXM", 989.5, 66.9, 3350, 0.83, MAMF)
# The first pattern that matches the upper-cased device name wins: the more specific come first
# ("GH200" before "H200", "H100 PCIE" before "H100", "V100S" before "V100").
SPECS: tuple[tuple[str, Spec], ...] = (
    (r"GH200 144G", _hopper("GH200 144GB HBM3e", 989.5, 67.0, 4900, 0.86, MAMF)),
    (r"GH200", _hopper("GH200 96GB HBM3", 989.5, 67.0, 4000, 0.86, MAMF)),
    (r"H200 NVL", _hopper("H200 NVL", 835.5, 60.0, 4800, DEFAULT_ACHIEVABLE, NO_MEASUREMENT)),
    (
        r"H200",
        _hopper("H200 SXM", 989.5, 66.9, 4800, 0.83, "as H100 SXM (same GH100 compute and clocks): " + MAMF),
    ),
    (r"H100 PCIE", _hopper("H100 PCIe", 756.0, 51.2, 2000, 0.66, MAMF)),
    (r"H100 NVL", _hopper("H100 NVL", 835.5, 60.0, 3900, 0.58, MAMF)),
    (r"H100", H100_SXM),
    (r"A100-SXM4?-80GB", _ampere("A100 80GB SXM", 2039, 0.86)),
    (r"A100 80GB PCIE|A100-PCIE-80GB", _ampere("A100 80GB PCIe", 1935, 0.82)),
    (r"A100-PCIE-40GB|A100 PCIE", _ampere("A100 40GB PCIe", 1555, 0.82)),
    (r"A100-SXM4?-40GB|A100", _ampere("A100 40GB SXM", 1555, 0.86)),
    (r"L40S", Spec("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}, 864, 0.70, MAMF)),
    # Volta has no bf16 and no tf32 Tensor Core path: fp16 is its Tensor Core dtype.
    (r"V100S", Spec("V100S PCIe", {"fp16": 130.0, "fp32": 16.4}, 1134)),
    (r"V100-PCIE", Spec("V100 PCIe", {"fp16": 112.0, "fp32": 14.0}, 900)),
    (r"V100-SXM", Spec("V100 SXM2", {"fp16": 125.0, "fp32": 15.7}, 900)),
)
_COMPILED = tuple((re.compile(pattern), spec) for pattern, spec in SPECS)
MIG_NAME = re.compile(r"\bMIG\s+[0-9]+g\.[0-9]+gb", re.IGNORECASE)


def is_mig(device_name: str) -> bool:
    return MIG_NAME.search(device_name) is not None


def spec_for(device_name: str) -> Spec | None:
    """The card's spec, or None for an unknown card or a MIG slice (no whole-GPU figure applies)."""
    if is_mig(device_name):
        return None
    upper = device_name.upper()
    for pattern, spec in _COMPILED:
        if pattern.search(upper):
            return spec
    return None
