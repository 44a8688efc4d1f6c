"""Measurements with PyTorch (imported by the caller, only when `dltune bench` runs). Each function
returns plain numbers or the dataclasses of ``judge``; none of them judges."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

from dltune.bench.judge import Bandwidth, Matmul, Training

DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class BenchError(Exception):
    """The benchmark cannot run as asked (a usage problem, not a finding about the node)."""


def select_devices(torch: Any, device: str | None, gpus: list[int] | None) -> list[str]:
    if device == "cpu" or (device is None and not torch.cuda.is_available()):
        return ["cpu"]
    if not torch.cuda.is_available():
        raise BenchError("--device cuda: no CUDA device is visible to PyTorch")
    count = torch.cuda.device_count()
    wanted = gpus if gpus else list(range(count))
    bad = [g for g in wanted if g < 0 or g >= count]
    if bad:
        raise BenchError(f"--gpus {bad}: this node has GPUs 0..{count - 1}")
    return [f"cuda:{i}" for i in wanted]


def device_name(torch: Any, device: str) -> str:
    if device == "cpu":
        return platform.processor() or platform.machine() or "cpu"
    return str(torch.cuda.get_device_name(torch.device(device)))


def matmul_dtypes(torch: Any, device: str) -> list[str]:
    if device == "cpu":
        return ["fp32", "bf16"]
    major, _ = torch.cuda.get_device_capability(torch.device(device))
    # Ampere and later have bf16 and tf32 Tensor Cores; Volta/Turing only fp16.
    return ["bf16", "fp16", "tf32", "fp32"] if major >= 8 else ["fp16", "fp32"]


def synchronize(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(torch.device(device))


def matmul(torch: Any, device: str, dtype: str, n: int, min_run_time: float) -> Matmul:
    from torch.utils import benchmark

    n = max(8, n - n % 8)  # Tensor Cores want multiples of 8
    torch_dtype = getattr(torch, DTYPES[dtype])
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
    b = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
    timer = benchmark.Timer(stmt="torch.mm(a, b)", globals={"torch": torch, "a": a, "b": b})
    measured = timer.blocked_autorange(min_run_time=min_run_time)
    seconds = measured.median
    return Matmul(
        device, device_name(torch, device), dtype, n, 2 * n**3 / seconds / 1e12, spread_of(measured)
    )


def spread_of(measured: Any) -> float | None:
    """Interquartile range over median of a torch.utils.benchmark Measurement (None with one repeat)."""
    times = list(getattr(measured, "times", []))
    if len(times) < 4 or not measured.median:
        return None
    return float(measured.iqr / measured.median)


def copy_bandwidth(torch: Any, device: str, megabytes: int, min_run_time: float) -> Bandwidth:
    from torch.utils import benchmark

    src = torch.empty(megabytes << 20, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    timer = benchmark.Timer(stmt="dst.copy_(src)", globals={"src": src, "dst": dst})
    measured = timer.blocked_autorange(min_run_time=min_run_time)
    # A copy reads every byte once and writes it once.
    return Bandwidth(
        device,
        device_name(torch, device),
        "device copy",
        2 * src.numel() / measured.median / 1e9,
        spread_of(measured),
    )


def host_transfers(torch: Any, device: str, megabytes: int, min_run_time: float) -> list[Bandwidth]:
    from torch.utils import benchmark

    gpu = torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
    found = []
    for pinned in (True, False):
        host = torch.empty(megabytes << 20, dtype=torch.uint8, pin_memory=pinned)
        label = "pinned" if pinned else "pageable"
        for kind, stmt in (("h2d", "gpu.copy_(host)"), ("d2h", "host.copy_(gpu)")):
            timer = benchmark.Timer(stmt=stmt, globals={"gpu": gpu, "host": host})
            seconds = timer.blocked_autorange(min_run_time=min_run_time).median
            found.append(
                Bandwidth(device, device_name(torch, device), f"{kind} {label}", host.numel() / seconds / 1e9)
            )
    return found


class PowerSampler:
    """Peak power and energy of one GPU from NVML, sampled every 50 ms in a thread."""

    def __init__(self, index: int) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.peak_w = 0.0
        self.joules = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.05):
            watts = self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000
            now = time.monotonic()
            self.peak_w = max(self.peak_w, watts)
            self.joules += watts * (now - last)
            last = now

    def __enter__(self) -> PowerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._nvml.nvmlShutdown()


def autocast_dtype(torch: Any, device: str) -> Any:
    if device == "cpu":
        return torch.bfloat16
    major, _ = torch.cuda.get_device_capability(torch.device(device))
    return torch.bfloat16 if major >= 8 else torch.float16


def make_model(model_name: str, num_classes: int) -> Any:
    import torchvision

    factory = getattr(torchvision.models, model_name, None)
    if factory is None:
        raise BenchError(f"--model {model_name}: not a torchvision model")
    return factory(weights=None, num_classes=num_classes)


def _batches(loader: Any) -> Iterator[Any]:
    while True:  # a small dataset is read again: epochs are irrelevant to throughput
        yield from loader


def train(
    torch: Any,
    device: str,
    model_name: str,
    *,
    batch: int,
    steps: int,
    warmup: int,
    image_size: int,
    loader: Any = None,
    amp: bool = True,
    channels_last: bool = True,
    compile_model: bool = False,
    model: Any = None,
    num_classes: int = 10,
    wrap: Any = None,
) -> Training:
    """Steps of SGD on synthetic data (one batch made once, on the device) or on a DataLoader.
    Per step: data wait (next batch + copy to the device), forward+loss, backward+optimizer step."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model if model is not None else make_model(model_name, num_classes)
    model = model.to(device=device, memory_format=memory_format).train()
    step_model = wrap(model) if wrap is not None else model  # e.g. DistributedDataParallel
    step_model = torch.compile(step_model) if compile_model else step_model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cast_dtype = autocast_dtype(torch, device)
    scaler = torch.amp.GradScaler(enabled=amp and cast_dtype == torch.float16)
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    if loader is None:
        images = torch.randn(batch, 3, image_size, image_size, device=device).to(memory_format=memory_format)
        labels = torch.randint(0, num_classes, (batch,), device=device)
        source: Iterator[Any] | None = None
    else:
        source = _batches(loader)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    sampler = (
        PowerSampler(torch.device(device).index or 0)
        if device.startswith("cuda")
        else contextlib.nullcontext()
    )
    data_s = forward_s = backward_s = 0.0
    with sampler:
        for step in range(warmup + steps):
            if step == warmup:
                data_s = forward_s = backward_s = 0.0
                if isinstance(sampler, PowerSampler):
                    sampler.joules, sampler.peak_w = 0.0, 0.0
            t0 = time.perf_counter()
            if source is not None:
                images, labels = next(source)
                images = images.to(device, non_blocking=True).to(memory_format=memory_format)
                labels = labels.to(device, non_blocking=True)
                synchronize(torch, device)
            t1 = time.perf_counter()
            with torch.autocast(device_type=device_type, dtype=cast_dtype, enabled=amp):
                loss = loss_fn(step_model(images), labels)
            synchronize(torch, device)
            t2 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            synchronize(torch, device)
            t3 = time.perf_counter()
            data_s += t1 - t0
            forward_s += t2 - t1
            backward_s += t3 - t2
    total = data_s + forward_s + backward_s
    if device.startswith("cuda"):
        max_memory_mb = torch.cuda.max_memory_allocated(torch.device(device)) / 2**20
    else:
        max_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS
    power = sampler if isinstance(sampler, PowerSampler) else None
    return Training(
        device=device,
        model=model_name,
        data="synthetic" if loader is None else "real",
        batch=batch,
        steps=steps,
        images_per_s=batch * steps / total,
        data_ms=data_s / steps * 1000,
        forward_ms=forward_s / steps * 1000,
        backward_ms=backward_s / steps * 1000,
        max_memory_mb=max_memory_mb,
        peak_power_w=power.peak_w if power else None,
        joules_per_image=power.joules / (batch * steps) if power else None,
        settings={
            "amp": amp,
            "channels_last": channels_last,
            "compile": compile_model,
            "autocast_dtype": str(cast_dtype).replace("torch.", "") if amp else None,
        },
    )


def image_folder(path: str, image_size: int) -> Any:
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [transforms.Resize(image_size), transforms.CenterCrop(image_size), transforms.ToTensor()]
    )
    return datasets.ImageFolder(path, transform=transform)


def loader_for(
    torch: Any,
    dataset: Any,
    batch: int,
    *,
    num_workers: int,
    pin_memory: bool,
    persistent_workers: bool = False,
    prefetch_factor: int | None = None,
) -> Any:
    extra: dict[str, Any] = {}
    if num_workers > 0:
        extra = {"persistent_workers": persistent_workers, "prefetch_factor": prefetch_factor or 2}
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        num_workers=num_workers,
        pin_memory=pin_memory,
        **extra,
    )


def loader_rate(torch: Any, loader: Any, device: str, batches: int) -> float:
    """Images/s the input pipeline alone delivers to the device (after its first batch)."""
    source = _batches(loader)
    next(source)
    start = time.perf_counter()
    count = 0
    for _ in range(batches):
        images, _labels = next(source)
        images.to(device, non_blocking=True)
        count += len(images)
    synchronize(torch, device)
    return count / (time.perf_counter() - start)


def determinism_losses(torch: Any, device: str, seed: int, perturb: bool, steps: int = 4) -> list[float]:
    """Losses of a small seeded CNN on seeded data, with deterministic algorithms enforced."""
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        torch.manual_seed(seed)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(),
            torch.nn.Linear(256, 10),
        ).to(device)
        if perturb:
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-3
        generator = torch.Generator().manual_seed(seed + 1)
        images = torch.randn(16, 3, 32, 32, generator=generator).to(device)
        labels = torch.randint(0, 10, (16,), generator=generator).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.item()))
        return losses
    finally:
        torch.use_deterministic_algorithms(False)


def cpu_cores() -> int:
    with contextlib.suppress(AttributeError):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
