"""monitoring/dltune-rules.yml through Prometheus's own promtool (Debian's prometheus package): the
rules load, their unit tests pass (each alert fires when it should and not before), and those tests
fail when a rule's boundary moves, so they hold the rules rather than merely run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

MONITORING = REPO_ROOT / "monitoring"
RULES = MONITORING / "dltune-rules.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        assert not os.environ.get("CI"), "promtool is not installed (Debian package prometheus)"
        pytest.skip("promtool is not installed (apt install prometheus)")
    return found


def _run(*argv: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


def test_the_rules_load_and_their_unit_tests_pass() -> None:
    promtool = _promtool()
    checked = _run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: 7 rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    tested = _run(promtool, "test", "rules", "dltune-rules-test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize(
    ("original", "moved"),
    [
        (
            "        for: 5m\n        labels:\n          severity: critical",
            "        for: 1m\n        labels:\n          severity: critical",
        ),
        (
            "time() - dltune_audit_last_run_timestamp_seconds > 2700",
            "time() - dltune_audit_last_run_timestamp_seconds > 3600",
        ),
        (
            "            dltune_check_critical == 1\n            and on",
            "            dltune_check_critical >= 0\n            and on",
        ),
        ("        for: 30m", "        for: 10m"),
        ('check="system.drain_limit", status="warn"', 'check="system.drain_limit", status="fail"'),
    ],
)
def test_the_unit_tests_fail_when_a_rule_boundary_moves(tmp_path: Path, original: str, moved: str) -> None:
    promtool = _promtool()
    text = RULES.read_text()
    assert text.count(original) == 1, original
    (tmp_path / "dltune-rules.yml").write_text(text.replace(original, moved))
    shutil.copy(MONITORING / "dltune-rules-test.yml", tmp_path)
    tested = _run(promtool, "test", "rules", "dltune-rules-test.yml", cwd=tmp_path)
    assert tested.returncode != 0, tested.stdout
