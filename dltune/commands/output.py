"""How commands write: one-line errors and messages escaped whole, the rich consoles for tables and
progress, output files checked before any work and written atomically, and the interrupt."""

from __future__ import annotations

import inspect
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import typer

from dltune.model import EXIT_USAGE_OR_ERROR
from dltune.text import visible

if TYPE_CHECKING:
    from rich.console import Console

EXIT_INTERRUPTED = 130


def interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


CommandT = TypeVar("CommandT", bound=Callable[..., Any])


def help_paragraphs(command: CommandT) -> CommandT:
    """A command whose docstring is its help (typer reads it), each paragraph made one line: typer keeps
    a docstring's line breaks (rich prints them where the source broke its lines, ragged at any other
    width), and rich wraps a line at the terminal's width. The first paragraph is the command's line
    in `dltune --help`; paragraphs are separated by a blank line."""
    text = inspect.cleandoc(command.__doc__ or "")
    command.__doc__ = "\n\n".join(" ".join(part.split()) for part in text.split("\n\n"))
    return command


# Human output reaches a terminal through three writers only (tests/unit/test_human_output_escaping.py
# holds every command to it): the rich consoles of dltune.outputs.human.console (tables, progress, messages:
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


# Human output to a pipe or a file (a job log: Ansible, Slurm) with no usable COLUMNS: wide, so that
# a summary is not folded at a terminal's 80 columns. COLUMNS outside MIN_COLUMNS..MAX_COLUMNS, or not
# ASCII digits, is not a width (rich would take "0" as one).
LOG_COLUMNS = 160
MIN_COLUMNS = 20
MAX_COLUMNS = 4096


def usable_columns() -> int | None:
    """COLUMNS where it is a width: ASCII digits, MIN_COLUMNS to MAX_COLUMNS; else None."""
    given = os.environ.get("COLUMNS", "")
    if given.isascii() and given.isdigit() and MIN_COLUMNS <= int(given) <= MAX_COLUMNS:
        return int(given)
    return None


def console_width(stream: TextIO, piped: int) -> int | None:
    """The width a console on ``stream`` renders at: COLUMNS where it is a usable width; else, at a
    terminal, the terminal's (None: rich asks it); else ``piped``."""
    columns = usable_columns()
    if columns is not None:
        return columns
    try:
        terminal = stream.isatty()
    except ValueError:  # a closed stream
        terminal = False
    if not terminal:
        return piped
    if os.environ.get("COLUMNS") is None:
        return None
    try:  # a COLUMNS that is no width, which rich would read: the terminal's own
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


def stdout_console() -> Console:
    """Tables and messages on stdout: at a terminal its width; in a pipe or a file COLUMNS, else
    LOG_COLUMNS (``console_width``)."""
    from dltune.outputs.human import console

    return console(width=console_width(sys.stdout, LOG_COLUMNS))


def progress_console() -> Console:
    """Progress and messages on stderr, each message whole in a job log (soft wrap), not folded."""
    from dltune.outputs.human import console

    return console(stderr=True, soft_wrap=True, width=console_width(sys.stderr, 80))
