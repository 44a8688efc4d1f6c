"""One module per command; this one holds what they share: output formats, argument checks that end
in exit 2 before any work (numeric options through one type, ``Number``), output files written
atomically, error lines, and the interrupt handling."""

from __future__ import annotations

import logging
import math
import os
import re
import stat
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dltune.model import AREAS, EXIT_USAGE_OR_ERROR
from dltune.text import visible

if TYPE_CHECKING:
    from rich.console import Console
    from typer._click import Context, Parameter
    from typer._click import exceptions as click_exceptions
    from typer._click import types as click_types
else:
    try:  # typer 0.2x carries its own copy of click, which its options and errors use
        from typer._click import Context, Parameter
        from typer._click import exceptions as click_exceptions
        from typer._click import types as click_types
    except ImportError:  # earlier typer: click itself
        from click import Context, Parameter
        from click import exceptions as click_exceptions
        from click import types as click_types

# What a usage error is (dltune.cli's error boundary prints it as one line).
ClickException = click_exceptions.ClickException

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


# Seconds any timeout option may be given: a millisecond to a day.
MIN_SECONDS = 0.001
MAX_SECONDS = 86_400.0
_FLOAT_TEXT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_INT_TEXT = re.compile(r"[-+]?[0-9]+")
_MAX_NUMBER_TEXT = 40  # characters: int() refuses 4300 digits with a ValueError; no option needs 40


class Number(click_types.ParamType):
    """Every numeric option of every command: ASCII decimal text only (float() and int() also take
    "nan", "inf", "1e999", "1_0" and other scripts' digits), finite, within [minimum, maximum]. Anything
    else is a usage error naming the option (exit 2) before any work. Use it through ``number_option``
    (or ``typer.Option(click_type=Number(...))``), whose help states the range."""

    def __init__(self, kind: type[int] | type[float], minimum: float, maximum: float) -> None:
        self.kind = kind
        self.minimum = minimum
        self.maximum = maximum
        self.name = "integer" if kind is int else "number"

    def describe(self) -> str:
        return f"{self.minimum:g} to {self.maximum:g}"

    def convert(self, value: Any, param: Parameter | None, ctx: Context | None) -> Any:
        what = "an integer" if self.kind is int else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.fail(f"{value!r} is not {what}", param, ctx)
        if isinstance(value, str):
            pattern = _INT_TEXT if self.kind is int else _FLOAT_TEXT
            if len(value) > _MAX_NUMBER_TEXT or not pattern.fullmatch(value):
                self.fail(
                    f"{visible(value[:_MAX_NUMBER_TEXT])!r} is not {what} ({self.describe()})", param, ctx
                )
            number: float = self.kind(value)
        else:
            number = value
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number ({self.describe()})", param, ctx)
        if self.kind is int and number != int(number):
            self.fail(f"{value} is not {what}", param, ctx)
        if not self.minimum <= number <= self.maximum:
            self.fail(f"{value} is out of range: give {self.describe()}", param, ctx)
        return self.kind(number)


def number_option(
    *names: str, kind: type[int] | type[float], minimum: float, maximum: float, help: str, **extra: Any
) -> Any:
    """A typer option of ``kind`` checked by ``Number``; its help ends with the accepted range."""
    number = Number(kind, minimum, maximum)
    stated = f"{help.rstrip('.')} ({number.describe()})" + ("." if help.endswith(".") else "")
    return typer.Option(*names, click_type=number, help=stated, **extra)


def seconds_option(
    *names: str, help: str, minimum: float = MIN_SECONDS, maximum: float = MAX_SECONDS, **extra: Any
) -> Any:
    """A timeout in seconds (a finite number from ``minimum`` to ``maximum``, a day unless said)."""
    return number_option(*names, kind=float, minimum=minimum, maximum=maximum, help=help, **extra)


def gpu_use_option() -> Any:
    """--gpu-use: the share of the day the node's GPUs train, which a finding's GPU-hours scale by."""
    return number_option(
        "--gpu-use",
        kind=float,
        minimum=0.0,
        maximum=1.0,
        help="Share of the day this node's GPUs train: a finding's GPU-hours a day are priced at it "
        "(1.0: around the clock).",
    )


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


# Human output reaches a terminal through three writers only (tests/unit/test_human_output_escaping.py
# holds every command to it): the rich consoles of dltune.report.console (tables, progress, messages:
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
    from dltune.safeio import file_kind

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
    from dltune.dirfd import UnsafeEntry, check_replaceable, open_parent

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
        from dltune.report import write_atomically

        write_atomically(path, text)
    except OSError as exc:  # e.g. the disk filled up since the check
        error_line(f"dltune: {hint} {path}: {exc.strerror or exc}")
        raise typer.Exit(EXIT_USAGE_OR_ERROR) from exc


def stdout_console() -> Console:
    # Piped into a log (Ansible, Slurm), a terminal's 80 columns would fold every summary.
    from dltune.report import console

    return console(width=None if sys.stdout.isatty() else 160)


def progress_console() -> Console:
    from dltune.report import console

    return console(stderr=True, soft_wrap=True)  # messages whole in job logs, not folded at 80
