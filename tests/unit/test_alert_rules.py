"""monitoring/dltune-rules.yml through Prometheus's own promtool (Debian's prometheus package): the rules
load, their unit tests pass (each alert fires when it should and not before, each recording rule records
what it should), and those tests fail when a rule's boundary moves, so they hold the rules rather than
merely run. The rules and the dashboard name only series dltune writes (docs/metrics.md's tables, and
the textfiles of real health-check runs) or that the rules record."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from dltune.commands.node import drain_policy
from dltune.commands.options import HealthProfile
from dltune.fleet import acks
from dltune.fleet.slurm_health import apply_and_report
from dltune.model import Result, Status
from dltune.outputs.prometheus import render_prometheus
from tests.conftest import REPO_ROOT
from tests.unit.test_slurm_health import FakeSlurm

MONITORING = REPO_ROOT / "monitoring"
RULES = MONITORING / "dltune-rules.yml"
RULES_TEST = MONITORING / "dltune-rules-test.yml"
DASHBOARD = MONITORING / "dltune-dashboard.json"
METRICS_DOC = REPO_ROOT / "docs" / "metrics.md"

ECC_FAIL = [Result("gpu.ecc", Status.FAIL, "uncorrected ECC errors", "2:GPU-5e1f", critical=True)]
ECC_PASS = [Result("gpu.ecc", Status.PASS, "no uncorrected ECC errors", "2:GPU-5e1f", critical=True)]
CLOCKS_FAIL = [Result("gpu.clocks", Status.FAIL, "clocks held down by hardware", "0", critical=True)]
CLOCKS_PASS = [Result("gpu.clocks", Status.PASS, "clocks free", "0", critical=True)]


def health_textfiles(
    runs: Sequence[Sequence[Result]],
    history: Path,
    start: float,
    every: float = 300.0,
    profile: HealthProfile = HealthProfile.drain,
    acknowledgements: Sequence[acks.Ack] = (),
) -> list[str]:
    """The node's Prometheus textfile after each of its health-check runs, one run every ``every``
    seconds from ``start``: `dltune healthcheck`'s path from the audit's results on, with the role's
    defaults (drain limit 10%, flap damping 3 in 24 h, debounce 3 for transient checks, recovery 3 runs
    in 15 min). The node's acknowledgements apply (dltune.fleet.acks.apply), dltune.fleet.slurm_health.
    apply_and_report drains and resumes it in slurmctld's node table behind `scontrol` (FakeSlurm, a
    partition of 30 nodes: Slurm itself runs this path in the lab, tests/integration/test_site_lab.py)
    and keeps its history file, and dltune.outputs.prometheus.render_prometheus writes the run's report."""
    slurm = FakeSlurm({f"gpu{i:02d}": ("IDLE", "gpu", "") for i in range(1, 31)})
    policy = drain_policy("10%", 3, 24, profile)
    textfiles = []
    # The recheck after a drain waits a second for nodes deciding at the same moment: none here.
    with mock.patch("dltune.fleet.slurm_health.RECHECK_DELAY_S", 0.0):
        for index, results in enumerate(runs):
            now = start + index * every
            shown = acks.apply(results, acknowledgements, now)
            _said, added, report = apply_and_report("gpu01", shown, slurm, policy, str(history), now)
            when = datetime.fromtimestamp(now, timezone.utc)
            textfiles.append(render_prometheus([*shown, *added], when, None, report))
    return textfiles


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
    assert checked.returncode == 0 and "SUCCESS: 17 rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    tested = _run(promtool, "test", "rules", RULES_TEST.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr


# The week-long test group reads hourly samples at whole hours only: evaluated hourly it gives the same
# answers as at the file's minute, in 0.3 s instead of 15.
HOURLY_GROUP = "time between failures and time to repair"
WEEK_START = (
    "(sum by (instance) (dltune_health_drained offset 7d) or 0 * sum by (instance) (dltune_health_drained))"
)
PER_CHECK_BIRTH = """dltune_health_check_drains_total
              - clamp_min(
                  dltune_health_check_drains_total
                  - on (instance, job) group_left () increase(dltune_health_drains_total[1d]),
                  0
                )"""


@pytest.mark.parametrize(
    ("original", "moved", "group"),
    [
        (
            "        for: 5m\n        labels:\n          severity: critical",
            "        for: 1m\n        labels:\n          severity: critical",
            "a critical failure fires",
        ),
        (
            "time() - dltune_audit_last_run_timestamp_seconds > 2700",
            "time() - dltune_audit_last_run_timestamp_seconds > 3600",
            "a node whose audit stopped",
        ),
        (
            "            dltune_check_critical == 1\n            and on",
            "            dltune_check_critical >= 0\n            and on",
            "a critical failure fires",
        ),
        ("        for: 30m", "        for: 10m", "an error for 30 minutes"),
        (
            'check="system.drain_limit", status="warn"',
            'check="system.drain_limit", status="fail"',
            "an error for 30 minutes",
        ),
        ("[1d]))) >= 3", "[1d]))) >= 2", "2 drains of a node in a day"),
        ("[1d]))) >= 3", "[2d]))) >= 3", "2 drains of a node in a day"),
        # The check's counter born at its first drain: increase() alone misses that drain.
        (PER_CHECK_BIRTH, "increase(dltune_health_check_drains_total[1d])", "2 drains of a node in a day"),
        # Without the counter's own drains as the cap, a node first watched today counts its past.
        (PER_CHECK_BIRTH, "dltune_health_check_drains_total", "2 drains of a node in a day"),
        ("7 * 86400 - sum by", "6 * 86400 - sum by", HOURLY_GROUP),
        # A drain that began before the week and ended in it is a drain ended.
        (WEEK_START, "0", HOURLY_GROUP),
        (
            "- sum by (instance) (dltune_health_drained)\n",
            "- 0 * sum by (instance) (dltune_health_drained)\n",
            HOURLY_GROUP,
        ),
        (
            "dltune_health_failing_runs < dltune_health_needed_runs",
            "dltune_health_failing_runs <= dltune_health_needed_runs",
            "the fleet's health check now",
        ),
        (
            "(dltune_health_needed_runs > dltune_health_failing_runs)",
            "(dltune_health_needed_runs >= dltune_health_failing_runs)",
            "a transient critical failure fires once it failed its debounce's runs, not while pending",
        ),
        ("== 1) >= 5\n", "== 1) >= 4\n", "one check failing on 5 nodes"),
        (
            "scalar(count(dltune_build_info)) >= 0.1",
            "scalar(count(dltune_build_info)) >= 0.09",
            "one check failing on 5 nodes",
        ),
        ("- time() < 86400 > 0", "- time() < 90000 > 0", "an acknowledged finding"),
        # An acknowledgement that ended stays in the textfile until the node's next audit.
        ("- time() < 86400 > 0", "- time() < 86400", "an acknowledged finding"),
    ],
)
def test_the_unit_tests_fail_when_a_rule_boundary_moves(
    tmp_path: Path, original: str, moved: str, group: str
) -> None:
    """Only the test group that holds the boundary runs, against the moved rule: it must fail. The
    week-long group, evaluated hourly here, must first pass against the rules as shipped."""
    promtool = _promtool()
    text = RULES.read_text()
    assert text.count(original) == 1, original
    tests = yaml.safe_load(RULES_TEST.read_text())
    tests["tests"] = [t for t in tests["tests"] if t["name"].startswith(group)]
    assert len(tests["tests"]) == 1, group
    if group == HOURLY_GROUP:
        tests["evaluation_interval"] = "1h"
    (tmp_path / RULES_TEST.name).write_text(yaml.safe_dump(tests))
    if group == HOURLY_GROUP:
        (tmp_path / RULES.name).write_text(text)
        shipped = _run(promtool, "test", "rules", RULES_TEST.name, cwd=tmp_path)
        assert shipped.returncode == 0, shipped.stdout + shipped.stderr
    (tmp_path / RULES.name).write_text(text.replace(original, moved))
    tested = _run(promtool, "test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert tested.returncode != 0, tested.stdout


# A metric or recorded name in PromQL, once the quoted label values are taken out.
_NAME = re.compile(r"(?<![\w:.])[A-Za-z_:][\w:]*")


def _names(expr: str) -> set[str]:
    return {n for n in _NAME.findall(re.sub(r'"[^"]*"', '""', expr)) if "dltune" in n}


def _rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def _documented() -> set[str]:
    """The metrics of docs/metrics.md's tables, and the measurements its examples name."""
    text = METRICS_DOC.read_text()
    tables = set(re.findall(r"^\| `(dltune_\w+)` \|", text, re.M))
    measurements = text[text.index("**Measurements**") : text.index("```promql")]
    return tables | set(re.findall(r"`(dltune_\w+)`", measurements))


def _rendered(tmp_path: Path) -> set[str]:
    """Every sample name a node's textfiles carry through a transient drain, its recovery, its resume
    and an acknowledged finding."""
    runs = [CLOCKS_PASS, *[CLOCKS_FAIL] * 3, *[CLOCKS_PASS] * 4, ECC_FAIL]
    rma = acks.Ack("gpu.ecc", None, "alice", "RMA 4711", 1.9e9 - 60, 1.9e9 + 86400)
    textfiles = health_textfiles(runs, tmp_path / "history.json", 1.9e9, acknowledgements=[rma])
    return {
        line.split("{")[0].split(" ")[0]
        for text in textfiles
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_the_rules_and_the_dashboard_name_only_series_dltune_writes(tmp_path: Path) -> None:
    """A name dltune does not write (a typo, a series renamed without the rules) would make a rule or a
    panel empty, silently: an alert that never fires."""
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    known = _documented() | _rendered(tmp_path)
    dashboard = json.loads(DASHBOARD.read_text())
    sources = [(rule.get("record") or rule["alert"], rule["expr"]) for rule in _rules()] + [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    unknown = [
        (source, name)
        for source, expr in sources
        for name in sorted(_names(expr))
        if name not in (recorded if ":" in name else known)
    ]
    assert unknown == [], unknown
    assert {name for _, expr in sources for name in _names(expr)} >= recorded, (
        "a recorded series no one reads"
    )


def test_every_series_of_the_health_check_and_the_acknowledgements_has_its_row_in_docs_metrics(
    tmp_path: Path,
) -> None:
    rendered = _rendered(tmp_path)
    tables = set(re.findall(r"^\| `(dltune_\w+)` \|", METRICS_DOC.read_text(), re.M))
    new_in_3 = {n for n in rendered if n.startswith(("dltune_health_", "dltune_check_acknowledged"))}
    assert len(new_in_3) == 16 and new_in_3 <= tables, sorted(new_in_3 - tables)
    assert {n for n in tables if n.startswith("dltune_health_")} <= rendered
