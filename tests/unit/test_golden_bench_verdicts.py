"""Every bench judgement's whole result for fixed measurements, against a golden file
(tests/fixtures/golden/bench.json, written back with DLTUNE_UPDATE_GOLDEN=1 and reviewed in the
diff): healthy and degraded H100s and A100s, MIG slices, unknown cards, unreliable repeats, training
runs input-bound or not, power with and without NVML, all-reduce and scaling on one node and several,
failed torchrun runs, the bench gate, the replay for silent data corruption. The judges are pure: the
numbers stand in for what PyTorch and NVML measured (no GPU here)."""

from __future__ import annotations

from typing import Any

from dltune.bench.judge import (
    Bandwidth,
    Matmul,
    PowerReading,
    SdcRun,
    TorchCuda,
    Training,
    bench_gate,
    judge_allreduce,
    judge_bandwidth,
    judge_compile,
    judge_data_parallel,
    judge_determinism,
    judge_determinism_refused,
    judge_gain,
    judge_host_transfers,
    judge_input_gap,
    judge_matmul,
    judge_multi_node,
    judge_power,
    judge_sdc,
    judge_sweep,
    judge_threads,
    judge_torchrun_failed,
    judge_training,
    stderr_excerpt,
    torch_gpu_gate,
)
from dltune.model import Result, Status
from tests.unit.test_golden_verdicts import _compare

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def _training(**changes: Any) -> Training:
    run = {
        "device": "cuda:0",
        "model": "resnet50",
        "data": "synthetic",
        "batch": 256,
        "steps": 30,
        "images_per_s": 2900.0,
        "data_ms": 1.0,
        "forward_ms": 30.0,
        "backward_ms": 55.0,
        "max_memory_mb": 21000.0,
    }
    run.update(changes)
    return Training(**run)  # type: ignore[arg-type]


def _cases() -> dict[str, list[Result] | Result | str | None]:
    matmul = [
        Matmul("cuda:0", H100, "bf16", 8192, 798.0, 0.01, 707.0),  # the real H100's burst and second
        Matmul("cuda:1", H100, "bf16", 8192, 640.0, 0.01),  # below what healthy cards reach
        Matmul("cuda:9", H100, "bf16", 8192, 790.0, 0.01, 480.0),  # cannot hold its clocks
        Matmul("cuda:2", H100, "bf16", 8192, 420.0, 0.02),  # far below
        Matmul("cuda:3", H100, "bf16", 8192, 1200.0, 0.01),  # above the peak: unreliable
        Matmul("cuda:4", H100, "bf16", 8192, 700.0, 0.4),  # repeats disagree
        Matmul("cuda:5", A100, "fp32", 8192, 18.0),
        Matmul("cuda:6", "MIG 3g.40gb", "bf16", 8192, 200.0),
        Matmul("cuda:7", "MIG 3g.40gb", "bf16", 8192, 120.0),  # slower than its twin slice
        Matmul("cuda:8", "Some Future GPU", "bf16", 8192, 100.0),
        Matmul("cpu", "cpu", "fp32", 2048, 0.3),
    ]
    bandwidth = [
        Bandwidth("cuda:0", H100, "device copy", 2900.0, 0.01),
        Bandwidth("cuda:1", H100, "device copy", 2300.0, 0.01),
        Bandwidth("cuda:2", H100, "device copy", 1500.0, 0.01),
        Bandwidth("cuda:3", A100, "device copy", 1800.0, 0.3),
        Bandwidth("cuda:4", "Some Future GPU", "device copy", 900.0),
    ]
    transfers = [
        Bandwidth("cuda:0", H100, "h2d pinned", 52.0),
        Bandwidth("cuda:0", H100, "d2h pinned", 48.0),
        Bandwidth("cuda:1", H100, "h2d pinned", 11.0),
        Bandwidth("cuda:1", H100, "h2d pageable", 9.0),
    ]
    power = PowerReading(peak_w=650.0, peak_source="instantaneous", joules=4100.0, window_s=8.0)
    numbers = {
        "bytes": 256 << 20,
        "seconds": 0.004,
        "images_per_s_total": 11000.0,
        "baseline_images_per_s": 2900.0,
        "seconds_per_rank": [0.004, 0.0041, 0.0039, 0.012],
    }
    multi = {**numbers, "world": 16, "hosts": ["node1", "node2"], "images_per_s_total": 40000.0}
    failed = Result("bench.allreduce", Status.ERROR, "torchrun failed", evidence={"stderr": "NCCL error"})
    critical = Result("gpu.ecc", Status.FAIL, "1 uncorrected ECC error", critical=True)
    sdc_key = {
        "model": "sdc-mlp-v1 1024-1024-1024-16 GELU MLP, batch 4096, MSE, SGD lr 0.01 momentum 0.9, float32",
        "steps": 3,
        "precision": "float32",
        "torch": "2.6.0+cu124",
        "cuda": "12.4",
        "cublas": "12.4.5.8",
        "driver": "550.54.15",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    }
    good = tuple(f"{step}" * 64 for step in "0123")
    odd = (*good[:2], "e" * 64, "f" * 64)
    return {
        "matmul": judge_matmul(matmul),
        "bandwidth": judge_bandwidth(bandwidth),
        "host_transfers": judge_host_transfers(transfers),
        "host_transfers_cpu": judge_host_transfers(None),
        "training": judge_training(_training()),
        "training_input_bound": judge_training(_training(data_ms=60.0, images_per_s=1500.0)),
        "training_cpu": judge_training(_training(device="cpu", images_per_s=40.0, max_memory_mb=None)),
        "power": judge_power(_training(power=power)),
        "power_skipped": judge_power(_training(power=PowerReading(skipped="NVML: Not Supported"))),
        "power_cpu": judge_power(_training(device="cpu")),
        "input_gap": judge_input_gap(
            _training(), _training(data="real", images_per_s=2700.0, data_ms=3.0), 8
        ),
        "input_gap_starved": judge_input_gap(
            _training(), _training(data="real", images_per_s=900.0, data_ms=80.0), 2
        ),
        "input_gap_none": judge_input_gap(_training(), None),
        "sweep": judge_sweep({"channels_last": 3100.0, "default": 2900.0, "amp": 3500.0}, "default"),
        "sweep_default_best": judge_sweep({"channels_last": 2800.0, "default": 2900.0}, "default"),
        "determinism": judge_determinism(True, True, ":4096:8", "cuda:0"),
        "determinism_differs": judge_determinism(False, True, None, "cuda:0"),
        "determinism_blind": judge_determinism(True, False, ":4096:8", "cuda:0"),
        "determinism_refused_cublas": judge_determinism_refused(
            "Deterministic behavior was enabled ... CUBLAS_WORKSPACE_CONFIG=:4096:8", None, "cuda:0"
        ),
        "determinism_refused_other": judge_determinism_refused(
            "adaptive_avg_pool2d_backward_cuda", ":4096:8", "cuda:0"
        ),
        "sdc": judge_sdc([SdcRun(f"cuda:{i}", H100, good) for i in range(4)], sdc_key),
        "sdc_one_differs": judge_sdc(
            [SdcRun(f"cuda:{i}", H100, odd if i == 2 else good) for i in range(4)],
            sdc_key,
            "DLTUNE_SDC_FLIP=cuda:2:2",
        ),
        "sdc_no_majority": judge_sdc([SdcRun("cuda:0", H100, good), SdcRun("cuda:1", H100, odd)], sdc_key),
        "sdc_refused_cublas": judge_sdc(
            [
                SdcRun("cuda:0", H100, error="... CUBLAS_WORKSPACE_CONFIG=:4096:8 ..."),
                SdcRun("cuda:1", H100, error="... CUBLAS_WORKSPACE_CONFIG=:4096:8 ..."),
            ],
            {**sdc_key, "CUBLAS_WORKSPACE_CONFIG": None},
        ),
        "sdc_one_gpu": judge_sdc([SdcRun("cuda:0", A100, good)], sdc_key),
        "allreduce_4": judge_allreduce(
            4, "nccl", 256 << 20, 0.004, 0.95, per_rank=[0.004, 0.0041, 0.0039, 0.012]
        ),
        "allreduce_poor_scaling": judge_allreduce(8, "nccl", 256 << 20, 0.02, 0.55),
        "allreduce_gloo": judge_allreduce(2, "gloo", 64 << 20, 0.5, None),
        "gain": judge_gain("bench.pinned", "pinned memory", 1000.0, 1150.0),
        "gain_none": judge_gain("bench.pinned", "pinned memory", 0.0, 10.0),
        "threads_ok": judge_threads(64, 8, 8),
        "threads_over": judge_threads(16, 8, 4),
        "gate_no_bench": bench_gate([], {}, True, True),
        "gate_critical": bench_gate([critical], {}, True, False),
        "gate_busy": bench_gate([], {0: [4242], 3: [77]}, True, False),
        "gate_no_torch": bench_gate([], {}, False, False),
        "gate_open": bench_gate([], {}, True, False),
        "gate_torch_cpu_build": torch_gpu_gate(TorchCuda("2.5.1+cpu", None, False), 8, "550.54.15"),
        "gate_torch_driver_too_old": torch_gpu_gate(
            TorchCuda(
                "2.5.1+cu124",
                "12.4",
                False,
                "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040).",
            ),
            8,
            "470.256.02",
        ),
        "gate_torch_hidden": torch_gpu_gate(TorchCuda("2.5.1+cu124", "12.4", False, None, ""), 4, None),
        "gate_torch_no_gpu_here": torch_gpu_gate(TorchCuda("2.5.1+cpu", None, False), 0, None),
        "compile": judge_compile(2900.0, 3400.0, None),
        "compile_slower": judge_compile(2900.0, 2500.0, None),
        "compile_failed": judge_compile(2900.0, None, "torch._dynamo.exc.BackendCompilerFailed: inductor"),
        "torchrun_failed": judge_torchrun_failed(
            "torchrun exited 1", "x" * 5000 + "\nRuntimeError: NCCL error"
        ),
        "stderr_excerpt": stderr_excerpt(
            "line\n" * 400 + "Traceback (most recent call last):\nValueError: bad"
        ),
        "data_parallel": judge_data_parallel(["cuda:0", "cuda:1", "cuda:2", "cuda:3"], numbers, None, 2900.0),
        "data_parallel_cpu": judge_data_parallel(
            ["cpu"], {**numbers, "images_per_s_total": 70.0}, None, 40.0
        ),
        "data_parallel_one_gpu": judge_data_parallel(["cuda:0"], None, None, 2900.0),
        "data_parallel_failed": judge_data_parallel(["cuda:0", "cuda:1"], None, failed, 2900.0),
        "data_parallel_no_numbers": judge_data_parallel(["cuda:0", "cuda:1"], None, None, 2900.0),
        "multi_node": judge_multi_node(["node1", "node2"], 0, "nccl", multi, None),
        "multi_node_failed": judge_multi_node(["node1", "node2"], 1, "nccl", None, failed),
        "multi_node_no_numbers": judge_multi_node(["node1", "node2"], 0, "nccl", None, None),
    }


def _shown(value: list[Result] | Result | str | None) -> Any:
    if isinstance(value, list):
        return [r.to_dict() for r in value]
    if isinstance(value, Result):
        return value.to_dict()
    return value


def test_every_bench_judgement_of_fixed_measurements() -> None:
    _compare("bench", [{name: _shown(value)} for name, value in _cases().items()])
