"""`dltune stage`: copy a dataset onto node-local disk (the work is in dltune.stage)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from dltune.commands.options import number_option
from dltune.commands.output import EXIT_INTERRUPTED, help_paragraphs, interrupt, output_line, progress_console
from dltune.text import visible

# The same limits as dltune.staging.plan's (not imported here: the CLI loads staging only when it runs).
MAX_BWLIMIT, MIN_BWLIMIT = 1e6, 0.001


def _honoured_rate(value: float) -> float:
    """--bwlimit below MIN_BWLIMIT (but not 0, no limit): a read would wait for centuries."""
    if 0 < value < MIN_BWLIMIT:
        raise typer.BadParameter(
            f"{value:g} MB/s cannot be honoured: give 0 (no limit) or MB/s from {MIN_BWLIMIT:g} to "
            f"{MAX_BWLIMIT:.0f}"
        )
    return value


# A Slurm job's node count, as --plan takes it (Slurm's own limit is far below).
MAX_NODES = 1_000_000


# long: mostly its option declarations and the progress bar
@help_paragraphs
def stage(
    src: Annotated[
        Path,
        typer.Argument(help="Dataset directory, a tar archive (tar, tar.gz/bz2/xz/zst), or one file."),
    ],
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Destination directory (default: $SLURM_TMPDIR).", envvar="SLURM_TMPDIR"),
    ] = None,
    workers: Annotated[
        int | None,
        number_option(
            "--workers",
            kind=int,
            minimum=1,
            maximum=256,
            help="Parallel copy streams (default: 4 from a local disk, 16 from a network filesystem).",
        ),
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare sizes with the source after copying.")
    ] = False,
    checksum: Annotated[bool, typer.Option("--checksum", help="With --verify, compare SHA-256 too.")] = False,
    plan: Annotated[
        bool, typer.Option("--plan", help="Only advise: memory, stage, shared, pack or broadcast.")
    ] = False,
    nodes: Annotated[
        int,
        number_option(
            "--nodes",
            kind=int,
            minimum=1,
            maximum=MAX_NODES,
            help="With --plan: the job's node count.",
            envvar="SLURM_JOB_NUM_NODES",
        ),
    ] = 1,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace DIR/<name> when it holds another source, or an older state."),
    ] = False,
    broadcast: Annotated[
        bool,
        typer.Option(
            "--broadcast",
            help="In a Slurm batch script: stage onto every node of the job, reading SRC once (sbcast).",
        ),
    ] = False,
    bwlimit: Annotated[
        float,
        number_option(
            "--bwlimit",
            kind=float,
            minimum=0,
            maximum=MAX_BWLIMIT,
            help="Read SRC at most this fast, in MB/s (0: no limit; else from 0.001).",
            callback=_honoured_rate,
        ),
    ] = 0,
) -> None:
    """Copy SRC to DIR/<name> on node-local disk (DIR: --to): parallel, resumable, atomic.

    Prints the staged path. Exit 0 staged, 1 refused or failed, 2 usage, 130 interrupted (the partial
    copy resumes)."""
    from dltune import staging  # not imported by the audit: it runs on every node, often

    if not src.exists():
        raise typer.BadParameter(f"{src} does not exist", param_hint="SRC")
    if plan:
        for line in staging.plan_advice(src, nodes):  # the source's path and its filesystem type
            output_line(line)
        return
    if to is None:
        raise typer.BadParameter(
            "give --to DIR (or run inside a Slurm job with $SLURM_TMPDIR)", param_hint="--to"
        )
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    err = progress_console()
    with Progress(
        TextColumn("staging {task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(visible(src.name), total=None)
        # SIGTERM (Slurm's scancel, a job's time limit) ends the copy as Ctrl-C does: cleanly, resumable.
        previous = signal.signal(signal.SIGTERM, interrupt)
        try:
            if broadcast:
                _broadcast(src, to, workers, verify, checksum, replace, bwlimit, bar, task)
                return
            summary = staging.stage(
                src,
                to,
                workers=workers,
                verify=verify,
                checksum=checksum,
                replace=replace,
                bwlimit=bwlimit,
                progress=lambda n: bar.advance(task, n),
                on_total=lambda total: bar.update(task, total=total or None),
            )
        except staging.StageError as exc:
            err.print(f"dltune stage: {visible(str(exc))}")
            raise typer.Exit(1) from exc
        except KeyboardInterrupt as exc:
            err.print(
                f"dltune stage: interrupted; the partial copy in {visible(str(to))} is kept and is not "
                "taken as staged: run the same command again to resume"
            )
            raise typer.Exit(EXIT_INTERRUPTED) from exc
        finally:
            signal.signal(signal.SIGTERM, previous)
    err.print(f"staged {visible(str(summary.path))}: {visible(summary.described())}")
    _print_path(summary.path)


def _broadcast(
    src: Path,
    to: Path,
    workers: int | None,
    verify: bool,
    checksum: bool,
    replace: bool,
    bwlimit: float,
    bar: Any,
    task: Any,
) -> None:
    """--broadcast: the outcome of every node, one line each on stderr; the staged path on stdout
    once every node has it; exit 1 naming the nodes that failed."""
    from dltune.staging import broadcast as stage_broadcast

    err = bar.console
    options = stage_broadcast.Options(workers, verify, checksum, replace, bwlimit or None)
    result = stage_broadcast.broadcast(
        src,
        to,
        options,
        say=lambda line: err.print(visible(line), markup=False, highlight=False),
        progress=lambda n: bar.advance(task, n),
        on_total=lambda total: bar.update(task, total=total or None),
    )
    for node in result.nodes:
        state = "staged" if node.ok else "FAILED"
        err.print(visible(f"{node.node}: {state}: {node.message}"), markup=False, highlight=False)
    if result.failed:
        names = ", ".join(n.node for n in result.failed)
        err.print(
            f"dltune stage: {len(result.failed)} node(s) failed: {visible(names)}; run the same command "
            "again in this job to resume (what is complete is kept)",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)
    _print_path(result.path)


def _print_path(path: Path) -> None:
    # The path exactly, as bytes: scripts take it as is (DATA=$(dltune stage ...)). A terminal gets it
    # escaped, as every human output (ls does the same): nobody reads it there but a person.
    if sys.stdout.isatty():
        output_line(str(path))
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(path) + b"\n")
    sys.stdout.buffer.flush()


# long: the hidden options of the three node steps
@help_paragraphs
def stage_node(
    step: Annotated[str, typer.Argument(help="check, finish or direct")],
    to: Annotated[Path, typer.Option("--to")],
    name: Annotated[str, typer.Option("--name")],
    payload: Annotated[Path | None, typer.Option("--payload")] = None,
    identity: Annotated[str, typer.Option("--identity")] = "{}",
    payload_bytes: Annotated[
        int, number_option("--payload-bytes", kind=int, minimum=0, maximum=2**63 - 1, help="Payload size.")
    ] = 0,
    payload_sha256: Annotated[str, typer.Option("--payload-sha256")] = "",
    source: Annotated[Path | None, typer.Option("--source")] = None,
    workers: Annotated[
        int | None, number_option("--workers", kind=int, minimum=1, maximum=256, help="Copy streams.")
    ] = None,
    verify: Annotated[bool, typer.Option("--verify")] = False,
    checksum: Annotated[bool, typer.Option("--checksum")] = False,
    replace: Annotated[bool, typer.Option("--replace")] = False,
    bwlimit: Annotated[
        float,
        number_option(
            "--bwlimit", kind=float, minimum=0, maximum=MAX_BWLIMIT, help="MB/s.", callback=_honoured_rate
        ),
    ] = 0,
) -> None:
    """One node's part of `dltune stage --broadcast` (run by srun, one task per node): prints one
    DLTUNE-NODE line with its outcome. Not for direct use."""
    from dltune.files import safeio
    from dltune.staging import broadcast as stage_broadcast

    options = stage_broadcast.Options(workers, verify, checksum, replace, bwlimit or None)
    try:
        source_identity = safeio.loads(identity)
    except ValueError as exc:
        raise typer.BadParameter(f"not a JSON object: {exc}", param_hint="--identity") from exc
    if not isinstance(source_identity, dict):
        raise typer.BadParameter("not a JSON object", param_hint="--identity")
    if step == "check":
        outcome = stage_broadcast.node_check(to, name, source_identity, payload_bytes, delivered=payload)
    elif step == "finish" and payload is not None:
        outcome = stage_broadcast.node_finish(payload, to, name, source_identity, options, payload_sha256)
    elif step == "direct" and source is not None:
        outcome = stage_broadcast.node_direct(source, to, name, options)
    else:
        raise typer.BadParameter(f"unknown step {step!r} or a missing --payload/--source", param_hint="STEP")
    typer.echo(outcome.line())
    if not outcome.ok:
        raise typer.Exit(1)
