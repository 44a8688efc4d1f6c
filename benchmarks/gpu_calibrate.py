"""What a healthy GPU reaches by dltune's own measuring methods, against the short bursts that public
tables (mamf-finder, the vendors) report: the figures behind bench/specs.py's healthy lines.

Run on an idle GPU node, once per GPU model (as root to read the throttle reasons):

    python3 benchmarks/gpu_calibrate.py --device cuda:0 > calibrate.json

For each matmul dtype it prints three figures at n=8192: a burst (3 warm-ups, then 10 products
timed with CUDA events, as mamf-finder and most published tables do), dltune's own measurement
(``bench.measure.matmul``: torch.utils.benchmark's blocked_autorange over one second) and a sustained
run of several seconds in half-second windows with NVML's SM clock, power and throttle reasons per
window, so that the gap between a burst and a sustained figure is explained by what the card says.
Device-copy bandwidth at several sizes, by dltune's method and as a burst, and
CUBLAS_WORKSPACE_CONFIG as the process saw it close the record."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from dltune.bench import measure

DTYPES = ("bf16", "fp16", "tf32", "fp32")


def _nvml_sample(nvml: Any, handle: Any) -> dict[str, Any]:
    if handle is None:
        return {}
    return {
        "sm_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
        "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000,
        "throttle": hex(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        "temp_c": nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
    }


def burst_matmul(torch: Any, device: str, dtype: str, n: int) -> float:
    a = torch.randn(n, n, device=device).to(getattr(torch, measure.DTYPES[dtype]))
    b = torch.randn(n, n, device=device).to(a.dtype)
    for _ in range(3):
        torch.mm(a, b)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        torch.mm(a, b)
    end.record()
    torch.cuda.synchronize()
    return float(2 * n**3 * 10 / (start.elapsed_time(end) / 1000) / 1e12)


def sustained_matmul(
    torch: Any, nvml: Any, handle: Any, device: str, dtype: str, n: int, seconds: float
) -> list[dict[str, Any]]:
    a = torch.randn(n, n, device=device).to(getattr(torch, measure.DTYPES[dtype]))
    b = torch.randn(n, n, device=device).to(a.dtype)
    windows = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        began, count = time.monotonic(), 0
        while time.monotonic() - began < 0.5:
            for _ in range(5):
                torch.mm(a, b)
            count += 5
            torch.cuda.synchronize()
        took = time.monotonic() - began
        windows.append({"tflops": round(2 * n**3 * count / took / 1e12, 1), **_nvml_sample(nvml, handle)})
    return windows


def burst_copy(torch: Any, device: str, megabytes: int) -> float:
    src = torch.empty(megabytes << 20, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return float(2 * src.numel() * 10 / (start.elapsed_time(end) / 1000) / 1e9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--sustain-s", type=float, default=4.0)
    args = parser.parse_args()
    import pynvml as nvml
    import torch

    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(torch.device(args.device).index or 0)
    record: dict[str, Any] = {
        "name": torch.cuda.get_device_name(args.device),
        "torch": torch.__version__,
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "idle": _nvml_sample(nvml, handle),
        "matmul": {},
        "copy": {},
    }
    with measure.on_device(torch, args.device):
        for dtype in DTYPES:
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            burst = burst_matmul(torch, args.device, dtype, args.n)
            dltune = measure.matmul(torch, args.device, dtype, args.n, 1.0)
            sustained = sustained_matmul(torch, nvml, handle, args.device, dtype, args.n, args.sustain_s)
            record["matmul"][dtype] = {
                "burst_tflops": round(burst, 1),
                "dltune_tflops": round(dltune.tflops, 1),
                "dltune_spread": dltune.spread,
                "sustained": sustained,
            }
            print(
                dtype,
                record["matmul"][dtype]["burst_tflops"],
                record["matmul"][dtype]["dltune_tflops"],
                [w["tflops"] for w in sustained],
                file=sys.stderr,
            )
        for megabytes in (128, 512, 2048):
            dltune_copy = measure.copy_bandwidth(torch, args.device, megabytes, 1.0)
            record["copy"][str(megabytes)] = {
                "burst_gb_s": round(burst_copy(torch, args.device, megabytes), 1),
                "dltune_gb_s": round(dltune_copy.gb_s, 1),
            }
            print("copy", megabytes, record["copy"][str(megabytes)], file=sys.stderr)
    json.dump(record, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
