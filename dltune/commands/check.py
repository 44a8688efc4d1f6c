"""`dltune check`: the audit, then (unless it must not run) a quick bench; one envelope, one exit code."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dltune.commands.node import audit_results
from dltune.commands.options import (
    ALL_OPTION,
    BenchFormat,
    format_option,
    gpu_use_option,
    number_option,
    seconds_option,
)
from dltune.commands.output import help_paragraphs, progress_console, stdout_console
from dltune.model import Result, Status
from dltune.probes.watchdog import Deadline
from dltune.records import replace

if TYPE_CHECKING:
    from dltune.bench.judge import TorchCuda
    from dltune.costs.impact import IoCost
    from dltune.snapshot import NvmlState, Snapshot


# long: mostly its option declarations
@help_paragraphs
def check(
    output: Annotated[BenchFormat, format_option(BenchFormat)] = BenchFormat.human,
    show_all: Annotated[bool, ALL_OPTION] = False,
    no_bench: Annotated[
        bool, typer.Option("--no-bench", help="No bench after the audit (--dcgm still runs).")
    ] = False,
    device: Annotated[
        str | None, typer.Option("--device", help="cpu or cuda (default: every local GPU, else the CPU).")
    ] = None,
    timeout: Annotated[float, seconds_option("--timeout", help="Seconds for the audit part.")] = 30.0,
    nfs_timeout: Annotated[
        float, seconds_option("--nfs-timeout", help="Seconds an NFS mount may take to answer.")
    ] = 5.0,
    nvml_timeout: Annotated[
        float,
        seconds_option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung."),
    ] = 10.0,
    dcgm: Annotated[
        int | None,
        number_option(
            "--dcgm",
            kind=int,
            minimum=1,
            maximum=4,
            help="After the audit, run DCGM's diagnostic at this level (2 about two minutes, 3 about "
            "fifteen, both loading the GPUs), unless a critical check failed or a job uses a GPU.",
        ),
    ] = None,
    dcgm_timeout: Annotated[
        float | None,
        seconds_option(
            "--dcgm-timeout",
            minimum=1.0,  # DCGM counts whole seconds
            help="Seconds DCGM may run before it aborts the diagnostic itself.",
        ),
    ] = None,
    gpu_use: Annotated[float, gpu_use_option()] = 1.0,
) -> None:
    """Audit this node, then bench it quickly (`dltune bench --quick`).

    The bench runs on the node's GPUs (its CPU where NVML sees none) unless asked not to, a critical
    check failed or a job is using a GPU (each a skipped bench.run); with --dcgm, DCGM's diagnostic
    runs first, under the same conditions.

    Exit 0 ok; 1 a fail; 2 usage or an error, no fail; 3 no fail and no error, but the node is not
    proved: the bench could not run (no PyTorch, or a PyTorch that sees none of the GPUs NVML reports;
    bench.run names the role variables that fix it)."""
    from dltune.bench.judge import bench_gate, check_exit_code, torch_gpu_gate

    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device}: give cpu or cuda", param_hint="--device")
    from dltune.probes.dcgm import DCGM_TIMEOUT_S

    if dcgm is not None and dcgm not in DCGM_TIMEOUT_S:
        raise typer.BadParameter(f"{dcgm}: DCGM's levels are 1, 2, 3 and 4", param_hint="--dcgm")
    snapshot, results, host = audit_results(
        Path("/"), None, nfs_timeout, nvml_timeout, Deadline(timeout), gpu_use=gpu_use
    )
    busy = {g.index: g.compute_pids for g in snapshot.nvml.gpus if g.compute_pids}
    if dcgm is not None:
        results += _dcgm_results(
            dcgm,
            dcgm_timeout or DCGM_TIMEOUT_S[dcgm],
            bench_gate(results, busy, True, False),
            nvml_timeout,
            snapshot.nvml,
        )
    gate = bench_gate(results, busy, _torch_installed(), no_bench)
    if gate is None and device != "cpu":  # --device cpu: the CPU was asked for, whatever torch sees
        torch, nvml = _torch_cuda(), snapshot.nvml
        gpus = len(nvml.gpus) if nvml.available else 0
        gate = torch if isinstance(torch, Result) else torch_gpu_gate(torch, gpus, nvml.driver_version)
    results += [gate] if gate is not None else _quick_bench(device)
    results = _priced(results, snapshot, gpu_use, measure=gate is None)
    from dltune.outputs.human import render_human
    from dltune.outputs.report import render_json

    now = datetime.now(timezone.utc)
    if output is BenchFormat.json:
        sys.stdout.write(render_json(results, host, now))
    else:
        asked = frozenset({"bench.run", *(("gpu.dcgm",) if dcgm is not None else ())})
        render_human(results, stdout_console(), host, what="check", show_all=show_all, asked=asked)
    raise typer.Exit(check_exit_code(results))


def _priced(results: list[Result], snapshot: Snapshot, use: float, measure: bool) -> list[Result]:
    """Every finding with its price (dltune.costs.impact); the file-system findings measured first where the
    bench ran (a node that must not be loaded now is not measured either)."""
    from dltune.costs.impact import Node, price

    gpus = len(snapshot.nvml.gpus) if snapshot.nvml.available else 0
    if not gpus:
        gpus = len(
            {
                (r.subject or "").split(":")[1]
                for r in results
                if r.id == "bench.matmul" and (r.subject or "").startswith("cuda:")
            }
        )
    costs = _io_costs(results, snapshot) if measure else {}
    return price(results, Node(gpus=gpus, use=use, io_costs=costs))


def _io_costs(results: list[Result], snapshot: Snapshot) -> dict[str, IoCost]:
    """What the audit's atime and /tmp findings cost here, measured (dltune.bench.io_cost)."""
    from dltune.bench.io_cost import SCRATCH, atime_cost, tmp_cost
    from dltune.checks.storage import atime_mode
    from dltune.costs.impact import IoCost, is_finding
    from dltune.snapshot import mount_at

    costs: dict[str, IoCost] = {}
    for r in results:
        if not is_finding(r) or r.subject is None or r.subject in costs:
            continue
        if r.id == "storage.data_noatime":
            mount = mount_at(snapshot.mounts, r.subject)
            if mount is None:
                costs[r.subject] = IoCost(None, "small-file reads", why=f"{r.subject} is not mounted")
                continue
            progress_console().print(f"dltune check: measuring what access times cost on {r.subject}")
            costs[r.subject] = atime_cost(Path(r.subject), atime_mode(mount.mount_options))
        elif r.id == "storage.tmp_tmpfs":
            live = r.evidence.get("live_fstype") if isinstance(r.evidence, dict) else None
            if live == "tmpfs":
                costs[r.subject] = IoCost(
                    None, SCRATCH, why=f"{r.subject} is a tmpfs already; its options differ"
                )
                continue
            shm = mount_at(snapshot.mounts, "/dev/shm")
            if shm is None or shm.fstype != "tmpfs":
                costs[r.subject] = IoCost(None, SCRATCH, why="no tmpfs at /dev/shm to measure against")
                continue
            progress_console().print(f"dltune check: measuring {r.subject} against a tmpfs")
            costs[r.subject] = tmp_cost(Path(r.subject), Path("/dev/shm"))
    return costs


def _dcgm_results(
    level: int, seconds: float, blocked: Result | None, nvml_timeout: float, nvml: NvmlState
) -> list[Result]:
    """DCGM's diagnostic at ``level``, unless the audit says the GPUs must not be loaded now; where it
    ran, the GPUs DCGM lists, compared with the audit's NVML view (a DCGM that cannot see or name them
    does not pass)."""
    from dltune.checks.dcgm import dcgm as judge_dcgm
    from dltune.probes.dcgm import DISCOVERY_TIMEOUT_S, run_dcgm_diag, run_dcgm_discovery
    from dltune.probes.runner import SubprocessRunner
    from dltune.snapshot import Snapshot

    if blocked is not None:
        why = blocked.summary.replace("bench not run", "DCGM's diagnostic not run", 1)
        return [Result("gpu.dcgm", Status.SKIP, why, evidence=dict(blocked.evidence), remedy=blocked.remedy)]
    progress_console().print(f"dltune check: audit done; DCGM level {level} next (up to {seconds:g} s)")
    diag = run_dcgm_diag(SubprocessRunner(), level, seconds)
    if diag.error is None and diag.tests:
        diag = replace(diag, discovery=run_dcgm_discovery(SubprocessRunner(), DISCOVERY_TIMEOUT_S))
    snapshot = Snapshot(root="/", dcgm=diag, nvml=nvml)
    if diag.timed_out:  # whether the GPUs still answer now decides how grave the timeout is
        from dltune.probes.nvml import probe_nvml_in_child

        snapshot = replace(snapshot, nvml=probe_nvml_in_child(nvml_timeout, Deadline(nvml_timeout + 5)))
    judged = judge_dcgm(snapshot)
    return [judged] if isinstance(judged, Result) else list(judged)


def _torch_installed() -> bool:
    """Whether dltune's Python finds PyTorch and torchvision, both of which the bench needs (without
    importing them: that takes seconds)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "torchvision"))


def _torch_cuda() -> TorchCuda | Result:
    """What the installed PyTorch says of CUDA (the probe; torch_gpu_gate judges it), or the error of a
    PyTorch that does not import."""
    from dltune.bench.judge import TorchCuda

    try:
        import torch

        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            available = bool(torch.cuda.is_available())
    except Exception as exc:  # a broken install (a library missing) is said in bench.run, not raised
        return Result("bench.run", Status.ERROR, f"bench could not run: import torch failed: {exc}")
    return TorchCuda(
        version=str(torch.__version__),
        cuda=getattr(torch.version, "cuda", None),
        available=available,
        warning=" ".join(str(w.message) for w in warned) or None,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def _quick_bench(device: str | None) -> list[Result]:
    from dltune.bench.measure import BenchError
    from dltune.bench.run import Options
    from dltune.commands.bench import bench_results

    progress_console().print("dltune check: audit done; quick bench next")
    try:
        return bench_results(Options(device=device, quick=True)) or []
    except BenchError as exc:
        return [Result("bench.run", Status.ERROR, f"bench could not run: {exc}")]
