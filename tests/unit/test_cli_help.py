"""Every `--help` reads whole at a terminal's or a job log's width (issue 46): dltune's own and that of
every command the app registers (hidden ones aside), rendered at 80 and 100 columns as the entry
point renders them (``cli.run``, COLUMNS set, stdout not a terminal; one rendering is compared with a
real `python -m dltune.cli ... --help` in a pipe). Each rendering has no line wider than the width, no
cell rich cut short ("…"), no ragged break (a line in a paragraph or a help cell that ends where the
next line's first word would still have fitted: a line break from the source, not from the width),
and names every option the command declares. A command's help (its docstring and its options' help)
names only options the command has; a quoted command line (`dltune CMD ...`) only options of CMD.
And human output into a pipe is as wide as COLUMNS says, else LOG_COLUMNS, whatever COLUMNS holds."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
import typer

from dltune import cli
from dltune.commands.output import LOG_COLUMNS, console_width
from tests.conftest import REPO_ROOT

WIDTHS = (80, 100)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CODE_SPAN = re.compile(r"`([^`]*)`")
# What typer adds below an option's help, each its own item (not a continuation of the help's text).
TYPER_ITEM = re.compile(r"\[(default|env var|required)\b")


def _group() -> Any:
    return typer.main.get_command(cli.app)


def _commands() -> dict[str, Any]:
    """Every command the app registers and `dltune --help` lists (hidden ones aside), by name."""
    group = _group()
    context = group.context_class(group, info_name="dltune")
    found = {name: group.get_command(context, name) for name in group.list_commands(context)}
    return {name: command for name, command in found.items() if command is not None and not command.hidden}


COMMANDS = _commands()
# (argv before --help, the click command): dltune's own help, then each command's.
HELPS = [((), _group()), *(((name,), command) for name, command in COMMANDS.items())]


def render(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], width: int
) -> str:
    """`dltune ARGV --help` through the entry point's boundary, into a pipe COLUMNS=width wide."""
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    assert cli.run([*argv, "--help"]) == 0
    out, _ = capsys.readouterr()
    return ANSI.sub("", out)  # a CI that forces colour (typer reads FORCE_COLOR, GITHUB_ACTIONS)


def _last_gap_end(text: str) -> int | None:
    """Where the last cell of a table line starts: after its last run of two spaces or more that
    follows other text (the help text itself holds single spaces only)."""
    gaps = [m.end() for m in re.finditer(r"(?<=\S) {2,}(?=\S)", text)]
    return gaps[-1] if gaps else None


def ragged_breaks(text: str, width: int) -> list[str]:
    """Every line followed by a continuation of the same paragraph or help cell whose first word would
    have fitted on it: rich wraps greedily at the width, so such a break came from the source."""
    found: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("╭"):  # a panel: a table whose last column is the help
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("╰"))
            found += _ragged_in_panel([row[2:-2] for row in lines[index + 1 : end]])
            index = end + 1
            continue
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line.strip() and following.strip() and not following.startswith("╭"):
            room = width - 2  # the help's paragraphs: one column of padding on each side
            if len(line.strip()) + 1 + len(following.split()[0]) <= room:
                found.append(f"{line.strip()!r} / {following.strip()!r}")
        index += 1
    return found


def _ragged_in_panel(rows: list[str]) -> list[str]:
    starts = Counter(x for x in (_last_gap_end(row.rstrip()) for row in rows) if x is not None)
    if not starts:
        return []
    column = starts.most_common(1)[0][0]  # where the help column starts
    found = []
    for row, following in itertools.pairwise(rows):
        cell, next_cell = row[column:].rstrip(), following[column:].strip()
        continues = not following[:column].strip() and next_cell and not TYPER_ITEM.match(next_cell)
        if continues and cell and len(cell) + 1 + len(next_cell.split()[0]) <= len(row) - column:
            found.append(f"{cell.strip()!r} / {next_cell!r}")
    return found


def option_names(command: Any) -> set[str]:
    return {
        name
        for param in command.params
        for name in (*param.opts, *getattr(param, "secondary_opts", ()))
        if name.startswith("--")
    }


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(("argv", "command"), HELPS, ids=["dltune", *COMMANDS])
def test_help_reads_whole_at_the_width(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    command: Any,
    width: int,
) -> None:
    text = render(monkeypatch, capsys, argv, width)
    assert "Usage: dltune" in text
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert too_wide == [], "\n".join(too_wide)
    cut = [line for line in text.splitlines() if "…" in line]
    assert cut == [], "a cell cut short:\n" + "\n".join(cut)
    assert ragged_breaks(text, width) == [], text
    shown = set(OPTION.findall(text))
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if param.param_type_name == "argument":
            assert param.name in text, (argv, param.name)
        else:
            assert {n for n in (*param.opts, *param.secondary_opts) if n.startswith("--")} <= shown, (
                param.opts
            )


def _help_texts(command: Any) -> list[str]:
    return [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]


@pytest.mark.parametrize(("argv", "command"), HELPS, ids=["dltune", *COMMANDS])
def test_help_names_only_options_the_command_has(argv: tuple[str, ...], command: Any) -> None:
    """An option its help names is the command's own (healthcheck has no --slurm-drain); a quoted
    command line gives options of the command it quotes (`dltune check --dcgm 2` in audit's help), or
    of another program (`srun --nodes=N`)."""
    for text in _help_texts(command):
        for span in CODE_SPAN.findall(text):
            words = span.split()
            if words[:1] == ["dltune"]:
                assert words[1] in COMMANDS, (argv, span)
                assert set(OPTION.findall(span)) <= option_names(COMMANDS[words[1]]), (argv, span)
        prose = CODE_SPAN.sub(lambda span: span[0] if span[1].startswith("-") else "", text)
        assert set(OPTION.findall(prose)) <= option_names(command), (argv, text)


def test_each_help_paragraph_is_one_line_in_the_source_typer_reads() -> None:
    """The cause of a ragged break, at its root: typer keeps a docstring's line breaks (in
    `dltune --help`'s list and below a command's first paragraph), rich an option help's."""
    for argv, command in HELPS:
        for text in _help_texts(command):
            paragraphs = text.split("\n\n")
            assert all("\n" not in paragraph for paragraph in paragraphs), (argv, text)


def test_the_drain_bounds_name_the_option_that_drains_in_each_command() -> None:
    """audit drains with --slurm-drain, healthcheck unless --no-drain (issue 46)."""
    texts = {name: " ".join(_help_texts(COMMANDS[name])) for name in ("audit", "healthcheck", "remedy")}
    assert "With --slurm-drain: do not drain while" in texts["audit"]
    assert "--slurm-drain" not in texts["healthcheck"] and "Do not drain while" in texts["healthcheck"]
    assert "With --record-resume: where this node's drain/resume history is kept" in texts["remedy"]


def test_the_rendering_here_is_the_one_a_pipe_gets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the other tests render in this process is what `dltune healthcheck --help | less` shows."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "GITHUB_ACTIONS", "PY_COLORS")}
    piped = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "healthcheck", "--help"],
        env={**env, "COLUMNS": "80", "TERM": "dumb", "NO_COLOR": "1"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert piped.stdout == render(monkeypatch, capsys, ("healthcheck",), 80)


# ------------------------------------------------------------------------------ output into a pipe


def audit_lines(columns: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    audited = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "audit", "--root", "tests/fixtures/tmp_tmpfs_ok"],
        env={**env, "NO_COLOR": "1"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert audited.returncode in (0, 1), audited.stderr
    return audited.stdout.splitlines()


def test_a_pipe_honours_columns() -> None:
    """A job log or `| less` with COLUMNS=100: the table takes 100 columns, not 160 nor 80."""
    lines = audit_lines("100")
    assert max(len(line) for line in lines) == 100, "\n".join(lines)


@pytest.mark.parametrize("columns", [None, "0", "abc", "99999"], ids=["unset", "zero", "text", "huge"])
def test_a_pipe_without_a_usable_columns_is_log_wide(columns: str | None) -> None:
    lines = audit_lines(columns)
    assert 100 < max(len(line) for line in lines) <= LOG_COLUMNS, "\n".join(lines)


class _Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no descriptor")


@pytest.mark.parametrize(
    ("columns", "terminal", "width"),
    [
        ("100", False, 100),
        ("100", True, 100),
        (None, False, LOG_COLUMNS),
        (None, True, None),  # rich asks the terminal
        ("0", False, LOG_COLUMNS),
        ("19", False, LOG_COLUMNS),
        ("4097", False, LOG_COLUMNS),
        ("", False, LOG_COLUMNS),
        (" 90", False, LOG_COLUMNS),
        ("٩٠", False, LOG_COLUMNS),  # digits, not ASCII ones
        ("0", True, 80),  # rich would take 0: the terminal's own (none here: 80)
    ],
)
def test_console_width(
    monkeypatch: pytest.MonkeyPatch, columns: str | None, terminal: bool, width: int | None
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert console_width(_Stream(terminal), LOG_COLUMNS) == width
