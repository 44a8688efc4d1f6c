"""`dltune bench`: a short benchmark of this node's GPUs (or CPU); the work is in dltune.bench."""

from __future__ import annotations

import os
import socket
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dltune.commands.options import ALL_OPTION, BenchFormat, format_option, gpu_use_option, number_option
from dltune.commands.output import error_line, help_paragraphs, progress_console, stdout_console
from dltune.model import EXIT_USAGE_OR_ERROR, Result, exit_code
from dltune.text import decimal, visible

if TYPE_CHECKING:
    from dltune.bench.run import Options

MAX_GPU_INDEX = 1023
# `--help` lists the sections' switches in a panel of their own: their --no-... names would leave the
# other options' help too narrow a column (rich shares a table's width out among its columns).
SECTIONS_PANEL = "Sections"


def bench_results(
    options: Options, multi_node: bool = False, find_slow: float | None = None
) -> list[Result] | None:
    """Run the bench with a progress line on stderr; None on a node that only took part in a multi-node
    run. `find_slow`: the --find-slow search with this `behind` fraction instead of the multi-node run.
    A bench that cannot start (a GPU NVML sees but CUDA does not) raises BenchError."""
    from rich.progress import BarColumn, Progress, TextColumn

    from dltune.bench.run import run_bench, run_find_slow, run_multi_node

    with Progress(
        TextColumn("bench: {task.description}", markup=False),
        BarColumn(),
        console=progress_console(),
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=None)

        def progress(name: str) -> None:
            bar.update(task, description=name)

        if find_slow is not None:
            return run_find_slow(options, find_slow, progress)
        run = run_multi_node if multi_node else run_bench
        return run(options, progress)


def _gpu_indices(gpus: str | None) -> list[int] | None:
    """--gpus "0,1": GPU indices of ASCII digits (int() would take " 1", "1_0" and other scripts' digits)."""
    if not gpus:
        return None
    indices = [decimal(g.strip()) for g in gpus.split(",") if g.strip()]
    if not indices or None in indices or any(i is not None and i > MAX_GPU_INDEX for i in indices):
        raise typer.BadParameter(f"{gpus}: give GPU indices such as 0,1", param_hint="--gpus")
    return [i for i in indices if i is not None]


def _check_data(data: Path) -> None:
    """--data: a directory or a regular file (a tar); a FIFO or a device would block the bench."""
    from dltune.files.safeio import file_kind

    try:
        mode = os.stat(data).st_mode
    except OSError as exc:
        why = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read: {exc.strerror}"
        raise typer.BadParameter(f"{data} {why}", param_hint="--data") from exc
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise typer.BadParameter(
            f"{data} is {file_kind(mode)}: give an ImageFolder directory or a tar of one", param_hint="--data"
        )


# long: mostly its option declarations
@help_paragraphs
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
    batch: Annotated[
        int | None,
        number_option("--batch", kind=int, minimum=1, maximum=65_536, help="Batch size per device."),
    ] = None,
    steps: Annotated[
        int | None,
        number_option("--steps", kind=int, minimum=1, maximum=1_000_000, help="Measured training steps."),
    ] = None,
    image_size: Annotated[
        int | None,
        number_option("--image-size", kind=int, minimum=8, maximum=4096, help="Image side in pixels."),
    ] = None,
    dataloader_sweep: Annotated[
        bool,
        typer.Option(
            "--dataloader-sweep/--no-dataloader-sweep",
            help="Sweep DataLoader settings.",
            rich_help_panel=SECTIONS_PANEL,
        ),
    ] = True,
    determinism: Annotated[
        bool,
        typer.Option(
            "--determinism/--no-determinism",
            help="Check bitwise-reproducible training.",
            rich_help_panel=SECTIONS_PANEL,
        ),
    ] = True,
    data_parallel: Annotated[
        bool,
        typer.Option(
            "--data-parallel/--no-data-parallel",
            help="torchrun over all devices.",
            rich_help_panel=SECTIONS_PANEL,
        ),
    ] = True,
    compile_step: Annotated[
        bool,
        typer.Option("--compile", help="Also measure torch.compile.", rich_help_panel=SECTIONS_PANEL),
    ] = False,
    sdc: Annotated[
        bool,
        typer.Option(
            "--sdc/--no-sdc",
            help="Replay seeded training steps on every device and compare the weights bit for bit "
            "(silent data corruption).",
            rich_help_panel=SECTIONS_PANEL,
        ),
    ] = True,
    sdc_precision: Annotated[
        str,
        typer.Option(
            "--sdc-precision",
            help="The replay's dtype: float32 (CUDA cores) or bfloat16 (Tensor Cores).",
            rich_help_panel=SECTIONS_PANEL,
        ),
    ] = "float32",
    multi_node: Annotated[
        bool,
        typer.Option(
            "--multi-node",
            help="Only data-parallel training across the nodes of this Slurm job step "
            "(`srun --nodes=N --ntasks-per-node=1`); the first node prints the results.",
        ),
    ] = False,
    find_slow: Annotated[
        bool,
        typer.Option(
            "--find-slow",
            help="With --multi-node (3 nodes or more): name the node(s) holding the job back. Each node "
            "all-reduces with one partner per round, 3 rounds of distinct partners, then every suspect once "
            "more beside the best node: 4 rounds of 2-node all-reduces whatever the node count. A node more "
            "than --behind below the job's median node, in its rounds and again in its retest, is named "
            "(bench.slow_node).",
        ),
    ] = False,
    behind: Annotated[
        float,
        number_option(
            "--behind",
            kind=float,
            minimum=0.05,
            maximum=0.9,
            help="--find-slow: the fraction below the job's median node that names a node.",
        ),
    ] = 0.2,
    output: Annotated[BenchFormat, format_option(BenchFormat)] = BenchFormat.human,
    show_all: Annotated[bool, ALL_OPTION] = False,
    gpu_use: Annotated[float, gpu_use_option()] = 1.0,
) -> None:
    """Short benchmark of this node's GPUs (or its CPU).

    Matmul and memory against the GPU's spec, training throughput, the input pipeline's gap,
    determinism, data-parallel training, silent data corruption by replay.

    Exit 0 ok, 1 a fail, 2 usage or an error with no fail."""
    from dltune.bench.measure import SDC_PRECISIONS, BenchError
    from dltune.bench.run import Options

    if device not in (None, "cpu", "cuda"):
        raise typer.BadParameter(f"{device}: give cpu or cuda", param_hint="--device")
    if sdc_precision not in SDC_PRECISIONS:
        raise typer.BadParameter(
            f"{sdc_precision}: give {' or '.join(SDC_PRECISIONS)}", param_hint="--sdc-precision"
        )
    if find_slow and not multi_node:
        raise typer.BadParameter(
            "--find-slow runs across the nodes of a job step: add --multi-node", param_hint="--find-slow"
        )
    gpu_list = _gpu_indices(gpus)
    if data is not None:
        _check_data(data)
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
        sdc=sdc,
        sdc_precision=sdc_precision,
    )
    start = datetime.now(timezone.utc)
    err = progress_console()
    try:
        results = bench_results(options, multi_node, behind if find_slow else None)
    except BenchError as exc:
        error_line(f"dltune bench: {exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc
    if results is None:  # another node of a multi-node run: the first node reports for all
        err.print(f"dltune bench: {visible(socket.gethostname())} took part; the step's first node reports")
        raise typer.Exit(0)
    from dltune.costs.impact import Node, bench_gpus, price

    results = price(results, Node(gpus=bench_gpus(results), use=gpu_use))
    from dltune.outputs.human import render_human
    from dltune.outputs.report import render_json

    now = datetime.now(timezone.utc)
    err.print(f"dltune bench: {len(results)} results in {(now - start).total_seconds():.1f}s")
    host = socket.gethostname()
    if output is BenchFormat.json:
        sys.stdout.write(render_json(results, host, now))
    else:
        render_human(results, stdout_console(), host, what="bench", show_all=show_all)
    raise typer.Exit(exit_code(results))
