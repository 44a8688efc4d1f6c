"""Published dense peak figures of common datacenter GPUs (no structured sparsity), keyed by the
device name NVML and torch report. TFLOPS per dtype, memory bandwidth in GB/s.
Sources: NVIDIA's V100, A100, H100, H200 and L40S datasheets."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spec:
    model: str
    tflops: dict[str, float] = field(default_factory=dict)  # dtype -> dense peak
    memory_gb_s: float | None = None

    def scaled(self, factor: float) -> Spec:
        """A card `factor` times as fast (tests use it for a synthetic slow or fast GPU)."""
        return Spec(
            self.model,
            {k: v * factor for k, v in self.tflops.items()},
            self.memory_gb_s * factor if self.memory_gb_s else None,
        )


# Order matters: the first pattern contained in the device name wins (more specific first).
SPECS: tuple[tuple[str, Spec], ...] = (
    ("H200", Spec("H200 SXM", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.7, "fp32": 66.9}, 4800)),
    ("H100 PCIE", Spec("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}, 2000)),
    ("H100 NVL", Spec("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}, 3900)),
    ("H100", Spec("H100 SXM", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.7, "fp32": 66.9}, 3350)),
    (
        "A100-SXM4-80GB",
        Spec("A100 80GB SXM", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, 2039),
    ),
    (
        "A100 80GB PCIE",
        Spec("A100 80GB PCIe", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, 1935),
    ),
    (
        "A100-PCIE-80GB",
        Spec("A100 80GB PCIe", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, 1935),
    ),
    ("A100", Spec("A100 40GB", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}, 1555)),
    ("L40S", Spec("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}, 864)),
    # V100 has no bf16 and no tf32 Tensor Core path: fp16 is its Tensor Core dtype.
    ("V100", Spec("V100 SXM2", {"fp16": 125.0, "fp32": 15.7}, 900)),
)


def spec_for(device_name: str) -> Spec | None:
    upper = device_name.upper()
    for pattern, spec in SPECS:
        if pattern in upper:
            return spec
    return None
