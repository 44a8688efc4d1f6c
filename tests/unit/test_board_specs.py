"""The boards added to the spec table (issue 44): each NVML name maps to its own model, its figures are
the ones its source prints (dense = the "with sparsity" figure halved), models without a published
achievable-share measurement keep the default, and near misses (a MIG slice, a vGPU profile, a sibling
board) get no spec of it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dltune.bench.specs import DEFAULT_ACHIEVABLE, NO_MEASUREMENT, spec_for


@dataclass(frozen=True)
class Board:
    model: str
    names: tuple[str, ...]  # as NVML, nvidia-smi and torch print them
    tflops: dict[str, float]  # dense, per dtype
    memory_gb_s: float
    sparse_bf16: float | None = None  # the source's "with sparsity" bf16 figure, where it prints one
    achievable: float = DEFAULT_ACHIEVABLE  # the share of the peak a healthy card reaches
    healthy_memory_gb_s: float | None = None  # DCGM's measured figure (diag-skus.yaml.in)


# The figures as each source prints them (the source is named beside the entry in dltune/bench/specs.py).
BOARDS = (
    # NVIDIA T4 datasheet: 320 GB/s; its peaks (fp16 65, fp32 8.1) are left out: a 70 W card does not
    # hold them, and no measured share is published (a default share would warn on healthy cards).
    Board("T4", ("Tesla T4",), {}, 320, healthy_memory_gb_s=244),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*, 600 GB/s.
    Board("A10", ("NVIDIA A10",), {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}, 600, 250.0),
    # No NVIDIA datasheet; Baseten: "share the same ... memory bandwidth of 600 gigabytes per second".
    Board("A10G", ("NVIDIA A10G",), {}, 600, healthy_memory_gb_s=484),
    # NVIDIA A40 datasheet: FP32 37.4, TF32 74.8 | 149.6*, BF16/FP16 149.7 | 299.4*, 696 GB/s.
    Board(
        "A40",
        ("NVIDIA A40",),
        {"bf16": 149.7, "fp16": 149.7, "tf32": 74.8, "fp32": 37.4},
        696,
        299.4,
        healthy_memory_gb_s=565,
    ),
    # GA102 whitepaper: "Peak BF16 Tensor TFLOPS with FP32 Accumulate 154.8/309.6", 768 GB/s, FP32 38.7.
    Board(
        "RTX A6000",
        ("NVIDIA RTX A6000",),
        {"bf16": 154.8, "fp16": 154.8, "tf32": 77.4, "fp32": 38.7},
        768,
        309.6,
        healthy_memory_gb_s=675,
    ),
    # NVIDIA L4 datasheet (sparsity figures only): TF32 120*, BF16/FP16 242*; FP32 30.3, 300 GB/s.
    # A healthy L4 measured 70.9 bf16 TFLOPS (zzc0721/torch-performance-test-data): 58.6% of the peak.
    Board(
        "L4",
        ("NVIDIA L4",),
        {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
        300,
        242.0,
        0.586,
        265,
    ),
    # NVIDIA L40 datasheet: FP32 90.5, TF32 90.5 | 181*, BF16/FP16 181.05 | 362.1*, 864 GB/s.
    Board("L40", ("NVIDIA L40",), {"bf16": 181.05, "fp16": 181.05, "tf32": 90.5, "fp32": 90.5}, 864, 362.1),
    # RTX 6000 Ada datasheet: 960 GB/s (its 91.1 fp32 TFLOPS is a dual-issue peak no matmul reaches,
    # its Tensor figure FP8 sparse): memory only.
    Board("RTX 6000 Ada", ("NVIDIA RTX 6000 Ada Generation",), {}, 960),
    # RTX PRO 6000 Blackwell Workstation Edition datasheet: 1792 GB/s (healthy cards measured 74-77 of
    # its 125 fp32 TFLOPS): memory only.
    Board(
        "RTX PRO 6000 Blackwell Workstation", ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition",), {}, 1792
    ),
    # NVIDIA H800 datasheet: 1979 TFLOPS BF16/FP16 (sparsity), 3.35 TB/s; tf32 at half of bf16.
    # The same GH100 as H100 SXM: its measured share; DCGM measures 2560 GB/s.
    Board(
        "H800 SXM",
        ("NVIDIA H800",),
        {"bf16": 989.5, "fp16": 989.5, "tf32": 494.75},
        3350,
        1979.0,
        0.803,
        2560,
    ),
    # The A100 80GB SXM's figures (secondary table: LLM-Viewer, 2039 GB/s, FP16 312 TFLOPS).
    Board(
        "A800 80GB SXM",
        ("NVIDIA A800-SXM4-80GB",),
        {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
        2039,
        achievable=0.869,
        healthy_memory_gb_s=1566,
    ),
    # The H100 PCIe's figures (secondary tables: "2.0 TB/s", "BF16 Tensor Core 756 TFLOPS"; "peak F8: 3026
    # TFLOPS" with sparsity); tf32 at half of bf16. The same GH100 PCIe board as the H100 PCIe: its measured
    # share; DCGM measures 1646 GB/s.
    Board(
        "H800 PCIe",
        ("NVIDIA H800 PCIe",),
        {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0},
        2000,
        achievable=0.66,
        healthy_memory_gb_s=1646,
    ),
    # Arthur Chiao's datasheet quick reference: "4.0TB/s", FP32 44, TF32 74, BF16 "148 | 148"; DCGM 2010 GB/s.
    Board(
        "H20",
        ("NVIDIA H20",),
        {"bf16": 148.0, "fp16": 148.0, "tf32": 74.0, "fp32": 44.0},
        4000,
        healthy_memory_gb_s=2010,
    ),
    # The same: "933GB/s", FP32 10.3, BF16/FP16 165 (dense); tf32 at half of bf16; DCGM 780 GB/s.
    Board(
        "A30",
        ("NVIDIA A30",),
        {"bf16": 165.0, "fp16": 165.0, "tf32": 82.5, "fp32": 10.3},
        933,
        healthy_memory_gb_s=780,
    ),
    # The same: "864GB/s", FP32 59.8, TF32 59.8, BF16 "119 | 119"; DCGM 655 GB/s.
    Board(
        "L20",
        ("NVIDIA L20",),
        {"bf16": 119.0, "fp16": 119.0, "tf32": 59.8, "fp32": 59.8},
        864,
        healthy_memory_gb_s=655,
    ),
    # The same: "300 GB/s" (its 95.6 bf16 TFLOPS left out, as the L4's 58.6% share shows for such cards);
    # DCGM 254 GB/s.
    Board("L2", ("NVIDIA L2",), {}, 300, healthy_memory_gb_s=254),
    # RTX 5000 Ada datasheet: "576GB/s" (65.3 fp32 TFLOPS dual-issue, Tensor figure FP8 sparse): memory only.
    Board("RTX 5000 Ada", ("NVIDIA RTX 5000 Ada Generation",), {}, 576),
)


@pytest.mark.parametrize("board", BOARDS, ids=lambda board: board.model)
def test_each_new_board_holds_the_figures_its_source_prints(board: Board) -> None:
    for name in board.names:
        spec = spec_for(name)
        assert spec is not None, name
        assert (spec.model, spec.tflops, spec.memory_gb_s) == (board.model, board.tflops, board.memory_gb_s)
    if board.sparse_bf16 is not None:
        assert board.tflops["bf16"] == pytest.approx(board.sparse_bf16 / 2, abs=0.05)


@pytest.mark.parametrize("board", BOARDS, ids=lambda board: board.model)
def test_each_board_reaches_its_measured_share_or_the_default_and_names_which(board: Board) -> None:
    spec = spec_for(board.names[0])
    assert spec is not None
    assert spec.achievable == board.achievable
    assert (spec.achievable_source == NO_MEASUREMENT) is (board.achievable == DEFAULT_ACHIEVABLE)
    assert spec.memory_healthy_gb_s == board.healthy_memory_gb_s


@pytest.mark.parametrize(
    ("name", "model"),
    [
        # NVIDIA/open-gpu-kernel-modules README, 570.124.04-570.1xx: device 2941 named "HGX GB200".
        ("NVIDIA HGX GB200", "GB200"),
        ("HGX GB200", "GB200"),
        ("NVIDIA GB200", "GB200"),
        # Spacing and case as other tools print them.
        ("NVIDIA  RTX 6000 Ada Generation", "RTX 6000 Ada"),
        ("nvidia l4", "L4"),
        ("NVIDIA T4", "T4"),  # the vendor word dropped, as for "Tesla"
        # Siblings that keep their own figures.
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        # One digit apart: each its own board (fullmatch, not prefix).
        ("NVIDIA H20", "H20"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H800", "H800 SXM"),
        ("NVIDIA H800 PCIe", "H800 PCIe"),
        ("nvidia h800 pcie", "H800 PCIe"),
        ("NVIDIA L2", "L2"),
        ("NVIDIA L20", "L20"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ],
)
def test_name_variants_map_to_their_own_model(name: str, model: str) -> None:
    spec = spec_for(name)
    assert spec is not None and spec.model == model


@pytest.mark.parametrize(
    "name",
    [
        # MIG slices of the new MIG-capable boards.
        "NVIDIA A800-SXM4-80GB MIG 1g.10gb",
        "NVIDIA H800 MIG 1g.10gb",
        "NVIDIA H800 MIG 1c.7g.80gb",
        "NVIDIA HGX GB200 MIG 1g.24gb",
        "NVIDIA H20 MIG 1g.12gb",
        "NVIDIA H20 MIG 3g.48gb",
        "NVIDIA A30 MIG 1g.6gb",
        "NVIDIA A30 MIG 2g.12gb",
        "NVIDIA A30 MIG 1c.2g.12gb",
        "NVIDIA H800 PCIe MIG 1g.10gb",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition MIG 1g.24gb",
        # vGPU profiles ("NVIDIA L40-48Q": tests/fixtures/real/gpu_names/tgi_3243_l40_48q_vgpu.txt).
        "NVIDIA L40-48Q",
        "NVIDIA A10-4Q",
        "NVIDIA A30-24C",
        "NVIDIA L20-48Q",
        "NVIDIA H20-96C",
        "NVIDIA A40-48Q",
        "GRID T4-16Q",
        "NVIDIA L4-24Q",
        # Sibling boards without a sourced figure (names from the driver's "Product Name" table).
        "NVIDIA A10M",
        "NVIDIA T4G",
        "NVIDIA T400 4GB",
        "NVIDIA H20-3e",
        "NVIDIA H20 NVL16",
        "NVIDIA H800 NVL",
        "NVIDIA A800-SXM4-40GB",
        "NVIDIA A800 80GB PCIe",
        "NVIDIA A800 80GB PCIe LC",
        "NVIDIA A800 40GB Active",
        "NVIDIA RTX A3000 Laptop GPU",
        "NVIDIA RTX 5880 Ada Generation",
        "NVIDIA RTX 5000 Ada Generation Laptop GPU",
        "NVIDIA RTX 5000 Ada Generation Embedded GPU",
        "NVIDIA RTX 4000 Ada Generation",
        "NVIDIA RTX 4500 Ada Generation",
        "NVIDIA GH200 120GB",
        "NVIDIA A16",
        "NVIDIA A2",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "NVIDIA RTX PRO 6000D Blackwell Workstation Edition",
        "NVIDIA RTX 6000D",
        # Truncated as the nvidia-smi table prints it: not the whole name.
        "NVIDIA RTX 6000 Ada Gene...",
    ],
)
def test_near_misses_get_no_spec(name: str) -> None:
    assert spec_for(name) is None
