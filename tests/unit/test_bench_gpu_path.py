"""The bench's GPU path without a GPU: its own logic (which device is current while a timer runs, how
many synchronisations a training step costs, which operations the determinism model uses, what a
node with GPUs but no CUDA in PyTorch gets, in which order data-parallel and the single-GPU
measurements run) checked through small fakes of the torch.cuda calls it makes, or on CPU with the
real PyTorch where the logic is the same. Nothing here needs, or pretends to be, a GPU's numbers."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dltune.bench import judge, measure, run
from dltune.bench.judge import PowerReading, Training
from dltune.bench.measure import BenchError
from dltune.model import Status


class FakeCuda:
    """torch.cuda as far as the measurement functions use it: a current device that
    `torch.cuda.device(...)` sets for its block, and what the timer saw when it ran."""

    def __init__(self, count: int = 8) -> None:
        self.current = 0
        self.count = count
        self.seen_by_timer: list[int] = []
        self.seen_by_burst: list[int] = []

    @contextlib.contextmanager
    def device(self, dev: Any) -> Iterator[None]:
        before, self.current = self.current, dev.index
        try:
            yield
        finally:
            self.current = before

    def current_device(self) -> int:
        return self.current

    def get_device_name(self, dev: Any) -> str:
        return "NVIDIA H100 80GB HBM3"

    def get_device_capability(self, dev: Any) -> tuple[int, int]:
        return (9, 0)

    def synchronize(self, dev: Any = None) -> None:
        pass


class FakeTensor:
    def to(self, *args: Any, **kwargs: Any) -> FakeTensor:
        return self

    def random_(self, *args: Any) -> FakeTensor:
        return self

    def numel(self) -> int:
        return 1 << 20


class FakeTorch:
    float32 = bfloat16 = float16 = uint8 = "dtype"

    def __init__(self) -> None:
        self.cuda = FakeCuda()
        cuda = self.cuda

        class Timer:
            def __init__(self, stmt: str, globals: dict[str, Any]) -> None:
                pass

            def blocked_autorange(self, min_run_time: float) -> Any:
                cuda.seen_by_timer.append(cuda.current)
                return SimpleNamespace(median=1e-3, iqr=1e-5, times=[1e-3] * 5)

        self.utils = SimpleNamespace(benchmark=SimpleNamespace(Timer=Timer))
        self.backends = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)))

    @staticmethod
    def device(name: str) -> Any:
        kind, _, index = name.partition(":")
        return SimpleNamespace(type=kind, index=int(index) if index else None)

    def randn(self, *args: Any, **kwargs: Any) -> FakeTensor:
        return FakeTensor()

    def empty(self, *args: Any, **kwargs: Any) -> FakeTensor:
        return FakeTensor()

    def empty_like(self, other: Any) -> FakeTensor:
        return FakeTensor()

    def mm(self, a: Any, b: Any) -> FakeTensor:
        self.cuda.seen_by_burst.append(self.cuda.current)
        return FakeTensor()


def test_every_timing_runs_with_the_measured_gpu_current() -> None:
    """torch.utils.benchmark synchronises the current device only: timing cuda:3 while cuda:0 is current
    stops the clock before cuda:3's kernels end (inflated TFLOPS and GB/s on every GPU but 0)."""
    torch = FakeTorch()
    measure.matmul(torch, "cuda:3", "bf16", 1024, 0.1)
    measure.copy_bandwidth(torch, "cuda:5", 64, 0.1)
    measure.host_transfers(torch, "cuda:6", 64, 0.1)
    assert torch.cuda.seen_by_timer == [3, 5, 6, 6, 6, 6]
    # The matmul's burst (3 warm-ups, then 3 x 10 products) ran on cuda:3 too.
    assert torch.cuda.seen_by_burst == [3] * (
        measure.BURST_WARMUP + measure.BURST_REPEATS * measure.BURST_PRODUCTS
    )
    assert torch.cuda.current == 0  # restored afterwards


def test_a_node_whose_gpus_pytorch_cannot_see_is_an_error_not_a_cpu_benchmark() -> None:
    """NVML sees GPUs, PyTorch none (CPU-only wheel, driver too old for its CUDA, devices hidden): the
    bench stops and says which, instead of benchmarking the CPU and passing."""
    no_cuda = SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: False),
        version=SimpleNamespace(cuda=None),
        __version__="2.5.1+cpu",
    )
    with pytest.raises(
        BenchError, match=r"NVML sees 8 GPU\(s\) but PyTorch sees no CUDA device.*CPU-only build"
    ):
        measure.select_devices(no_cuda, None, None, nvml_gpus=lambda: 8)
    cuda_build = SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: False),
        version=SimpleNamespace(cuda="12.4"),
        __version__="2.5.1+cu124",
    )
    with pytest.raises(BenchError, match=r"CUDA 12.4\) cannot use this driver"):
        measure.select_devices(cuda_build, None, None, nvml_gpus=lambda: 2)
    # A CPU node (NVML sees nothing), or an explicit --device cpu, still benchmarks the CPU.
    assert measure.select_devices(no_cuda, None, None, nvml_gpus=lambda: 0) == ["cpu"]
    assert measure.select_devices(no_cuda, "cpu", None, nvml_gpus=lambda: 8) == ["cpu"]


def test_the_determinism_model_uses_no_operation_pytorch_says_raises_in_deterministic_mode() -> None:
    """PyTorch's own list (the docstring of torch.use_deterministic_algorithms, "will throw a
    RuntimeError") against every torch function one training step of the model calls, recorded with a
    TorchFunctionMode on CPU. AdaptiveAvgPool2d (backward) and NLLLoss (inside cross_entropy) are on
    that list: a model with either fails on every CUDA node."""
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    doc = torch.use_deterministic_algorithms.__doc__ or ""
    throwing = doc.split("normally-nondeterministic operations will throw a", 1)[1].split("In addition", 1)[0]
    listed = set(re.findall(r"`torch\.(?:nn\.functional\.|nn\.|Tensor\.)?(\w+)`", throwing))
    assert {"AdaptiveAvgPool2d", "NLLLoss", "interpolate"} <= listed, listed

    def snake(name: str) -> str:
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()

    forbidden = {snake(name) for name in listed} | {"cross_entropy", "nll_loss"}
    called: set[str] = set()

    class Record(TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            called.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    model = measure.determinism_model(torch)
    modules = {type(m).__name__ for m in model.modules()}
    assert not modules & listed, modules & listed
    with Record():
        logits = model(torch.randn(4, 3, 32, 32))
        loss = measure.determinism_loss(torch, logits, torch.eye(10)[torch.tensor([1, 2, 3, 4])])
        loss.backward()
    assert called, "the recorder saw nothing"
    assert not {snake(c) for c in called} & forbidden, {snake(c) for c in called} & forbidden


def test_a_training_step_waits_for_the_device_once_per_run_not_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Synchronising three times per step (after the copy, the forward, the backward) drains the GPU's
    queue each time and understates images/s: the measured steps are bracketed by one synchronisation
    each side, whatever their number. cudnn.benchmark is on while the model runs, and restored after."""
    torch = pytest.importorskip("torch")
    waits: list[str] = []
    monkeypatch.setattr(measure, "synchronize", lambda _t, device: waits.append(device))
    seen_benchmark: list[bool] = []

    class Probe(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3 * 8 * 8, 10)

        def forward(self, x: Any) -> Any:
            seen_benchmark.append(torch.backends.cudnn.benchmark)
            return self.layer(x.flatten(1))

    torch.backends.cudnn.benchmark = False
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,)))
    loader = measure.loader_for(torch, dataset, 4, num_workers=0, pin_memory=False)
    result = measure.train(
        torch,
        "cpu",
        "probe",
        batch=4,
        steps=9,
        warmup=2,
        image_size=8,
        model=Probe(),
        loader=loader,
        amp=False,
    )
    assert len(waits) == 2, waits
    assert seen_benchmark and all(seen_benchmark)
    assert torch.backends.cudnn.benchmark is False
    assert result.images_per_s > 0 and result.data_ms >= 0 and result.forward_ms > 0


def test_the_generated_dataset_covers_the_default_gpu_run(tmp_path: Path) -> None:
    """A plain `dltune bench` on a GPU trains resnet50 with batch 64 for 5+30 steps: the generated sample
    must make more than one batch (48 images once did) and cover every step without a DataLoader
    restart inside the measurement."""
    pytest.importorskip("torchvision")
    size = run.Options().sized(on_cpu=False)
    assert size["batch"] == 64
    count = run.sample_image_count(size)
    root, _described = run._dataset_dir(None, tmp_path, count)
    dataset = measure.image_folder(str(root), 32)
    assert len(dataset) >= size["batch"] * (size["warmup"] + size["steps"])
    quick = run.Options(quick=True).sized(on_cpu=False)
    assert run.sample_image_count(quick) >= quick["batch"] * (quick["warmup"] + quick["steps"])


class Recorder:
    """Stands in for the measurement functions (the bench's order of work is under test, not PyTorch)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str, value: Any) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return value(*args, **kwargs) if callable(value) else value

        return record


def _training(device: str, data: str = "synthetic") -> Training:
    return Training(device, "resnet50", data, 64, 30, 1000.0, 1.0, 20.0, 40.0, power=PowerReading())


def _gpu_harness(monkeypatch: pytest.MonkeyPatch, recorder: Recorder, devices: list[str]) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(measure, "select_devices", lambda *_a, **_k: devices)
    monkeypatch.setattr(measure, "matmul_dtypes", lambda *_a: ["bf16"])
    monkeypatch.setattr(
        measure, "matmul", recorder("matmul", lambda _t, d, dt, n, _r: judge.Matmul(d, "x", dt, n, 1.0))
    )
    monkeypatch.setattr(
        measure,
        "copy_bandwidth",
        recorder("copy", lambda _t, d, *_a: judge.Bandwidth(d, "x", "device copy", 1.0)),
    )
    monkeypatch.setattr(measure, "host_transfers", recorder("h2d", []))
    monkeypatch.setattr(measure, "pcie_link", recorder("pcie", judge.PcieLink(5, 16, 5, 16)))
    monkeypatch.setattr(
        measure, "pair_copy", recorder("pair", lambda _t, s, d, _mb: judge.PairCopy(s, d, "x", 100.0, True))
    )
    monkeypatch.setattr(
        measure,
        "train",
        recorder("train", lambda _t, d, _m, **kw: _training(d, "real" if kw.get("loader") else "synthetic")),
    )
    monkeypatch.setattr(measure, "loader_for", recorder("loader", None))
    monkeypatch.setattr(measure, "loader_rate", recorder("loader_rate", 100.0))
    monkeypatch.setattr(
        measure, "determinism_losses", recorder("determinism", lambda *_a, **k: [1.0 + k["perturb"]])
    )
    monkeypatch.setattr(measure, "device_name", lambda *_a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(measure, "nvml_uuid", lambda _t, d: f"GPU-uuid-of-{d}")
    monkeypatch.setattr(measure, "sdc_replay", recorder("sdc", lambda *_a, **_k: ["s0", "s1"]))
    monkeypatch.setattr(measure, "sdc_key", lambda *_a: {"model": "m"})
    monkeypatch.setattr(measure, "image_folder", lambda *_a: list(range(5000)))
    assert torch is not None


def test_data_parallel_runs_before_this_process_touches_a_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The bench process would otherwise hold a CUDA context and its allocator cache on the GPUs its
    torchrun workers train on. The workers also measure their own single-GPU baseline for scaling."""
    recorder = Recorder()
    _gpu_harness(monkeypatch, recorder, ["cuda:0", "cuda:1"])
    launched: list[dict[str, Any]] = []

    def fake_torchrun(placement: list[str], backend: str, size: dict[str, Any], **kw: Any) -> Any:
        recorder.calls.append("torchrun")
        launched.append({"backend": backend, **kw})
        numbers = {
            "world": 2,
            "bytes": 512 << 20,
            "seconds": 0.01,
            "seconds_per_rank": [0.009, 0.01],
            "images_per_s_total": 1800.0,
            "baseline_images_per_s": 1000.0,
        }
        return numbers, None

    monkeypatch.setattr(run, "_torchrun", fake_torchrun)
    results = run.run_bench(run.Options(data=tmp_path, dataloader_sweep=False))
    assert recorder.calls[0] == "torchrun", recorder.calls
    # The replay last, once per GPU under test, after every measurement.
    assert recorder.calls[-2:] == ["sdc", "sdc"], recorder.calls
    (sdc,) = [r for r in results if r.id == "bench.sdc"]
    assert sdc.status is Status.PASS and set(sdc.evidence["devices"]) == {"cuda:0", "cuda:1"}
    # Each GPU's own results name it by NVML UUID (the audit's name for it, how impact prices a finding).
    matmuls = [r for r in results if r.id == "bench.matmul"]
    assert {(r.subject, r.evidence.get("uuid")) for r in matmuls} == {
        ("cuda:0:bf16", "GPU-uuid-of-cuda:0"),
        ("cuda:1:bf16", "GPU-uuid-of-cuda:1"),
    }
    assert launched[0]["baseline"] is True and launched[0]["backend"] == "nccl"
    scaling = next(r for r in results if r.id == "bench.scaling")
    assert scaling.metrics["efficiency"] == pytest.approx(1800 / (2 * 1000))
    # Both ordered pairs of the two GPUs, judged in one result.
    assert recorder.calls.count("pair") == 2
    (pairs,) = [r for r in results if r.id == "bench.gpu_pairs"]
    assert pairs.status is Status.PASS and set(pairs.evidence["gb_s"]) == {
        "cuda:0 -> cuda:1",
        "cuda:1 -> cuda:0",
    }


def test_a_data_directory_too_small_for_a_batch_stops_before_any_measurement(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recorder = Recorder()
    _gpu_harness(monkeypatch, recorder, ["cuda:0"])
    monkeypatch.setattr(measure, "image_folder", lambda *_a: [0, 1, 2])
    (tmp_path / "cats").mkdir()
    with pytest.raises(BenchError, match="3 images, fewer than one batch"):
        run.run_bench(run.Options(data=tmp_path))
    assert recorder.calls == []


def test_nccl_all_reduce_uses_messages_that_reach_bus_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 MB all-reduces measure latency and 256 MB is short of an H100 node's plateau (nccl-tests #212):
    NCCL asks for 8 GB messages (each worker caps them at its card's memory: test_allreduce_judge)."""
    argv_seen: list[list[str]] = []

    class Stop(Exception):
        pass

    def fake_popen(argv: list[str], **_kw: Any) -> Any:
        argv_seen.append(argv)
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    size = run.Options().sized(on_cpu=False)
    with pytest.raises(Stop):
        run._torchrun(["--standalone"], "nccl", size, baseline=True, env={})
    argv = argv_seen[0]
    assert argv[argv.index("--megabytes") + 1] == "8192"


def test_power_is_skipped_with_its_reason_never_a_zero_pass() -> None:
    """A short run's energy, or a GPU NVML refuses: skip with NVML's reason, not "0 W, 0 J" as a pass."""
    refused = _training("cuda:0")
    refused.power.skipped = "NVML refused this process the GPU (Insufficient Permissions)"  # type: ignore[union-attr]
    assert judge.judge_power(refused).status is Status.SKIP
    assert "Insufficient Permissions" in judge.judge_power(refused).summary
    short = Training(
        "cuda:0",
        "resnet50",
        "synthetic",
        64,
        5,
        1000.0,
        1,
        1,
        1,
        peak_power_w=650.0,
        power=PowerReading(peak_w=650.0, peak_source="instantaneous", window_s=0.4, skipped="under the 2 s"),
    )
    partial = judge.judge_power(short)
    assert partial.status is Status.PASS and "650 W (instantaneous)" in partial.summary
    assert "energy not measured" in partial.summary and "joules_per_image" not in partial.metrics
    full = Training(
        "cuda:0",
        "resnet50",
        "synthetic",
        64,
        30,
        1000.0,
        1,
        1,
        1,
        joules_per_image=0.5,
        power=PowerReading(peak_w=690.0, peak_source="instantaneous", joules=960.0, window_s=1.9 + 0.1),
    )
    assert judge.judge_power(full).metrics["joules_per_image"] == 0.5
    on_cpu = judge.judge_power(Training("cpu", "resnet18", "synthetic", 8, 5, 1, 1, 1, 1))
    assert on_cpu.status is Status.SKIP and "no GPU" in on_cpu.summary
