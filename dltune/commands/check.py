"""`dltune check`: the audit, then (unless it must not run) a quick bench; one envelope, one exit code."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands import ALL_OPTION, BenchFormat, progress_console, stdout_console
from dltune.commands.audit import audit_results, check_timeouts
from dltune.model import Result, Status, exit_code
from dltune.probes.watchdog import Deadline
from dltune.report import render_human, render_json


def check(
    output: Annotated[
        BenchFormat, typer.Option("--format", help="Output format on stdout.")
    ] = BenchFormat.human,
    show_all: Annotated[bool, ALL_OPTION] = False,
    no_bench: Annotated[bool, typer.Option("--no-bench", help="The audit only.")] = False,
    device: Annotated[
        str | None, typer.Option("--device", help="cpu or cuda (default: every local GPU, else the CPU).")
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for the audit part.")] = 30.0,
    nfs_timeout: Annotated[
        float, typer.Option("--nfs-timeout", help="Seconds an NFS mount may take to answer.")
    ] = 5.0,
    nvml_timeout: Annotated[
        float, typer.Option("--nvml-timeout", help="Seconds NVML may take before the driver counts as hung.")
    ] = 10.0,
) -> None:
    """Audit this node, then run `dltune bench --quick` on its GPUs (CPU where none), unless a critical
    check failed, a job is using a GPU, or PyTorch is missing (each said as a skipped bench.run).
    Exit 0 ok, 1 a fail, 2 usage/error."""
    from dltune.bench.judge import bench_gate

    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device}: give cpu or cuda", param_hint="--device")
    check_timeouts(timeout=timeout, nfs_timeout=nfs_timeout, nvml_timeout=nvml_timeout)
    snapshot, results, host = audit_results(Path("/"), None, nfs_timeout, nvml_timeout, Deadline(timeout))
    busy = {g.index: g.compute_pids for g in snapshot.nvml.gpus if g.compute_pids}
    gate = bench_gate(results, busy, importlib.util.find_spec("torch") is not None, no_bench)
    results += [gate] if gate is not None else _quick_bench(device)
    now = datetime.now(timezone.utc)
    if output is BenchFormat.json:
        sys.stdout.write(render_json(results, host, now))
    else:
        render_human(results, stdout_console(), host, what="check", show_all=show_all)
    raise typer.Exit(exit_code(results))


def _quick_bench(device: str | None) -> list[Result]:
    from dltune.bench.measure import BenchError
    from dltune.bench.run import Options
    from dltune.commands.bench import bench_results

    progress_console().print("dltune check: audit done; quick bench next")
    try:
        return bench_results(Options(device=device, quick=True)) or []
    except BenchError as exc:
        return [Result("bench.run", Status.ERROR, f"bench could not run: {exc}")]
