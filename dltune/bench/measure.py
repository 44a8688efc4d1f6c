"""Measurements with PyTorch (imported by the caller, only when `dltune bench` runs). Each function
returns plain numbers or the dataclasses of ``judge``; none of them judges."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import importlib.metadata
import os
import platform
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from dltune.bench.judge import Bandwidth, Matmul, PairCopy, PcieLink, PowerReading, Training
from dltune.records import record

DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


class BenchError(Exception):
    """The benchmark cannot run as asked (a usage problem, not a finding about the node)."""


def select_devices(
    torch: Any, device: str | None, gpus: list[int] | None, nvml_gpus: Callable[[], int] | None = None
) -> list[str]:
    """The devices to measure. With no --device, a node where NVML sees GPUs but PyTorch sees none is
    an error, never a silent CPU benchmark that passes (`nvml_gpus` counts NVML's GPUs)."""
    if device == "cpu":
        return ["cpu"]
    if not torch.cuda.is_available():
        if device is None:
            seen = (nvml_gpus or nvml_gpu_count)()
            if not seen:
                return ["cpu"]
            raise BenchError(
                f"NVML sees {seen} GPU(s) but PyTorch sees no CUDA device: {_why_no_cuda(torch)}; "
                "run with --device cpu to benchmark the CPU anyway"
            )
        raise BenchError(f"--device cuda: no CUDA device is visible to PyTorch ({_why_no_cuda(torch)})")
    count = torch.cuda.device_count()
    wanted = gpus if gpus else list(range(count))
    bad = [g for g in wanted if g < 0 or g >= count]
    if bad:
        raise BenchError(f"--gpus {bad}: this node has GPUs 0..{count - 1}")
    return [f"cuda:{i}" for i in wanted]


def nvml_gpu_count() -> int:
    from dltune.probes.nvml import probe_nvml_in_child

    state = probe_nvml_in_child()
    return len(state.gpus) if state.available else 0


def _why_no_cuda(torch: Any) -> str:
    built = getattr(torch.version, "cuda", None)
    if not built:
        return f"this PyTorch ({torch.__version__}) is a CPU-only build: install a CUDA wheel"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and not hidden.strip(","):
        return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
    return (
        f"PyTorch {torch.__version__} (CUDA {built}) cannot use this driver, or the devices are hidden "
        f"(CUDA_VISIBLE_DEVICES={hidden!r}): compare `nvidia-smi` with torch.cuda.is_available()"
    )


@contextlib.contextmanager
def on_device(torch: Any, device: str) -> Iterator[None]:
    """Make `device` the current CUDA device: torch.utils.benchmark and torch.cuda.synchronize() wait
    for the current device only, so a measurement of cuda:3 must run with cuda:3 current."""
    if device.startswith("cuda"):
        with torch.cuda.device(torch.device(device)):
            yield
    else:
        yield


def _timer(torch: Any, stmt: str, values: dict[str, Any]) -> Any:
    found: Any = getattr(getattr(torch, "utils", None), "benchmark", None)
    if not hasattr(found, "Timer"):
        found = importlib.import_module("torch.utils.benchmark")
    return found.Timer(stmt=stmt, globals=values)


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


# A burst: products timed right after a short warm-up on a card that had a moment to recover its
# clocks, as mamf-finder and the vendors' tables measure (the healthy figures in specs.py are such
# figures). Measured on an H100 SXM and an H200 on 2026-11-26 (tests/fixtures/real/bench/): a burst
# reaches 798-806 bf16 TFLOPS, while a second of back-to-back products sits at the 700 W power cap
# (SM clock 1290-1560 MHz) at 650-707, 85-89% of the burst. Judging the sustained figure against the
# burst tables put both healthy cards' fp16 at the warn line.
BURST_WARMUP, BURST_PRODUCTS, BURST_REPEATS = 3, 10, 3
BURST_RECOVERY_S = 0.25  # after the previous dtype's sustained run, for the power controller


def burst_seconds(torch: Any, device: str, work: Callable[[], Any]) -> float:
    """Seconds per call of `work` in a short burst: the median of BURST_REPEATS bursts of
    BURST_PRODUCTS calls after BURST_WARMUP, each waited for on the device (the current one)."""
    if device.startswith("cuda"):
        time.sleep(BURST_RECOVERY_S)
    for _ in range(BURST_WARMUP):
        work()
    synchronize(torch, device)
    per_call = []
    for _ in range(BURST_REPEATS):
        began = time.perf_counter()
        for _ in range(BURST_PRODUCTS):
            work()
        synchronize(torch, device)
        per_call.append((time.perf_counter() - began) / BURST_PRODUCTS)
    return statistics.median(per_call)


def matmul(torch: Any, device: str, dtype: str, n: int, min_run_time: float) -> Matmul:
    """`n`x`n` products in `dtype`: a burst (what published healthy figures measure, and what the
    judge compares with them) and `min_run_time` seconds back to back (what training gets: at the
    power limit on a loaded Hopper card; its repeats give the spread)."""
    n = max(8, n - n % 8)  # Tensor Cores want multiples of 8
    torch_dtype = getattr(torch, DTYPES[dtype])
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    with on_device(torch, device):
        a = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
        b = torch.randn(n, n, device=device, dtype=torch.float32).to(torch_dtype)
        burst = burst_seconds(torch, device, lambda: torch.mm(a, b))
        timer = _timer(torch, "torch.mm(a, b)", {"torch": torch, "a": a, "b": b})
        measured = timer.blocked_autorange(min_run_time=min_run_time)
    flop = 2 * n**3
    return Matmul(
        device,
        device_name(torch, device),
        dtype,
        n,
        flop / burst / 1e12,
        spread_of(measured),
        sustained_tflops=flop / measured.median / 1e12,
    )


def spread_of(measured: Any) -> float | None:
    """Interquartile range over median of a torch.utils.benchmark Measurement (None with one repeat)."""
    times = list(getattr(measured, "times", []))
    if len(times) < 4 or not measured.median:
        return None
    return float(measured.iqr / measured.median)


def copy_bandwidth(torch: Any, device: str, megabytes: int, min_run_time: float) -> Bandwidth:
    with on_device(torch, device):
        src = torch.empty(megabytes << 20, dtype=torch.uint8, device=device).random_(0, 255)
        dst = torch.empty_like(src)
        timer = _timer(torch, "dst.copy_(src)", {"src": src, "dst": dst})
        measured = timer.blocked_autorange(min_run_time=min_run_time)
    # A copy reads every byte once and writes it once.
    return Bandwidth(
        device,
        device_name(torch, device),
        "device copy",
        2 * src.numel() / measured.median / 1e9,
        spread_of(measured),
    )


# Each ordered GPU pair copies for this long: 56 pairs on 8 GPUs take about 3 s.
PAIR_SECONDS = 0.05


def pair_copy(
    torch: Any, source: str, destination: str, megabytes: int, seconds: float = PAIR_SECONDS
) -> PairCopy:
    """One GPU's buffer copied into another's, back to back for `seconds`: the unidirectional
    bandwidth of that pair (over NVLink or PCIe peer-to-peer where the pair has it, else staged
    through host memory, which `peer` says)."""
    src = torch.empty(megabytes << 20, dtype=torch.uint8, device=source).random_(0, 255)
    dst = torch.empty(megabytes << 20, dtype=torch.uint8, device=destination)

    def wait() -> None:
        synchronize(torch, source)
        synchronize(torch, destination)

    dst.copy_(src)  # warm: the peer mapping is made on the first copy
    wait()
    copies, start = 0, time.perf_counter()
    while True:
        for _ in range(4):
            dst.copy_(src)
        copies += 4
        wait()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    peer = (
        bool(torch.cuda.can_device_access_peer(torch.device(source), torch.device(destination)))
        if source.startswith("cuda") and destination.startswith("cuda")
        else None
    )
    return PairCopy(
        source, destination, device_name(torch, source), copies * src.numel() / elapsed / 1e9, peer
    )


def host_transfers(torch: Any, device: str, megabytes: int, min_run_time: float) -> list[Bandwidth]:
    found = []
    with on_device(torch, device):
        gpu = torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
        for pinned in (True, False):
            host = torch.empty(megabytes << 20, dtype=torch.uint8, pin_memory=pinned)
            label = "pinned" if pinned else "pageable"
            for kind, stmt in (("h2d", "gpu.copy_(host)"), ("d2h", "host.copy_(gpu)")):
                timer = _timer(torch, stmt, {"gpu": gpu, "host": host})
                measured = timer.blocked_autorange(min_run_time=min_run_time)
                found.append(
                    Bandwidth(
                        device,
                        device_name(torch, device),
                        f"{kind} {label}",
                        host.numel() / measured.median / 1e9,
                        spread_of(measured),
                    )
                )
    return found


# Below this, NVML's total-energy counter (updated at the driver's own rate) says too little to divide.
MIN_ENERGY_WINDOW_S = 2.0


def nvml_uuid(torch: Any, device: str) -> str | None:
    """The NVML UUID of a torch device: NVML numbers GPUs itself and ignores CUDA_VISIBLE_DEVICES, so
    torch's index names a different GPU in a job given GPUs 4,5; the UUID names the same one."""
    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


@contextlib.contextmanager
def nvml_opened(nvml: Any = None) -> Iterator[Any]:
    """NVML (pynvml unless given) initialised for the block and shut down after; None inside the block
    where there is no NVML or it does not initialise (no driver)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            yield None
            return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        yield None
        return
    try:
        yield nvml
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def pcie_link(torch: Any, device: str, nvml: Any = None) -> PcieLink | None:
    """The PCIe link of a torch device from NVML (by UUID: see nvml_uuid); None where NVML has none
    for it (no NVML, a MIG slice, a vGPU, a device NVML refuses this process). Read after the copies:
    the current generation drops at idle, which is why the judgement uses the link's maximum."""
    uuid = nvml_uuid(torch, device)
    if uuid is None or not uuid.startswith("GPU-"):
        return None
    with nvml_opened(nvml) as opened:
        if opened is None:
            return None

        def read(call: Any, handle: Any) -> int | None:
            try:
                value = int(call(handle))
            except opened.NVMLError:  # one field a driver lacks leaves the others
                return None
            return value if value > 0 else None

        try:
            handle = opened.nvmlDeviceGetHandleByUUID(uuid.encode())
            return PcieLink(
                read(opened.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                read(opened.nvmlDeviceGetCurrPcieLinkWidth, handle),
                read(opened.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                read(opened.nvmlDeviceGetMaxPcieLinkWidth, handle),
            )
        except opened.NVMLError:  # NVML knows no such device here, or refuses it to this process
            return None


class PowerMeter:
    """Energy of one GPU from NVML's total-energy counter between start() and stop(); peak power from
    the instantaneous field (NVML_FI_DEV_POWER_INSTANT) polled in a thread, or from
    nvmlDeviceGetPowerUsage where the driver lacks it (a trailing one-second average on Ampere and
    later: the peak is understated, and says so). Never raises: what NVML refuses becomes `skipped`."""

    POLL_S = 0.02

    def __init__(self, uuid: str | None) -> None:
        self.reading = PowerReading()
        self._handle: Any = None
        self._nvml: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._energy_mj: int | None = None
        self._started = 0.0
        if uuid is None:
            self.reading.skipped = "PyTorch gives no UUID for this device: its NVML device is unknown"
            return
        try:
            import pynvml
        except ImportError:
            self.reading.skipped = "nvidia-ml-py is not installed"
            return
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reading.skipped = f"NVML: {exc}"
            self._nvml = None
            return
        # CUDA names a MIG slice by the same bytes NVML prints as "MIG-...": try that form second.
        candidates = [uuid] + ([f"MIG-{uuid[4:]}"] if uuid.startswith("GPU-") else [])
        for candidate in candidates:
            try:
                self._handle = pynvml.nvmlDeviceGetHandleByUUID(candidate.encode())
                self.reading.skipped = None
                return
            except pynvml.NVMLError_NoPermission as exc:
                self.reading.skipped = f"NVML refused this process the GPU ({exc}): a job's device cgroup"
                return
            except pynvml.NVMLError as exc:
                self.reading.skipped = f"NVML has no device {uuid}: {exc}"

    def _instant_w(self) -> tuple[float | None, str | None]:
        pynvml = self._nvml
        try:
            (value,) = pynvml.nvmlDeviceGetFieldValues(self._handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])
            if value.nvmlReturn == pynvml.NVML_SUCCESS:
                return value.value.uiVal / 1000.0, "instantaneous"
        except pynvml.NVMLError:
            pass
        try:
            return pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0, "1 s average"
        except pynvml.NVMLError:
            return None, None

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_S):
            watts, source = self._instant_w()
            if watts is not None and (self.reading.peak_w is None or watts > self.reading.peak_w):
                self.reading.peak_w, self.reading.peak_source = watts, source

    def start(self) -> None:
        if self._handle is None:
            return
        try:
            self._energy_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except self._nvml.NVMLError as exc:
            self._energy_mj = None
            self.reading.skipped = f"no total-energy counter ({exc})"
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> PowerReading:
        if self._handle is None:
            self.shutdown()
            return self.reading
        self._stop.set()
        self._thread.join()
        window = time.monotonic() - self._started
        self.reading.window_s = window
        if self._energy_mj is not None:
            try:
                joules = (
                    self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) - self._energy_mj
                ) / 1000
            except self._nvml.NVMLError as exc:
                self.reading.skipped = f"the total-energy counter failed ({exc})"
            else:
                if window < MIN_ENERGY_WINDOW_S:
                    self.reading.skipped = (
                        f"the measured steps took {window:.1f} s, under the {MIN_ENERGY_WINDOW_S:g} s "
                        "the energy counter needs (give more --steps)"
                    )
                else:
                    self.reading.joules = joules
        self.shutdown()
        return self.reading

    def shutdown(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None


class StepClock:
    """Marks within training steps without waiting for the GPU: CUDA events on the device's stream (read
    once, after the final synchronisation), or host time on CPU, where every operation is synchronous."""

    def __init__(self, torch: Any, device: str) -> None:
        self._torch = torch
        self._cuda = device.startswith("cuda")
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self._cuda:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self, first: int, second: int) -> float:
        a, b = self.marks[first], self.marks[second]
        return float(a.elapsed_time(b)) / 1000 if self._cuda else float(b - a)


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


# long: the timed training loop: its load/forward/backward clocks must share one scope
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
    measure_power: bool = False,
) -> Training:
    """Steps of SGD on synthetic data (one batch made once, on the device) or on a DataLoader.
    images/s is wall time between two synchronisations around the measured steps; nothing inside a
    step waits for the GPU. The per-step split comes from marks (CUDA events on GPU): data = from the
    end of the previous step to the batch on the device (the GPU's wait for input included), forward
    + loss, backward + optimizer step. cudnn.benchmark is on, as in a tuned training script."""
    with on_device(torch, device), _cudnn_benchmark(torch):
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
            images = torch.randn(batch, 3, image_size, image_size, device=device).to(
                memory_format=memory_format
            )
            labels = torch.randint(0, num_classes, (batch,), device=device)
            source: Iterator[Any] | None = None
        else:
            source = _batches(loader)
        on_gpu = device.startswith("cuda")
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(torch.device(device))
        meter = PowerMeter(nvml_uuid(torch, device)) if on_gpu and measure_power else None
        clock = StepClock(torch, device)
        wall_start = 0.0
        for step in range(warmup + steps):
            if step == warmup:
                synchronize(torch, device)  # the warm-up's queued work is not the measured steps'
                wall_start = time.perf_counter()
                if meter is not None:
                    meter.start()
                clock.mark()  # the end of the "previous step" for the first measured one
            if source is not None:
                images, labels = next(source)
                images = images.to(device, non_blocking=True).to(memory_format=memory_format)
                labels = labels.to(device, non_blocking=True)
            if step >= warmup:
                clock.mark()
            with torch.autocast(device_type=device_type, dtype=cast_dtype, enabled=amp):
                loss = loss_fn(step_model(images), labels)
            if step >= warmup:
                clock.mark()
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if step >= warmup:
                clock.mark()
        synchronize(torch, device)
        wall = time.perf_counter() - wall_start
        reading = meter.stop() if meter is not None else None
        data_s = sum(clock.seconds(3 * i, 3 * i + 1) for i in range(steps))
        forward_s = sum(clock.seconds(3 * i + 1, 3 * i + 2) for i in range(steps))
        backward_s = sum(clock.seconds(3 * i + 2, 3 * i + 3) for i in range(steps))
        if on_gpu:
            max_memory_mb = torch.cuda.max_memory_allocated(torch.device(device)) / 2**20
        else:
            max_memory_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS
        return Training(
            device=device,
            model=model_name,
            data="synthetic" if loader is None else "real",
            batch=batch,
            steps=steps,
            images_per_s=batch * steps / wall,
            data_ms=data_s / steps * 1000,
            forward_ms=forward_s / steps * 1000,
            backward_ms=backward_s / steps * 1000,
            max_memory_mb=max_memory_mb,
            peak_power_w=reading.peak_w if reading else None,
            joules_per_image=reading.joules / (batch * steps)
            if reading and reading.joules is not None
            else None,
            settings={
                "amp": amp,
                "channels_last": channels_last,
                "compile": compile_model,
                "cudnn_benchmark": True,
                "autocast_dtype": str(cast_dtype).replace("torch.", "") if amp else None,
            },
            power=reading,
        )


@contextlib.contextmanager
def _cudnn_benchmark(torch: Any, enabled: bool = True) -> Iterator[None]:
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


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
    with on_device(torch, device):
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


def determinism_model(torch: Any) -> Any:
    """A small CNN built only from operations PyTorch documents as deterministic on CUDA under
    torch.use_deterministic_algorithms(True): convolutions (strided, instead of pooling: adaptive
    average pooling has no deterministic CUDA backward), batch norm, ReLU, a linear layer."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )


def determinism_loss(torch: Any, logits: Any, one_hot: Any) -> Any:
    """Cross-entropy written out: torch.nn.NLLLoss (inside F.cross_entropy) is documented to raise on
    CUDA in deterministic mode, log_softmax, a product and a mean are not."""
    return -(torch.log_softmax(logits, dim=1) * one_hot).sum(dim=1).mean()


def determinism_losses(torch: Any, device: str, seed: int, perturb: bool, steps: int = 4) -> list[float]:
    """Losses of a small seeded CNN on seeded data, with deterministic algorithms enforced."""
    torch.use_deterministic_algorithms(True)
    try:
        with on_device(torch, device), _cudnn_benchmark(torch, enabled=False):
            torch.manual_seed(seed)
            model = determinism_model(torch).to(device)
            if perturb:
                with torch.no_grad():
                    next(model.parameters()).view(-1)[0] += 1e-3
            generator = torch.Generator().manual_seed(seed + 1)
            images = torch.randn(16, 3, 32, 32, generator=generator).to(device)
            labels = torch.randint(0, 10, (16,), generator=generator)
            one_hot = torch.eye(10)[labels].to(device)  # built on the host: no scatter on the device
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            losses = []
            for _ in range(steps):
                loss = determinism_loss(torch, model(images), one_hot)
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


# bench.sdc: silent data corruption by replay. The same seeded training steps of a small MLP on every
# device under test, its weights hashed after each step: devices of one model that compute right agree
# bit for bit (deterministic algorithms, the same kernels), so a device that differs computes wrong.
# The method's name is part of the replay key: a change to the model, its data or its optimizer is a
# new name, so that nodes on different dltune releases are never compared digest to digest.
SDC_METHOD = "sdc-mlp-v1"
SDC_STEPS = 10
SDC_SEED = 4545
SDC_PRECISIONS = ("float32", "bfloat16")


@record(frozen=True)
class SdcShape:
    """The replayed MLP: `batch` rows of `inputs` features, two hidden layers of `hidden`, `outputs`."""

    batch: int
    inputs: int
    hidden: int
    outputs: int

    def model(self, precision: str) -> str:
        return (
            f"{SDC_METHOD} {self.inputs}-{self.hidden}-{self.hidden}-{self.outputs} GELU MLP, batch "
            f"{self.batch}, MSE, SGD lr 0.01 momentum 0.9, {precision}"
        )


# On a GPU, products of 4096 x 1024 by 1024 x 1024 spread over every SM of an H100-class card (about
# two waves of 128 x 128 tiles on 132 SMs); 8 MB of weights hashed per step. On a CPU, milliseconds.
SDC_SHAPES = {"cuda": SdcShape(4096, 1024, 1024, 16), "cpu": SdcShape(128, 128, 256, 16)}


def sdc_shape(device: str) -> SdcShape:
    return SDC_SHAPES["cuda" if device.startswith("cuda") else "cpu"]


def weights_digest(torch: Any, model: Any) -> str:
    """sha256 of the model's weights, their bytes as they lie in memory, in state_dict order."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        host = tensor.detach().to("cpu").contiguous()
        size = host.numel() * host.element_size()
        if size:  # the bytes read in place: no copy into a Python bytes object
            digest.update((ctypes.c_char * size).from_address(host.data_ptr()))
    return digest.hexdigest()


def flip_lowest_bit(torch: Any, model: Any) -> None:
    """Flip the lowest mantissa bit of the first weight: the smallest corruption a value can suffer."""
    with torch.no_grad():
        first = next(model.parameters()).view(-1)[:1]
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[first.element_size()]
        first.view(width).bitwise_xor_(1)


@contextlib.contextmanager
def _deterministic(torch: Any) -> Iterator[None]:
    """Deterministic algorithms on, TF32 off (float32 products in float32), both restored after."""
    enforced, tf32 = torch.are_deterministic_algorithms_enabled(), torch.backends.cuda.matmul.allow_tf32
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enforced)
        torch.backends.cuda.matmul.allow_tf32 = tf32


def sdc_replay(
    torch: Any,
    device: str,
    *,
    steps: int = SDC_STEPS,
    precision: str = "float32",
    shape: SdcShape | None = None,
    flip_after: int | None = None,
) -> list[str]:
    """The weights' digest before training (step 0) and after each of `steps` SGD steps of the seeded
    MLP on `device`. Weights and data are made on the host from seeded generators, then copied to the
    device: every device starts from the same bytes. `flip_after`: a bit of the weights flipped after
    that step (the DLTUNE_SDC_FLIP test seam). A RuntimeError says what PyTorch refused."""
    shape = shape or sdc_shape(device)
    dtype = getattr(torch, precision)
    nn = torch.nn
    with _deterministic(torch), on_device(torch, device), _cudnn_benchmark(torch, enabled=False):
        torch.manual_seed(SDC_SEED)
        model = nn.Sequential(
            nn.Linear(shape.inputs, shape.hidden),
            nn.GELU(),
            nn.Linear(shape.hidden, shape.hidden),
            nn.GELU(),
            nn.Linear(shape.hidden, shape.outputs),
        ).to(device=device, dtype=dtype)
        generator = torch.Generator().manual_seed(SDC_SEED + 1)
        inputs = torch.randn(shape.batch, shape.inputs, generator=generator).to(device=device, dtype=dtype)
        targets = torch.randn(shape.batch, shape.outputs, generator=generator).to(device=device, dtype=dtype)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        digests = [weights_digest(torch, model)]
        for step in range(1, steps + 1):
            loss = ((model(inputs) - targets) ** 2).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step == flip_after:
                flip_lowest_bit(torch, model)
            digests.append(weights_digest(torch, model))
        return digests


def cublas_version() -> str | None:
    """The cuBLAS wheel PyTorch loads, where pip installed one (its version is not torch's CUDA's)."""
    for package in ("nvidia-cublas", "nvidia-cublas-cu12", "nvidia-cublas-cu11"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(package)
    return None


def driver_version(nvml: Any = None) -> str | None:
    """The NVIDIA driver's version from NVML (None without NVML or a driver)."""
    with nvml_opened(nvml) as opened:
        if opened is None:
            return None
        try:
            version = opened.nvmlSystemGetDriverVersion()
        except opened.NVMLError:
            return None
        return version.decode() if isinstance(version, bytes) else str(version)


def sdc_key(torch: Any, devices: list[str], precision: str, cublas_workspace: str | None) -> dict[str, Any]:
    """What the replay's digests depend on besides the hardware's correctness (the GPU model is added
    per device group by the judge): nodes whose key is the same must compute the same digests. On a
    CPU also its kernel level and thread count (oneDNN and MKL split work by both)."""
    on_gpu = devices[0].startswith("cuda")
    key: dict[str, Any] = {
        "model": sdc_shape(devices[0]).model(precision),
        "steps": SDC_STEPS,
        "precision": precision,
        "torch": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None) if on_gpu else None,
        "cublas": cublas_version() if on_gpu else None,
        "driver": driver_version() if on_gpu else None,
        "CUBLAS_WORKSPACE_CONFIG": cublas_workspace,
    }
    if not on_gpu:
        key["cpu_capability"] = str(torch.backends.cpu.get_cpu_capability())
        key["threads"] = int(torch.get_num_threads())
    return key
