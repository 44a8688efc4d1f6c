"""One data-parallel worker, started by torchrun (one process per GPU; gloo processes on CPU), on one
node or on every node of a Slurm job step: all-reduce bandwidth, then data-parallel training
throughput (with --baseline, each process first trains alone for the scaling figure). Rank 0 writes
the numbers, and the hosts the ranks ran on, as JSON."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time


# long: one torchrun worker from start to finish: setup, baseline, timed all-reduce, report, in order
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], required=True)
    parser.add_argument("--megabytes", type=int, default=16, help="All-reduce message size.")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--baseline", action="store_true", help="Train alone first (scaling baseline).")
    parser.add_argument("--allreduce-only", action="store_true", help="No training (--find-slow's pairs).")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    from dltune.bench.measure import synchronize, train

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local}" if args.device == "cuda" else "cpu"
    if args.device == "cuda":
        torch.cuda.set_device(local)
    hosts: list[object] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    # Each rank's GPU by name: the healthy figure the all-reduce is judged against is per model.
    names: list[object] = [None] * world
    dist.all_gather_object(names, torch.cuda.get_device_name(local) if args.device == "cuda" else "cpu")
    megabytes = args.megabytes
    if args.device == "cuda":
        # Every rank must use the same size: the smallest card's share decides.
        share = torch.tensor(
            [message_megabytes(args.megabytes, torch.cuda.get_device_properties(local).total_memory)],
            device=device,
        )
        dist.all_reduce(share, op=dist.ReduceOp.MIN)
        megabytes = int(share.item())
    tensor = torch.ones((megabytes << 20) // 4, dtype=torch.float32, device=device)
    for _ in range(2):
        dist.all_reduce(tensor)
    synchronize(torch, device)
    dist.barrier()
    if args.allreduce_only:
        # --find-slow compares nodes by this figure: each all-reduce timed alone and the median kept, so
        # one hiccup of a shared host does not name a node.
        times = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            synchronize(torch, device)
            times.append(time.perf_counter() - start)
        mine = statistics.median(times)
    else:
        start = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(tensor)
        synchronize(torch, device)
        mine = (time.perf_counter() - start) / args.iterations
    # The collective is as slow as its slowest rank: every rank's time, and the maximum as the figure.
    per_rank: list[float] = [0.0] * world
    dist.all_gather_object(per_rank, mine)
    seconds = max(per_rank)
    measured = {
        "world": world,
        "backend": args.backend,
        "bytes": tensor.numel() * 4,
        "seconds": seconds,
        "seconds_per_rank": per_rank,
        "hosts": hosts,
        "device_names": names,
        "path": gpu_path(torch, world, local) if args.device == "cuda" and rank == 0 else None,
    }
    del tensor  # the training below needs the memory, not this buffer
    if args.allreduce_only:
        if rank == 0:
            write(args.out, measured)
        finish(dist)

    def wrap(model: object) -> object:
        ids = [local] if args.device == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)

    sizes = {"batch": args.batch, "steps": args.steps, "warmup": args.warmup, "image_size": args.image_size}
    baseline = torch.zeros(1, dtype=torch.float64, device=device)
    if args.baseline:
        baseline += train(torch, device, args.model, **sizes).images_per_s
        dist.all_reduce(baseline)
        dist.barrier()
    run = train(torch, device, args.model, wrap=wrap, **sizes)
    total = torch.tensor([run.images_per_s], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    if rank == 0:
        write(
            args.out,
            measured
            | {
                "images_per_s_total": float(total.item()),
                "baseline_images_per_s": float(baseline.item()) / world if args.baseline else None,
            },
        )
    finish(dist)


# NCCL's settings that change the path an all-reduce takes between GPUs (NCCL's environment variables
# documentation): recorded with the figure, so a run told not to use NVLink says so.
NCCL_PATH_SETTINGS = (
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_ALGO",
)


def gpu_path(torch: object, world: int, local: int) -> dict[str, object]:
    """How this node's GPUs of the run reach each other, read by rank 0 (one node: ranks 0..world-1 are
    cuda:0..world-1): whether every pair may access its peer's memory directly (CUDA peer-to-peer,
    over NVLink or PCIe), how many NVLinks each GPU has up (NVML, matched by PCI bus id; None where
    NVML cannot say), and NCCL's settings that change the path."""
    cuda = torch.cuda  # type: ignore[attr-defined]
    count = min(world, cuda.device_count())
    pairs = [(a, b) for a in range(count) for b in range(count) if a != b]
    peer = all(bool(cuda.can_device_access_peer(a, b)) for a, b in pairs) if count == world else None
    return {
        "peer_to_peer": peer,
        "nvlinks_up": [active_nvlinks(bus_id(cuda.get_device_properties(i))) for i in range(count)],
        "nccl": {name: os.environ[name] for name in NCCL_PATH_SETTINGS if name in os.environ},
        "gpus": count,
    }


def bus_id(properties: object) -> str:
    domain, bus, device = (getattr(properties, f"pci_{part}_id", 0) for part in ("domain", "bus", "device"))
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


def active_nvlinks(pci_bus_id: str) -> int | None:
    """NVLinks up on the GPU at this bus id (0: a PCIe card, or every link down); None: NVML not usable."""
    from dltune.bench.measure import nvml_opened

    try:
        with nvml_opened() as nvml:
            if nvml is None:
                return None
            handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            up = 0
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    up += nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED
                except nvml.NVMLError:
                    break  # past the GPU's last link, or no NVLink at all
            return up
    except Exception:  # NVML refusing the device: the path stays unknown, the figure is still written
        return None


def write(path: str, numbers: dict[str, object]) -> None:
    """Written aside and renamed: the launcher reads a complete file or none."""
    partial = f"{path}.partial"
    with open(partial, "w") as handle:
        json.dump(numbers, handle)
    os.replace(partial, path)


def message_megabytes(requested: int, gpu_memory_bytes: int) -> int:
    """The all-reduce message on a GPU: what was asked for, at most an eighth of the card's memory
    (the buffer and NCCL's own must leave room) rounded down to a power of two of MB, but not below
    64 MB."""
    cap = gpu_memory_bytes // 8 >> 20
    fits = 1 << max(cap, 1).bit_length() - 1
    return min(requested, max(64, fits))


def finish(dist: object) -> None:
    """Leave without the interpreter's teardown. Every rank meets at a barrier, so no peer is still
    sending, then the process group is destroyed and the process exits at once: gloo's C++ threads,
    destroyed by the interpreter's exit, aborted 5 runs in 20 on CPU ("terminate called without an
    active exception") after rank 0 had written its result."""
    dist.barrier()  # type: ignore[attr-defined]
    dist.destroy_process_group()  # type: ignore[attr-defined]
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
