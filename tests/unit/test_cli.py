"""The CLI through typer's CliRunner, with its JSON parsed."""

from __future__ import annotations

import json
from datetime import datetime

from typer.testing import CliRunner

from dltune import SCHEMA_VERSION, __version__
from dltune.cli import app
from tests.conftest import FIXTURES

runner = CliRunner()


def audit(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["audit", *args])


def test_json_envelope_of_a_fixture_tree() -> None:
    out = audit("--root", str(FIXTURES / "tmp_tmpfs_ok"), "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["tool_version"] == __version__
    assert datetime.fromisoformat(doc["valid_until"]) > datetime.fromisoformat(doc["time"])
    ids = {r["id"]: r for r in doc["results"]}
    tmp = ids["storage.tmp_tmpfs"]
    assert tmp["status"] == "pass" and tmp["area"] == "storage" and tmp["subject"] == "/tmp"
    assert set(tmp) == {
        "id",
        "area",
        "subject",
        "status",
        "summary",
        "evidence",
        "remedy",
        "metrics",
        "critical",
        "shared_dependency",
        "acknowledged",
        "impact",
    }


def test_drift_exits_one_and_only_filters_areas() -> None:
    out = audit("--root", str(FIXTURES / "tmp_drift_managed"), "--format", "json", "--only", "storage")
    assert out.exit_code == 1
    doc = json.loads(out.stdout)
    assert {r["area"] for r in doc["results"]} == {"storage"}
    assert {r["id"]: r["status"] for r in doc["results"]}["storage.tmp_tmpfs"] == "fail"


def test_only_system_skips_storage_findings() -> None:
    out = audit("--root", str(FIXTURES / "tmp_drift_managed"), "--format", "json", "--only", "system")
    assert out.exit_code == 0
    assert sorted(r["id"] for r in json.loads(out.stdout)["results"]) == [
        "system.audit_timeout",
        "system.cpu_governor",
        "system.memory_errors",
        "system.reboot_required",
        "system.time_sync",
        "system.tuning_ledger",
    ]


def test_human_table_names_check_and_status() -> None:
    out = audit("--root", str(FIXTURES / "tmp_pending_reboot"))
    assert out.exit_code == 0
    assert "storage.tmp_tmpfs" in out.stdout and "WARN" in out.stdout


def test_usage_errors_exit_two_and_name_the_option() -> None:
    bad_area = audit("--only", "storage,gpuz")
    assert bad_area.exit_code == 2 and "--only" in bad_area.output and "gpuz" in bad_area.output
    bad_root = audit("--root", "/nonexistent/tree")
    assert bad_root.exit_code == 2 and "--root" in bad_root.output


def test_version() -> None:
    out = runner.invoke(app, ["version"])
    assert out.exit_code == 0 and out.stdout.strip() == __version__
    # --version answers before any command, and whatever follows it is not run.
    eager = runner.invoke(app, ["--version", "audit", "--root", "/nonexistent"])
    assert eager.exit_code == 0 and eager.stdout == f"dltune {__version__}\n"


def test_python_m_dltune_is_the_same_command_line() -> None:
    """`python -m dltune` where only the package is on the path (a wheel installed with --target)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "dltune", "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, f"dltune {__version__}\n"), done.stderr
    usage = subprocess.run(
        [sys.executable, "-m", "dltune", "audit", "--format", "yaml"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_shell_completion_is_offered() -> None:
    out = runner.invoke(app, ["--help"])
    assert "--install-completion" in out.stdout and "--show-completion" in out.stdout


def test_bench_usage_errors_name_the_option_before_anything_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    for argv, option in (
        (["bench", "--device", "tpu"], "--device"),
        (["bench", "--gpus", "zero"], "--gpus"),
        (["bench", "--data", str(tmp_path / "missing")], "--data"),
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert option in result.output
