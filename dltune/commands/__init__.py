"""One module per command; this one holds what they share: output formats, argument checks that end
in exit 2 before any work, output files written atomically, and the interrupt handling."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dltune.model import AREAS, EXIT_USAGE_OR_ERROR
from dltune.text import visible

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130
# Every command with a human table takes it: skipped checks are one line unless asked for.
ALL_OPTION = typer.Option("--all", help="List skipped checks too (human output folds them into one line).")


class OutputFormat(str, Enum):
    human = "human"
    json = "json"
    prometheus = "prometheus"


class BenchFormat(str, Enum):
    human = "human"
    json = "json"


def parse_areas(only: str | None) -> list[str] | None:
    if only is None:
        return None
    areas = [a.strip() for a in only.split(",") if a.strip()]
    unknown = [a for a in areas if a not in AREAS]
    if unknown or not areas:
        raise typer.BadParameter(
            f"unknown area(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(AREAS)}",
            param_hint="--only",
        )
    return areas


def interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def check_output_file(path: Path, hint: str) -> None:
    """An output path that cannot be written is a usage error before any work (exit 2), not a traceback
    after it."""
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a directory: give a file", param_hint=hint)
    parent = path.parent
    if not parent.is_dir():
        raise typer.BadParameter(f"{parent} is not a directory", param_hint=hint)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{parent} is not writable by this user", param_hint=hint)


def write_output(path: Path, text: str, hint: str) -> None:
    try:
        from dltune.report import write_atomically

        write_atomically(path, text)
    except OSError as exc:  # e.g. the disk filled up since the check
        from dltune.report import console

        console(stderr=True).print(f"dltune: {hint} {visible(str(path))}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc


def stdout_console() -> Console:
    # Piped into a log (Ansible, Slurm), a terminal's 80 columns would fold every summary.
    from dltune.report import console

    return console(width=None if sys.stdout.isatty() else 160)


def progress_console() -> Console:
    from dltune.report import console

    return console(stderr=True, soft_wrap=True)  # messages whole in job logs, not folded at 80
