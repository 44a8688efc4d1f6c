"""The options and argument checks the commands share, each declared once: output formats, numeric
options through one type (``Number``) that end in exit 2 before any work, the areas, and the options
`dltune audit`, `healthcheck`, `remedy` and `check` have in common (the Slurm node, the drain bounds,
the node's output files). An option's help names only options of the command it is given to."""

from __future__ import annotations

import enum
import math
import os
import re
from enum import Enum
from typing import TYPE_CHECKING, Any

import typer

from dltune.health_state import DEFAULT_TRANSIENT_RUNS
from dltune.model import AREAS
from dltune.text import visible

if TYPE_CHECKING:
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

ALL_OPTION = typer.Option("--all", help="List skipped checks too (human output folds them into one line).")


class OutputFormat(str, Enum):
    human = "human"
    json = "json"
    prometheus = "prometheus"


class BenchFormat(str, Enum):
    human = "human"
    json = "json"


def format_option(kind: type[Enum]) -> Any:
    """--format, its choices in the help (a metavar of them all would narrow the help's column)."""
    names = [str(member.value) for member in kind]
    return typer.Option(
        "--format",
        metavar="<format>",
        help=f"Output format on stdout: {', '.join(names[:-1])} or {names[-1]}.",
    )


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


# Options `dltune audit` shares with `dltune healthcheck` (and `dltune remedy`).
TEXTFILE_DIR_OPTION = typer.Option(
    "--textfile-dir", help="Also write dltune.prom there (node_exporter textfile collector)."
)
FACTS_FILE_OPTION = typer.Option(
    "--facts-file", help="Also write Ansible local facts (e.g. /etc/ansible/facts.d/dltune.fact)."
)
NFS_TIMEOUT_OPTION = seconds_option(
    "--nfs-timeout", help="Seconds an NFS mount may take to answer before it counts as stale."
)
SLURM_NODE_OPTION = typer.Option(
    "--slurm-node", help="Slurm node name (default: $SLURMD_NODENAME, then the short hostname)."
)


def slurm_node_name(given: str | None, environ: bool = True) -> str:
    """The one Slurm node this command may change: --slurm-node, else $SLURMD_NODENAME (where
    ``environ``), else the short hostname; a name that is not one plain node name (a hostlist, a
    list) is an InputError naming where it came from."""
    from dltune.fleet.slurm_health import checked_node_name

    if given is not None:
        return checked_node_name(given, "--slurm-node")
    if environ and os.environ.get("SLURMD_NODENAME"):
        return checked_node_name(os.environ["SLURMD_NODENAME"], "SLURMD_NODENAME")
    return checked_node_name(os.uname().nodename.split(".")[0], "the short hostname")


# The drain bounds' options, shared by `dltune audit` (which drains with --slurm-drain) and `dltune
# healthcheck` (which drains unless --no-drain), and the history file `dltune remedy --record-resume`
# writes too. Where their help names the option they need, each command's is made for it (needs=).
# In `--help` they form their own panel: a table's help column is what its other columns leave (rich
# shares the width out), and the drain toggles' --no-... column would narrow the whole table's.
DRAIN_PANEL = "Drain and resume"


def _needs(option: str | None, help: str) -> str:
    """``help`` of an option that matters only with ``option``, which it then names first."""
    return f"With {option}: {help}" if option else help[:1].upper() + help[1:]


def drain_limit_option(needs: str | None) -> Any:
    return typer.Option(
        "--drain-limit",
        help=_needs(
            needs,
            "do not drain while dltune has drained this many nodes of this node's partitions already: a "
            "count (5) or a share (10%, at least 2). A system.drain_limit warning says so.",
        ),
        rich_help_panel=DRAIN_PANEL,
    )


def flap_count_option(needs: str | None) -> Any:
    return number_option(
        "--flap-count",
        kind=int,
        minimum=1,
        maximum=1000,
        help=_needs(
            needs,
            "a node dltune resumed this many times within --flap-window and failing again stays drained "
            "as flapping (an operator resumes it).",
        ),
        rich_help_panel=DRAIN_PANEL,
    )


def history_file_option(needs: str | None, panel: str | None = DRAIN_PANEL) -> Any:
    return typer.Option(
        "--history-file",
        help=_needs(needs, "where this node's drain/resume history is kept (root's)."),
        rich_help_panel=panel,
    )


FLAP_WINDOW_OPTION = number_option(
    "--flap-window",
    kind=float,
    minimum=0.01,
    maximum=24 * 365,
    help="Hours the resumes are counted over.",
    rich_help_panel=DRAIN_PANEL,
)
PROFILE_OPTION = typer.Option(
    "--profile",
    metavar="<profile>",  # the choices are in the help: a wide column would narrow the help's
    help="observe: judge and report only; drain: drain and resume; remediate: drain, and "
    "playbooks/remediate.yml may act on the node.",
    rich_help_panel=DRAIN_PANEL,
)
DEBOUNCE_OPTION = typer.Option(
    "--debounce",
    help="Consecutive failing runs before a critical fail drains: CLASS=N for a class (hard, transient; "
    f"defaults hard=1, transient={DEFAULT_TRANSIENT_RUNS}) or CHECK=N for one check (gpu.clocks=5). "
    "Repeat it.",
    rich_help_panel=DRAIN_PANEL,
)
RECOVERY_RUNS_OPTION = number_option(
    "--recovery-runs",
    kind=int,
    minimum=1,
    maximum=1000,
    help="A node drained for a transient check is resumed after this many consecutive passing runs, "
    "spanning --recovery-window.",
    rich_help_panel=DRAIN_PANEL,
)
RECOVERY_WINDOW_OPTION = number_option(
    "--recovery-window",
    kind=float,
    minimum=0.0,
    maximum=7 * 24 * 60,
    help="Minutes that the passing runs of --recovery-runs span at least.",
    rich_help_panel=DRAIN_PANEL,
)


class HealthProfile(str, enum.Enum):
    observe = "observe"
    drain = "drain"
    remediate = "remediate"
