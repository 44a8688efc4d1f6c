"""One escaping rule for every human output: text from the host or any input (a result's summary and
evidence, a node report's host, problem and file name, a dataset's path, Slurm's node reason, a device
name, a path in an error line) never reaches the terminal raw. Hostile text (ESC, CSI, OSC, C1
controls, bidirectional controls, NUL, carriage return, backspace, bytes that are not UTF-8, the words
"ALL-HEALTHY") goes through every command's human output, through the real CLI (`dltune.cli.run`, the
entry point's boundary), and the bytes written to stdout and stderr must hold no control character
but dltune's own newlines, no C1 control and no format character (Unicode Cf: the bidi controls).

The rule is dltune.text.visible, applied where a result or a node report becomes output and by the
line writers (error_line, output_line); every rich console dltune makes escapes again at its sink
(dltune.outputs.human.HumanConsole, dltune.text.terminal_safe). `test_every_human_writer_is_one_of_the_
escaping_ones` keeps new code on those writers."""

from __future__ import annotations

import ast
import errno
import io
import json
import logging
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.text import Text

# dltune.staging is imported here, before any test: its import reads the host's mount table once
# (dltune.staging.room.HOST), which the unit tests' guard refuses inside a test.
from dltune import cli, staging  # noqa: F401
from dltune.commands.output import VisibleLogFormatter
from dltune.model import DltuneError, Result, Status
from dltune.outputs.human import HumanConsole, console, render_human
from dltune.probes.runner import RecordedRunner
from dltune.snapshot import Snapshot
from dltune.text import terminal_safe, unescape, visible
from tests.conftest import REPO_ROOT

SOME = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NOW = datetime.now(timezone.utc)

BIDI = ("\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
        "\u2066", "\u2067", "\u2068", "\u2069")  # fmt: skip
# What a hostile node, file name or Slurm reason holds: terminal sequences whole and in pieces.
HOSTILE_PIECES = (
    "\x1b",
    "\x1b[2J",  # CSI: clear the screen
    "\x1b[H",
    "\x1b[31m",
    "\x1b]0;owned\x07",  # OSC: set the window title
    "\x1b]8;;http://x/\x1b\\",  # OSC 8 hyperlink, ended by ST
    "\x9b2J",  # the same CSI as one C1 character
    "\x9d0;owned\x9c",
    "\x85",  # NEL
    "\x00",
    "\r",
    "\b",
    "\x07",
    "\x7f",
    "\t",
    "\n",
    "\x0b",
    *BIDI,
    "\u200b",  # zero-width space
    "\ufeff",
    "\U000e0041",  # a tag character
    "\udc9b",  # the byte 0x9b that was not UTF-8 (C1 CSI as a raw byte)
    "\udcff",
    "\\",
    "\\x1b",  # text that looks like an escape
    "ALL-HEALTHY",
    "\nALL-HEALTHY\n",
    "\r0 fail; ALL-HEALTHY",
    "[bold]x[/bold]",
    "/data/x",
    "gpu07",
)
hostile_text = st.lists(st.sampled_from(HOSTILE_PIECES) | st.text(max_size=5), min_size=1, max_size=6).map(
    "".join
)


def _as_name(text: str) -> str:
    """``text`` as a file name this filesystem takes: no NUL, no slash, at most 120 bytes."""
    name = text.replace("\x00", "").replace("/", "")
    while len(os.fsencode(name)) > 120:
        name = name[:-1]
    return name if name not in ("", ".", "..") else f"n{name}"


hostile_name = hostile_text.map(_as_name)


def raw_characters(out: bytes) -> list[str]:
    """What must never reach a terminal from data: controls (but the newline), C1 controls and format
    characters (bidi controls, zero-width characters); and the output must be UTF-8 (strict)."""
    text = out.decode("utf-8")
    return [
        ch
        for ch in text
        if ch != "\n"
        and (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or unicodedata.category(ch) in ("Cf", "Cs"))
    ]


def assert_escaped(out: bytes, err: bytes) -> None:
    assert raw_characters(out) == [], out
    assert raw_characters(err) == [], err


@pytest.fixture
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """No colour forced on: dltune's own output then holds no escape sequence at all."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")


def run_cli(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, bytes]:
    """The CLI in this process, through the entry point's boundary: (exit code, stdout, stderr bytes)."""
    capsysbinary.readouterr()
    code = cli.run(list(argv))
    out, err = capsysbinary.readouterr()
    return code, out, err


def single_line(err: bytes) -> str:
    """The one line a message is: a newline in the data (a fake "ALL-HEALTHY" line) stays in it."""
    lines = err.decode("utf-8").splitlines()
    assert len(lines) == 1, err
    return lines[0]


def fresh_dir(tmp_path: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


# --- the rule -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("control", (*BIDI, "\u200b", "\ufeff", "\u00ad", "\U000e0041", "\x1b", "\x9b"))
def test_visible_escapes_every_bidi_format_and_control_character(control: str) -> None:
    shown = visible(f"a{control}b")
    assert raw_characters(shown.encode()) == []
    assert unescape(shown) == f"a{control}b".encode()


@SOME
@given(text=hostile_text)
def test_the_sink_guard_leaves_escaped_text_as_it_is_and_lets_nothing_through(text: str) -> None:
    shown = visible(text)
    assert terminal_safe(shown) == shown  # what visible escaped passes unchanged: nothing escaped twice
    assert terminal_safe(terminal_safe(text)) == terminal_safe(text)
    assert raw_characters(terminal_safe(text).encode()) == []
    assert raw_characters(shown.encode()) == []
    assert unescape(shown) == os.fsencode(text)  # undecodable bytes come back as the bytes they were


@SOME
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=12))
def test_visible_round_trips_every_code_point(text: str) -> None:
    shown = visible(text)
    assert raw_characters(shown.encode("utf-8")) == []
    assert unescape(shown) == text.encode("utf-8")


# --- (1) the audit's human table ---------------------------------------------------------------------------

STATUSES = st.sampled_from(list(Status))


@st.composite
def hostile_results(draw: st.DrawFn) -> list[Result]:
    """Results whose every text field is hostile; sometimes more than GROUP_ABOVE of one check and
    status, which the table folds into one row naming some subjects."""
    count = draw(st.integers(1, 8))
    check = draw(st.sampled_from(["storage.data_noatime", "gpu.ecc", "nfs.responsive"]))
    status = draw(STATUSES)
    return [
        Result(
            check,
            status,
            draw(hostile_text),
            subject=draw(st.none() | hostile_text),
            evidence={draw(hostile_text): draw(hostile_text)},
            remedy=draw(st.none() | hostile_text),
            shared_dependency=draw(st.none() | hostile_text),
        )
        for _ in range(count)
    ]


@SOME
@given(results=hostile_results(), host=hostile_text, show_all=st.booleans())
def test_the_audit_table_escapes_every_field(
    results: list[Result],
    host: str,
    show_all: bool,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    plain_terminal: None,
) -> None:
    monkeypatch.setattr(
        "dltune.commands.audit.audit_results", lambda *_args, **_kw: (Snapshot(root="/"), list(results), host)
    )
    _, out, err = run_cli(capsysbinary, "audit", *(["--all"] if show_all else []))
    assert_escaped(out, err)
    assert out.startswith(b"dltune audit of ")


@SOME
@given(results=hostile_results(), host=hostile_text)
def test_the_table_in_a_colour_terminal_writes_only_its_own_escape_sequences(
    results: list[Result], host: str
) -> None:
    """With colours on, rich adds SGR sequences (ESC [ ... m) around styled text, nothing else: take
    them out and nothing raw is left."""
    out = io.StringIO()
    terminal = HumanConsole(
        file=out, width=100, force_terminal=True, color_system="truecolor", markup=False, highlight=False
    )
    render_human(results, terminal, host, show_all=True)
    text = out.getvalue()
    assert "\x1b[" in text  # colours were on
    assert raw_characters(re.sub(r"\x1b\[[0-9;]*m", "", text).encode()) == []


# --- (2) dltune report ---------------------------------------------------------------------------------


def _result_dict(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(st.sampled_from(["gpu.ecc", "storage.data_noatime", "bench.matmul"]))
        + draw(st.sampled_from(["", "\x1b[2J", "\u202e"])),
        "area": draw(st.sampled_from(["gpu", "storage", "bench", "\x1b]0;t\x07"])),
        "status": draw(st.sampled_from(["fail", "error", "warn", "pass"])),
        "subject": draw(st.none() | hostile_text),
        "summary": draw(hostile_text),
        "evidence": {draw(hostile_text): draw(hostile_text), "name": draw(hostile_text)},
        "remedy": draw(st.none() | hostile_text),
        "metrics": {"tflops": 100.0},
        "shared_dependency": draw(st.none() | hostile_text),
    }


@st.composite
def node_files(draw: st.DrawFn) -> dict[str, Any]:
    """Node report files by kind: envelopes with hostile hosts and texts, a problem file, a stale one,
    and names for files that cannot be read as reports."""
    names = draw(st.lists(hostile_name, min_size=8, max_size=8))
    envelope = {
        "schema_version": 1,
        "host": draw(hostile_text),
        "time": NOW.isoformat(),
        "valid_until": (NOW + timedelta(hours=1)).isoformat(),
        "results": [_result_dict(draw) for _ in range(draw(st.integers(1, 4)))],
    }
    stale = {**envelope, "valid_until": draw(st.sampled_from(["2000-01-01T00:00:00+00:00", "not a time"]))}
    return {
        "names": names,
        "envelope": envelope,
        "problem": {"problem": draw(hostile_text)},
        "stale": stale,
        "future": {**envelope, "schema_version": 99},
        "link_target": draw(hostile_name),
    }


def write_node_files(directory: Path, files: dict[str, Any]) -> None:
    # Each name ends in its own number: no two files are one node's (whose problems would merge).
    names = [f"{name}-{i}" for i, name in enumerate(files["names"])]
    (directory / f"{names[0]}.audit.json").write_text(json.dumps(files["envelope"]))
    (directory / f"{names[1]}.json").write_text(json.dumps(files["problem"]))
    (directory / f"{names[2]}.audit.json").write_text(json.dumps(files["stale"]))
    (directory / f"{names[3]}.json").write_text(json.dumps(files["future"]))
    (directory / f"{names[4]}.json").write_text('{"schema_version": 1, "results": [')  # broken off
    (directory / f"{names[5]}.json").mkdir()  # a directory: no report
    os.symlink(directory / "gone" / files["link_target"], directory / f"{names[6]}.json")  # unreadable
    os.mkfifo(directory / f"{names[7]}.bench.json")  # a FIFO: never read


@FEW
@given(files=node_files(), html=hostile_name, show_all=st.booleans())
@example(
    files={
        "names": [
            "\x1b]0;owned\x07",
            "\u202eok",
            "\x9b2J",
            "a\x1b[2J",
            "b\rALL-HEALTHY",
            "c\x85",
            "d\udc9b",
            "e\u2066",
        ],
        "envelope": {
            "schema_version": 1,
            "host": "\x1b[2J",
            "results": [{"id": "gpu.ecc", "area": "gpu", "status": "fail", "summary": "\x1b]0;t\x07"}],
        },
        "problem": {"problem": "\x1b[2J\x1b[HALL-HEALTHY\n"},
        "stale": {"schema_version": 1, "valid_until": "2000-01-01T00:00:00+00:00", "results": []},
        "future": {"schema_version": 99, "results": []},
        "link_target": "\x1b]0;t\x07",
    },
    html="\u202e.html",
    show_all=False,
)
def test_report_escapes_hosts_problems_and_every_file_name(
    files: dict[str, Any],
    html: str,
    show_all: bool,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    plain_terminal: None,
) -> None:
    directory = fresh_dir(tmp_path)
    nodes = directory / "nodes"
    nodes.mkdir()
    write_node_files(nodes, files)
    page = directory / f"{html}.html"
    code, out, err = run_cli(capsysbinary, "report", str(nodes), "--html", str(page), *(["--all"] * show_all))
    assert code == 1, err
    assert_escaped(out, err)
    shown = out.decode()
    for kind in ("INVALID", "CRASHED", "UNREADABLE", "STALE"):
        assert kind in shown  # every kind of unusable file is named, escaped
    assert f"HTML report: {visible(str(page.resolve()))}" in shown.splitlines()
    # The HTML page keeps its own rule (html.escape) over the escaped text: valid UTF-8, no raw control.
    assert raw_characters(page.read_bytes()) == []


# --- (3) dltune stage ------------------------------------------------------------------------------------


@SOME
@given(name=hostile_name, directory=st.booleans(), fstype=hostile_text)
def test_stage_plan_escapes_the_source_path(
    name: str,
    directory: bool,
    fstype: str,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The path and the filesystem type it is on (read from the host's mount table: any text)."""
    monkeypatch.setattr("dltune.staging.plan.fstype_of", lambda _path: fstype)
    src = fresh_dir(tmp_path) / name
    if directory:
        src.mkdir()
        (src / name).write_bytes(b"x" * 10)
    else:
        src.write_bytes(b"x" * 10)
    code, out, err = run_cli(capsysbinary, "stage", "--plan", "--nodes", "4", str(src))
    assert code == 0, err
    assert_escaped(out, err)
    first, *advice = out.decode().splitlines()
    assert first.startswith(visible(str(src)) + ": ")
    assert unescape(first).startswith(os.fsencode(src))  # the path's bytes come back whole
    assert first.endswith(f" on {visible(fstype)}")
    assert [line.split(":")[0] for line in advice] == ["memory", "broadcast"]  # no line made by the data


@FEW
@given(name=hostile_name)
def test_stage_escapes_its_summary_and_a_terminal_gets_the_path_escaped(
    name: str,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    plain_terminal: None,
) -> None:
    """The staged path on a pipe is the script's (its bytes, as is); on a terminal it is escaped."""
    work = fresh_dir(tmp_path)
    src = work / name
    src.mkdir()
    (src / name).write_bytes(b"data")
    (work / "local").mkdir()
    code, out, err = run_cli(capsysbinary, "stage", str(src), "--to", str(work / "local"))
    assert code == 0, err
    assert out == os.fsencode(work / "local" / name) + b"\n"
    assert raw_characters(err) == []
    with monkeypatch.context() as patch:  # (one example's: hypothesis runs many in one test)
        patch.setattr("sys.stdout.isatty", lambda: True)
        code, out, err = run_cli(capsysbinary, "stage", str(src), "--to", str(work / "local"))
    assert code == 0, err
    assert_escaped(out, err)
    assert unescape(single_line(out)) == os.fsencode(work / "local" / name)


# --- (4) error lines --------------------------------------------------------------------------------------


def _boundary_errors(text: str) -> list[BaseException]:
    return [
        OSError(errno.EACCES, "Permission denied", text),
        OSError(errno.ENOENT, "No such file or directory", text, None, text + "2"),
        DltuneError(text),
        RuntimeError(text),
    ]


@FEW  # seven runs of the CLI an example
@given(name=hostile_name, text=hostile_text, which=st.integers(0, 3))
def test_error_lines_escape_the_paths_and_texts_they_name(
    name: str,
    text: str,
    which: int,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = tmp_path / "missing" / name
    for argv in (
        ["report", str(missing)],
        ["stage", "--plan", str(missing)],
        ["audit", "--root", str(missing)],
        ["bench", "--device", "\x1b" + text],
        ["audit", "--only", "\x1b" + text],
        ["audit", "--timeout", "\x1b" + text],
    ):
        code, out, err = run_cli(capsysbinary, *argv)
        assert code == 2, (argv, err)
        assert out == b""
        assert_escaped(out, err)
        single_line(err)
    line = single_line(run_cli(capsysbinary, "report", str(missing))[2])
    assert os.fsencode(missing) in unescape(line)  # escaped, nothing dropped

    def fails(*_args: Any, **_kw: Any) -> Any:
        raise _boundary_errors(text)[which]

    monkeypatch.setattr("dltune.commands.audit.audit_results", fails)
    code, out, err = run_cli(capsysbinary, "audit")
    assert code == 2, err
    assert out == b""
    assert_escaped(out, err)
    single_line(err)


@FEW
@given(text=hostile_text)
def test_a_previous_file_that_cannot_be_used_is_an_escaped_line(
    text: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    previous = fresh_dir(tmp_path) / f"{_as_name(text)}.json"
    previous.write_text(json.dumps({"problem": text}))
    code, out, err = run_cli(capsysbinary, "audit", "--root", str(tmp_path), "--previous", str(previous))
    assert code == 2, err
    assert_escaped(out, err)
    single_line(err)


@SOME
@given(text=hostile_text)
def test_verbose_log_lines_are_escaped(text: str) -> None:
    record = logging.LogRecord(
        "dltune", logging.INFO, __file__, 1, "probe could not read %s: %s", (text, text), None
    )
    line = VisibleLogFormatter(logging.BASIC_FORMAT).format(record)
    assert raw_characters(line.encode()) == []
    assert "\n" not in line


# --- (5) the health check's line, with Slurm's node reason -----------------------------------------


def _slurm(reason: str, fails: bool) -> Callable[[], RecordedRunner]:
    shown = (
        "NodeName=gpu7 Arch=x86_64 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=gpu "
        f"Reason={reason} [admin@2026-11-22T08:00:00]"
    )
    recordings: dict[str, dict[str, Any]] = {
        "scontrol -o show node gpu7": {"stdout": shown} if not fails else {"returncode": 1, "stderr": reason},
        "scontrol -o show node": {"stdout": shown},
    }
    return lambda: RecordedRunner(recordings)


@SOME
@given(reason=hostile_text, fails=st.booleans(), command=st.sampled_from(["healthcheck", "audit"]))
@example(reason="\x1b]0;owned\x07\u202e ALL-HEALTHY\x1b[2J", fails=False, command="healthcheck")
@example(reason="maintenance: PSU swap", fails=False, command="healthcheck")
@example(reason="\x9b2J\rALL-HEALTHY", fails=True, command="audit")
def test_the_health_check_line_escapes_slurm_s_node_reason(
    reason: str,
    fails: bool,
    command: str,
    tmp_path: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    plain_terminal: None,
) -> None:
    """A node an admin drained (the reason is theirs, any text) and a scontrol that fails with any
    message: both reach the one line slurmd logs, escaped."""
    reason = reason.replace("\n", " ")  # `scontrol -o` prints one line per node
    results = [Result("gpu.ecc", Status.FAIL, "uncorrected ECC errors", critical=True)]
    answer = (Snapshot(root="/"), results, "gpu7")
    monkeypatch.setattr(f"dltune.commands.{command}.audit_results", lambda *_a, **_k: answer)
    monkeypatch.setattr("dltune.probes.runner.SubprocessRunner", _slurm(reason, fails))
    monkeypatch.setattr("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0)
    extra = ["--slurm-drain", "--format", "json"] if command == "audit" else []
    history = str(fresh_dir(tmp_path) / "history")
    code, out, err = run_cli(capsysbinary, command, *extra, "--slurm-node", "gpu7", "--history-file", history)
    assert code in (0, 1, 2), err
    assert_escaped(b"" if command == "audit" else out, err)  # audit's stdout here is its JSON
    said = [line for line in err.decode().splitlines() if line.startswith(f"dltune {command}")]
    assert len(said) == 1, err
    if not fails and reason.isprintable() and "\\" not in reason and "[" not in reason and reason.strip():
        assert reason.strip() in said[0]  # the admin's reason is said (here as it is: nothing to escape)


# --- (6) the bench's human output ---------------------------------------------------------------------


@SOME
@given(gpu=hostile_text, host=hostile_text, took_part=st.booleans())
def test_the_bench_summary_escapes_device_and_host_names(
    gpu: str,
    host: str,
    took_part: bool,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    plain_terminal: None,
) -> None:
    results = [
        Result(
            "bench.matmul",
            Status.WARN,
            f"cuda:0 {gpu}: 612 TFLOPS bf16, 62% of the spec",
            subject=f"cuda:0:{gpu}",
            evidence={"name": gpu},
            metrics={"tflops": 612.0},
            remedy=f"check {gpu}",
        ),
        Result("bench.run", Status.PASS, f"ran on {gpu}"),
    ]
    monkeypatch.setattr(
        "dltune.commands.bench.bench_results", lambda *_a, **_k: None if took_part else list(results)
    )
    monkeypatch.setattr("socket.gethostname", lambda: host)
    code, out, err = run_cli(capsysbinary, "bench", "--device", "cpu", "--all")
    assert code in (0, 1), err
    assert_escaped(out, err)


@SOME
@given(text=hostile_text)
def test_a_bench_that_cannot_run_is_an_escaped_line(
    text: str, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dltune.bench.measure import BenchError

    def cannot(*_a: Any, **_k: Any) -> Any:
        raise BenchError(f"cuda:0 ({text}) is not usable")

    monkeypatch.setattr("dltune.commands.bench.bench_results", cannot)
    code, out, err = run_cli(capsysbinary, "bench", "--device", "cpu")
    assert code == 2
    assert_escaped(out, err)
    single_line(err)


# --- the writers -----------------------------------------------------------------------------------------

# Every place dltune writes to stdout or stderr other than through the escaping writers: machine
# output (JSON, Prometheus, YAML, the staged path for a script, a broadcast node's protocol line),
# dltune's own constant text, and the writers themselves. A new one must be added here, with a reason.
ALLOWED_WRITES = {
    ("dltune/cli.py", 'typer.echo(f"dltune {dltune.__version__}")'),
    ("dltune/cli.py", "typer.echo(dltune.__version__)"),
    ("dltune/commands/ack.py", "sys.stdout.write(json.dumps("),  # JSON lines: ASCII, escaped by json
    ("dltune/commands/output.py", 'sys.stderr.write(visible(text) + "\\n")'),
    ("dltune/commands/output.py", 'sys.stdout.write(visible(text) + "\\n")'),
    ("dltune/commands/audit.py", "sys.stdout.write(expectations_yaml(root, host_name(root)))"),
    ("dltune/commands/audit.py", "sys.stdout.write(render_json(results, host, now))"),
    ("dltune/commands/audit.py", "sys.stdout.write(render_prometheus(results, now))"),
    ("dltune/commands/bench.py", "sys.stdout.write(render_json(results, host, now))"),
    ("dltune/commands/check.py", "sys.stdout.write(render_json(results, host, now))"),
    ("dltune/commands/remedy.py", "sys.stdout.write("),
    ("dltune/commands/stage.py", 'sys.stdout.buffer.write(os.fsencode(path) + b"\\n")'),
    ("dltune/commands/stage.py", "typer.echo(outcome.line())"),
}
_WRITER = re.compile(r"(?:typer\.echo|click\.echo|print|sys\.std(?:out|err)(?:\.buffer)?\.write)")


def test_every_human_writer_is_one_of_the_escaping_ones() -> None:
    """Human output goes through dltune.outputs.human.console (escaped at the sink) or error_line/output_line
    (escaped whole): no other rich Console is made, and every other write to stdout or stderr is one
    of the machine outputs above."""
    consoles, unexpected = [], []
    for path in sorted((REPO_ROOT / "dltune").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            if called in ("Console", "rich.console.Console") and relative != "dltune/outputs/human.py":
                consoles.append(f"{relative}:{node.lineno}")
            if _WRITER.fullmatch(called):
                call = (ast.get_source_segment(source, node) or "").splitlines()[0].strip()
                if not any(
                    relative == where and call.startswith(allowed) for where, allowed in ALLOWED_WRITES
                ):
                    unexpected.append(f"{relative}:{node.lineno}: {call}")
    assert consoles == []
    assert unexpected == []
    assert (
        "return HumanConsole(" in (REPO_ROOT / "dltune/outputs/human.py").read_text()
    )  # the one console maker


def test_the_one_console_is_the_escaping_one() -> None:
    out = io.StringIO()
    made = console()
    made.file = out
    made.print("a\x1b]0;owned\x1b\\b \u202eALL-HEALTHY")  # not through visible: the sink escapes it
    made.print(Text("c\x9b2J\nd"))
    # rich itself drops BEL, backspace, VT, FF and CR from any Text; what it keeps, the sink escapes.
    made.print(Text("e\x07\x08\r\x1b"))
    assert out.getvalue() == "a\\x1b]0;owned\\x1b\\b \\u202eALL-HEALTHY\nc\\u009b2J\nd\ne\\x1b\n"
