"""`dltune bench` on CPU with real PyTorch: the same code paths a GPU node runs, at small sizes.
Fakes nothing: the "slow GPU" is a scaled spec table, the input-bound case a dataset that sleeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from dltune.bench import judge, measure  # noqa: E402
from dltune.bench.run import _dataset_dir, _sample_images, data_parallel, start_data_parallel  # noqa: E402
from dltune.bench.specs import Spec  # noqa: E402
from dltune.model import Status  # noqa: E402
from tests.conftest import SMALLEST_BENCH_SIZES  # noqa: E402


def test_a_gpu_below_its_spec_is_judged_so() -> None:
    """A measured CPU matmul judged against a spec table scaled so the same number is 40% / 90% of it."""
    sample = measure.matmul(torch, "cpu", "fp32", 256, 0.1)
    assert sample.tflops > 0
    slow = judge.judge_matmul([sample], lambda _n: Spec("scaled", {"fp32": sample.tflops / 0.4}))[0]
    assert slow.status is Status.FAIL and "40%" in slow.summary
    fine = judge.judge_matmul([sample], lambda _n: Spec("scaled", {"fp32": sample.tflops / 0.9}))[0]
    assert fine.status is Status.PASS


class SlowDataset(torch.utils.data.Dataset):  # type: ignore[misc]
    """Images that take `delay` seconds each to load, like JPEGs decoded on a slow CPU."""

    def __init__(self, items: int, delay: float) -> None:
        self.items, self.delay = items, delay

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, index: int) -> tuple[Any, int]:
        # Busy, like JPEG decoding, not asleep: a vCPU that slept runs the next step's compute slower
        # for a while, which would blur the comparison of compute between the two runs.
        until = time.perf_counter() + self.delay
        while time.perf_counter() < until:
            pass
        return torch.randn(3, 32, 32), index % 10


def tiny_cnn() -> Any:
    """Compute that costs milliseconds, so the data wait dominates whatever else runs on the machine."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )


@pytest.fixture
def one_compute_thread() -> Any:
    """Compute on one thread for the test. With torch's default of one thread per core, every op ends
    at a barrier across both cores of a 2-core CI machine: a sibling descheduled by anything else on
    the machine (the lab's containers) stalls the step for a scheduler slice. One stall in five steps
    once made the real run's compute 30x the synthetic run's (CI, stop 26), which is noise in what
    this test compares: the same compute with and without a slow input."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_slow_dataset_is_reported_input_bound_with_the_gap_it_causes(one_compute_thread: None) -> None:
    common = {"batch": 4, "steps": 8, "warmup": 2, "image_size": 32, "amp": False, "channels_last": False}
    synthetic = measure.train(torch, "cpu", "tiny", model=tiny_cnn(), **common)
    loader = measure.loader_for(torch, SlowDataset(64, 0.03), 4, num_workers=0, pin_memory=False)
    real = measure.train(torch, "cpu", "tiny", model=tiny_cnn(), loader=loader, **common)
    assert real.data_ms >= 4 * 30 * 0.9  # four slow items per batch
    result = judge.judge_input_gap(synthetic, real, num_workers=0)
    assert result.status is Status.WARN and "input-bound" in result.summary
    assert "num_workers (now 0)" in (result.remedy or "")
    # The gap is the share of the step spent waiting for data (the compute is the same either way).
    assert result.metrics["gap_percent"] > 70
    assert abs(result.metrics["gap_percent"] - result.metrics["data_wait_percent"]) < 10
    fast = measure.loader_for(torch, SlowDataset(64, 0.0), 4, num_workers=0, pin_memory=False)
    unbound = measure.train(torch, "cpu", "tiny", model=tiny_cnn(), loader=fast, **common)
    assert unbound.data_ms < real.data_ms / 5


def test_real_data_comes_from_an_image_folder_tar(tmp_path: Path) -> None:
    folder = _sample_images(tmp_path / "made" / "pets", classes=2, per_class=6, size=40)
    archive = tmp_path / "pets.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(folder, arcname="pets")
    root, described = _dataset_dir(archive, tmp_path / "scratch")
    dataset = measure.image_folder(str(root), 32)
    assert len(dataset) == 12 and dataset.classes == ["class0", "class1"]
    assert "extracted" in described
    loader = measure.loader_for(torch, dataset, 4, num_workers=0, pin_memory=False)
    run = measure.train(
        torch, "cpu", "resnet18", batch=4, steps=2, warmup=1, image_size=32, loader=loader, amp=False
    )
    assert run.data == "real" and run.images_per_s > 0


def test_determinism_holds_on_cpu_and_its_control_differs() -> None:
    one = measure.determinism_losses(torch, "cpu", seed=7, perturb=False)
    two = measure.determinism_losses(torch, "cpu", seed=7, perturb=False)
    control = measure.determinism_losses(torch, "cpu", seed=7, perturb=True)
    assert one == two and control != one
    assert judge.judge_determinism(one == two, control != one, None, "cpu").status is Status.PASS


def test_gloo_data_parallel_over_two_processes() -> None:
    size = {"model": "resnet18", "batch": 4, "image_size": 32, "steps": 2, "warmup": 1}
    results = {r.id: r for r in data_parallel(["cpu"], size, single_images_per_s=10.0)}
    allreduce = results["bench.allreduce"]
    # On failure, torchrun's own stderr whole (a worker that aborted says why only there).
    assert allreduce.status is Status.PASS, allreduce.evidence.get("stderr", allreduce.evidence)
    assert allreduce.evidence["world_size"] == 2 and allreduce.metrics["busbw_gb_s"] > 0
    assert results["bench.scaling"].metrics["efficiency"] > 0
    # The figure is the slowest rank's time (a collective ends with its last rank), not rank 0's.
    per_rank = allreduce.evidence["seconds_per_rank"]
    assert isinstance(per_rank, list) and len(per_rank) == 2
    assert allreduce.evidence["seconds"] == max(per_rank)


def _ddp_workers() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"dltune.bench.ddp" in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                pass
    return found


def test_a_timed_out_data_parallel_run_leaves_no_worker_behind() -> None:
    """torchrun starts its workers in sessions of their own: killing torchrun's group on a timeout left
    them alive, holding the GPUs. After the timeout, no worker of the run remains."""
    before = _ddp_workers()
    size = {"model": "resnet18", "batch": 4, "image_size": 32, "steps": 200, "warmup": 1}
    started = time.monotonic()
    numbers, error = start_data_parallel(["cpu"], size, timeout=4)
    assert numbers is None and error is not None and "timed out after 4 s" in error.summary
    assert time.monotonic() - started < 60
    left = _ddp_workers() - before
    until = time.monotonic() + 10
    while left and time.monotonic() < until:  # a killed process takes a moment to go
        time.sleep(0.1)
        left = _ddp_workers() - before
    assert left == set()


def test_cli_quick_json_has_every_section(tmp_path: Path) -> None:
    """`dltune bench --quick --format json --data TAR` on CPU: every section carries numbers, the GPU-only
    ones skip with a reason; the envelope is the audit's."""
    folder = _sample_images(tmp_path / "set" / "flowers", classes=2, per_class=12, size=48)
    archive = tmp_path / "flowers.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(folder, arcname="flowers")
    done = subprocess.run(
        # Every section, at the smallest sizes: the sections' numbers are what is judged here, not
        # their size (88 -> 35 s on 2 cores).
        [
            *(sys.executable, "-m", "dltune.cli", "bench", "--quick", "--format", "json"),
            *("--data", str(archive), *SMALLEST_BENCH_SIZES),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert set(report) >= {"schema_version", "tool_version", "host", "time", "valid_until", "results"}
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in report["results"]:
        assert r["area"] == "bench"
        by_id.setdefault(r["id"], []).append(r)
    measured = [
        "bench.matmul",
        "bench.memory",
        "bench.train_synthetic",
        "bench.train_real",
        "bench.input_gap",
        "bench.dataloader",
        "bench.determinism",
        "bench.allreduce",
        "bench.amp",
        "bench.channels_last",
    ]
    for check_id in measured:
        assert check_id in by_id, f"{check_id} missing"
        assert all(
            (r["status"] in ("pass", "warn") and r["metrics"]) or check_id == "bench.determinism"
            for r in by_id[check_id]
        ), by_id[check_id]
    assert {r["subject"] for r in by_id["bench.matmul"]} == {"cpu:fp32", "cpu:bf16"}
    assert by_id["bench.determinism"][0]["status"] == "pass"
    for gpu_only in ("bench.host_transfer", "bench.power"):
        assert by_id[gpu_only][0]["status"] == "skip" and "GPU" in by_id[gpu_only][0]["summary"]
    assert "extracted" in by_id["bench.train_real"][0]["evidence"]["dataset"]
    assert "results in" in done.stderr  # the total time, on stderr


def test_check_audits_then_benchmarks_in_one_envelope() -> None:
    """`dltune check` on a node without GPUs: the audit's results, then the quick bench on the CPU,
    in one envelope with one exit code by the contract."""
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "check", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    report = json.loads(done.stdout)
    areas = [r["area"] for r in report["results"]]
    assert "system" in areas and "storage" in areas
    bench = [r for r in report["results"] if r["area"] == "bench"]
    assert areas[-len(bench) :] == ["bench"] * len(bench)  # the bench ran after the audit
    assert {"bench.matmul", "bench.train_synthetic"} <= {r["id"] for r in bench}
    assert "bench.run" not in {r["id"] for r in bench}, bench
    statuses = {r["status"] for r in report["results"]}
    assert done.returncode == (1 if "fail" in statuses else 2 if "error" in statuses else 0), done.stderr[
        -2000:
    ]
