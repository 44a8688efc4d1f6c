"""`dltune bench`: a short benchmark of this node's GPUs (or CPU); the work is in dltune.bench."""

from __future__ import annotations

import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dltune.commands import ALL_OPTION, BenchFormat, progress_console, stdout_console
from dltune.model import EXIT_USAGE_OR_ERROR, Result, exit_code

if TYPE_CHECKING:
    from dltune.bench.run import Options


def bench_results(options: Options, multi_node: bool = False) -> list[Result] | None:
    """Run the bench with a progress line on stderr; None on a node that only took part in a multi-node
    run. A bench that cannot start (a GPU NVML sees but CUDA does not) raises BenchError."""
    from rich.progress import BarColumn, Progress, TextColumn

    from dltune.bench.run import run_bench, run_multi_node

    with Progress(
        TextColumn("bench: {task.description}", markup=False),
        BarColumn(),
        console=progress_console(),
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None)
        run = run_multi_node if multi_node else run_bench
        return run(options, lambda name: bar.update(task, description=name))


# long: mostly its option declarations
def bench(
    device: Annotated[
        str | None, typer.Option("--device", help="cpu or cuda (default: every local GPU, else the CPU).")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="Comma-separated GPU indices (default: all).")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes: an answer in about a minute.")] = False,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="ImageFolder directory or tar of one (default: generated sample JPEGs)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="torchvision model (resnet50; resnet18 on CPU).")
    ] = None,
    batch: Annotated[int | None, typer.Option("--batch", min=1, help="Batch size per device.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", min=1, help="Measured training steps.")] = None,
    image_size: Annotated[
        int | None, typer.Option("--image-size", min=8, help="Image side in pixels.")
    ] = None,
    dataloader_sweep: Annotated[
        bool, typer.Option("--dataloader-sweep/--no-dataloader-sweep", help="Sweep DataLoader settings.")
    ] = True,
    determinism: Annotated[
        bool, typer.Option("--determinism/--no-determinism", help="Check bitwise-reproducible training.")
    ] = True,
    data_parallel: Annotated[
        bool, typer.Option("--data-parallel/--no-data-parallel", help="torchrun over all devices.")
    ] = True,
    compile_step: Annotated[bool, typer.Option("--compile", help="Also measure torch.compile.")] = False,
    multi_node: Annotated[
        bool,
        typer.Option(
            "--multi-node",
            help="Only data-parallel training across the nodes of this Slurm job step "
            "(srun --nodes=N --ntasks-per-node=1); the first node prints the results.",
        ),
    ] = False,
    output: Annotated[
        BenchFormat, typer.Option("--format", help="Output format on stdout.")
    ] = BenchFormat.human,
    show_all: Annotated[bool, ALL_OPTION] = False,
) -> None:
    """Short benchmark of this node's GPUs (or CPU): matmul and memory vs spec, training throughput,
    input-pipeline gap, determinism, data-parallel. Exit 0 ok, 1 a fail, 2 usage/error."""
    from dltune.bench.measure import BenchError
    from dltune.bench.run import Options

    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device}: give cpu or cuda", param_hint="--device")
    try:
        gpu_list = [int(g) for g in gpus.split(",") if g.strip()] if gpus else None
    except ValueError as exc:
        raise typer.BadParameter(f"{gpus}: give GPU indices such as 0,1", param_hint="--gpus") from exc
    if data is not None and not data.exists():
        raise typer.BadParameter(f"{data} does not exist", param_hint="--data")
    options = Options(
        device=device,
        gpus=gpu_list,
        quick=quick,
        data=data,
        model=model,
        batch=batch,
        steps=steps,
        image_size=image_size,
        dataloader_sweep=dataloader_sweep,
        determinism=determinism,
        data_parallel=data_parallel,
        compile=compile_step,
    )
    start = datetime.now(timezone.utc)
    err = progress_console()
    try:
        results = bench_results(options, multi_node)
    except BenchError as exc:
        err.print(f"dltune bench: {exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc
    if results is None:  # another node of a multi-node run: the first node reports for all
        err.print(f"dltune bench: {socket.gethostname()} took part; the step's first node reports")
        raise typer.Exit(0)
    from dltune.report import render_human, render_json

    now = datetime.now(timezone.utc)
    err.print(f"dltune bench: {len(results)} results in {(now - start).total_seconds():.1f}s")
    host = socket.gethostname()
    if output is BenchFormat.json:
        sys.stdout.write(render_json(results, host, now))
    else:
        render_human(results, stdout_console(), host, what="bench", show_all=show_all)
    raise typer.Exit(exit_code(results))
