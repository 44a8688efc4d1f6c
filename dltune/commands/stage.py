"""`dltune stage`: copy a dataset onto node-local disk (the work is in dltune.stage)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from dltune.commands import EXIT_INTERRUPTED, interrupt, progress_console
from dltune.text import visible


# long: mostly its option declarations and the progress bar
def stage(
    src: Annotated[
        Path,
        typer.Argument(help="Dataset directory, a tar archive (tar, tar.gz/bz2/xz/zst), or one file."),
    ],
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Destination directory (default: $SLURM_TMPDIR).", envvar="SLURM_TMPDIR"),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Parallel copy streams.", min=1, max=256)] = min(
        16, 4 * (os.cpu_count() or 1)
    ),
    verify: Annotated[
        bool, typer.Option("--verify", help="Compare sizes with the source after copying.")
    ] = False,
    checksum: Annotated[bool, typer.Option("--checksum", help="With --verify, compare SHA-256 too.")] = False,
    plan: Annotated[bool, typer.Option("--plan", help="Only advise: memory, stage, shared or pack.")] = False,
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Replace DIR/<name> when it holds another source, or an older state."),
    ] = False,
) -> None:
    """Copy SRC to DIR/<name> on node-local disk: parallel, resumable, atomic. Prints the staged path.
    Exit 0 staged, 1 refused or failed, 2 usage, 130 interrupted (the partial copy resumes)."""
    from dltune import stage as stage_mod  # not imported by the audit: it runs on every node, often

    if not src.exists():
        raise typer.BadParameter(f"{src} does not exist", param_hint="SRC")
    if plan:
        for line in stage_mod.plan_advice(src):
            typer.echo(line)
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
            summary = stage_mod.stage(
                src,
                to,
                workers=workers,
                verify=verify,
                checksum=checksum,
                replace=replace,
                progress=lambda n: bar.advance(task, n),
                on_total=lambda total: bar.update(task, total=total or None),
            )
        except stage_mod.StageError as exc:
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
    err.print(
        f"staged {visible(str(summary.path))}: {summary.files} files, {summary.bytes / 1e6:.1f} MB copied"
        f" ({summary.skipped} already there) in {summary.seconds:.1f}s, {summary.mb_per_s:.0f} MB/s"
        + (", verified" if summary.verified else "")
        + (f" ({'; '.join(summary.notes)})" if summary.notes else "")
    )
    # The path exactly, as bytes: scripts take it as is (DATA=$(dltune stage ...)).
    sys.stdout.flush()
    sys.stdout.buffer.write(os.fsencode(summary.path) + b"\n")
    sys.stdout.buffer.flush()
