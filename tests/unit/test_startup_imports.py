"""What `dltune audit` loads: the health check runs it on every node every few minutes, and most of its
start-up is imports (benchmarks/audit_speed.py measures the ratio). Each module named here is one a
change once pulled into every audit; the test fails when one comes back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

# Never needed to audit a node: other commands, the fleet's report, the health check (without
# --slurm-drain), the bench, staging, importlib.metadata (the version is a literal), and standard
# modules only a rarer path needs (the host's name is uname's; writers and the ledger's median import
# theirs when they run).
NOT_FOR_AN_AUDIT = (
    "dltune.commands.bench",
    "dltune.commands.check",
    "dltune.commands.stage",
    "dltune.commands.report",
    "dltune.commands.ledger",
    "dltune.commands.ack",
    "dltune.commands.healthcheck",
    "dltune.commands.remedy",
    "dltune.fleet.cluster",
    "dltune.fleet.slurm_health",
    "dltune.bench",
    "dltune.staging",
    "importlib.metadata",
    "socket",
    "tempfile",
    "statistics",
)


# What every command loads, the version too: the shared options and output helpers.
COMMON = {"dltune.commands.options", "dltune.commands.output"}


def loaded_by(argv: list[str]) -> set[str]:
    program = (
        "import io, json, sys, contextlib\n"
        "from dltune import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    cli.run({argv!r})\n"
        "sys.stderr.write(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_an_audit_for_a_machine_does_not_load_rich() -> None:
    """JSON and Prometheus on stdout (the health check, Ansible): the human table's library stays out."""
    for output in ("json", "prometheus"):
        loaded = loaded_by(["audit", "--format", output, "--root", str(FIXTURES / "tmp_tmpfs_ok")])
        assert "dltune.outputs.report" in loaded or output == "prometheus"
        human = sorted(m for m in loaded if m == "rich" or m.startswith(("rich.", "dltune.outputs.human")))
        assert human == [], output


def test_an_audit_loads_only_what_auditing_needs() -> None:
    loaded = loaded_by(["audit", "--format", "json", "--root", str(FIXTURES / "tmp_tmpfs_ok")])
    assert "dltune.commands.audit" in loaded and "dltune.checks" in loaded  # the probe reads what it claims
    assert sorted(m for m in loaded if m.startswith(NOT_FOR_AN_AUDIT)) == []


def test_an_audit_that_compares_with_its_previous_facts_reads_them_without_the_report(tmp_path: Path) -> None:
    """The health check passes --facts-file every run: the counters of the file it replaces are read by
    dltune.fleet.node_files, never by loading the fleet report's renderers."""
    facts = tmp_path / "dltune.fact"
    argv = ["audit", "--format", "json", "--root", str(FIXTURES / "tmp_tmpfs_ok"), "--facts-file", str(facts)]
    loaded_by(argv)  # the first run writes the facts
    assert facts.is_file()
    loaded = loaded_by(argv)
    assert "dltune.fleet.node_files" in loaded
    assert sorted(m for m in loaded if m.startswith(NOT_FOR_AN_AUDIT)) == []


def test_the_help_before_a_command_lists_every_command_and_the_version_loads_none(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`dltune --help audit`: the group's help (eager, before the command) lists them all; `dltune
    --version` and `dltune version` answer without importing any command."""
    from dltune import cli
    from dltune.cli import COMMANDS

    assert cli.run(["--help", "audit"]) == 0
    shown = capsys.readouterr().out
    assert all(f" {name} " in shown for name in COMMANDS), shown
    for argv in (["--version"], ["version"], ["--version", "audit"]):
        loaded = loaded_by(argv)
        assert sorted(m for m in loaded if m.startswith("dltune.commands.") and m not in COMMON) == [], argv


def test_the_whole_help_still_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dltune.cli", "--help"], capture_output=True, text=True, timeout=60,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    from dltune.cli import COMMANDS

    assert done.returncode == 0
    assert all(f" {name} " in done.stdout for name in COMMANDS), done.stdout


@pytest.mark.parametrize("columns", ["0", "abc", "\u00b2", "99999"])
def test_a_columns_that_is_no_width_is_ignored_by_the_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], columns: str
) -> None:
    """rich would print an empty page at COLUMNS=0 and fail on a non-ASCII digit: dltune.cli drops it."""
    from dltune import cli

    monkeypatch.setenv("COLUMNS", columns)
    assert cli.run(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Audit and benchmark" in out and max(len(line) for line in out.splitlines()) <= 200
