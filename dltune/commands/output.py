"""How commands write: one-line errors and messages escaped whole, the rich consoles for tables and
progress, output files checked before any work and written atomically, and the interrupt."""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dltune.model import EXIT_USAGE_OR_ERROR
from dltune.text import visible

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130


def interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


# Human output reaches a terminal through three writers only (tests/unit/test_human_output_escaping.py
# holds every command to it): the rich consoles of dltune.outputs.report.console (tables, progress, messages:
# escaped at the sink), and these two line writers, which escape the whole line with dltune.text's rule
# (a line is composed of raw data: paths given, exception texts, Slurm's reasons). JSON, Prometheus,
# YAML and the staged path piped to a script are machine output, written as they are.


def error_line(text: str) -> None:
    """One line on stderr, whole (never folded at a terminal's width, never read as markup), with host
    and user text escaped: what every command prints when it stops on an error."""
    sys.stderr.write(visible(text) + "\n")
    sys.stderr.flush()


def output_line(text: str) -> None:
    """One line of human output on stdout, whole and escaped as ``error_line``'s."""
    sys.stdout.write(visible(text) + "\n")
    sys.stdout.flush()


class VisibleLogFormatter(logging.Formatter):
    """Log records (``--verbose``) name paths the probes could not read: escaped as any other line."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def check_output_file(path: Path, hint: str) -> None:
    """An output path that cannot be written is a usage error before any work (exit 2), not a traceback
    after it. The file is replaced by a rename: an existing FIFO, device or socket there (/dev/stdout,
    /dev/null) is refused, never replaced by a file."""
    from dltune.files.safeio import file_kind

    try:
        existing = path.stat() if path.exists() else None  # through links: /dev/stdout is a pipe here
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            wanted = "a file" if stat.S_ISDIR(existing.st_mode) else "a regular file"
            raise typer.BadParameter(
                f"{path} is {file_kind(existing.st_mode)}: give {wanted}", param_hint=hint
            )
        parent = output_target(path).parent
        if not parent.is_dir():
            raise typer.BadParameter(f"{parent} is not a directory", param_hint=hint)
    except OSError as exc:  # a name too long, a directory above that this user cannot search
        raise typer.BadParameter(f"{exc.filename or path}: {exc.strerror or exc}", param_hint=hint) from exc
    if not os.access(parent, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{parent} is not writable by this user", param_hint=hint)
    from dltune.files.dirfd import UnsafeEntry, check_replaceable, open_parent

    try:  # as root: another user's link or directory on the way, refused before any work
        directory, name, shown = open_parent(str(path))
        try:
            check_replaceable(directory, name, shown)
        finally:
            os.close(directory)
    except UnsafeEntry as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from exc
    except OSError as exc:
        raise typer.BadParameter(f"{exc.filename or path}: {exc.strerror or exc}", param_hint=hint) from exc


def output_target(path: Path) -> Path:
    """Where an output file is written: through its symbolic links (the rename that writes it atomically
    must replace the file a link names, never the link: /dev/stdout redirected to a file is a link)."""
    return Path(os.path.realpath(path))


def check_directory(path: Path, hint: str) -> None:
    """A directory option or argument that must exist: a usage error naming it otherwise."""
    try:
        if path.is_dir():
            return
    except OSError as exc:
        raise typer.BadParameter(f"{path}: {exc.strerror or exc}", param_hint=hint) from exc
    raise typer.BadParameter(f"{path} is not a directory", param_hint=hint)


def write_output(path: Path, text: str, hint: str) -> None:
    try:
        from dltune.files.dirfd import write_atomically

        write_atomically(path, text)
    except OSError as exc:  # e.g. the disk filled up since the check
        error_line(f"dltune: {hint} {path}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc


def stdout_console() -> Console:
    # Piped into a log (Ansible, Slurm), a terminal's 80 columns would fold every summary.
    from dltune.outputs.report import console

    return console(width=None if sys.stdout.isatty() else 160)


def progress_console() -> Console:
    from dltune.outputs.report import console

    return console(stderr=True, soft_wrap=True)  # messages whole in job logs, not folded at 80
