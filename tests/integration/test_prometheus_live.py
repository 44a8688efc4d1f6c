"""The alert rules, the recording rules and the dashboard against a real Prometheus 2.42 scraping real
node_exporters (Debian's packages) that read textfiles written by real dltune runs. Two nodes are real
`dltune audit` runs, one healthy and one with a lost GPU (only the GPUs are fake, at NVML:
tests/fakenvml, the scenarios in tests/fixtures/nvml/). Seven more are the Slurm health check's
textfiles, run after run: dltune.fleet.slurm_health.apply_and_report drains and resumes each node in
slurmctld's node table behind `scontrol` (the FakeSlurm of tests/unit/test_slurm_health.py; Slurm itself
runs that path in the lab, tests/integration/test_site_lab.py) and dltune.outputs.prometheus.render_prometheus
writes its report: a node drained for gpu.ecc and resumed three times, five nodes failing nfs.responsive
at once (pending a drain: the debounce), one of them in observe, and a node whose ECC finding an
operator acknowledged until 12 hours from now. Prometheus is served those textfiles in the order of the
runs, so it sees the counters rise. Everything runs in a network namespace of its own (`unshare
--net`): no packet leaves it.

DltuneCriticalFailure must fire for the lost GPU only: never for the acknowledged finding, nor for the
failing NFS while it is pending its debounce's runs (the health check has not drained for it);
DltuneNodeFailingRepeatedly for the node drained three times, DltuneCheckFailingOnManyNodes for
nfs.responsive, DltuneAcknowledgementExpiring for the acknowledgement; every recording rule must return
series, with the values the runs imply, and every panel of monitoring/dltune-dashboard.json too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dltune.commands.options import HealthProfile
from dltune.fleet import acks
from dltune.model import Result, Status
from tests.conftest import REPO_ROOT
from tests.integration.test_fake_nvml import fake_nvml_dir, scenario_env  # noqa: F401 (a fixture)
from tests.unit.test_alert_rules import ECC_FAIL, ECC_PASS, health_textfiles

DASHBOARD = REPO_ROOT / "monitoring/dltune-dashboard.json"
RUN_EVERY = 300.0  # slurm_healthcheck_interval's default
NFS_PASS = [Result("nfs.responsive", Status.PASS, "statfs answered in 3 ms", "10.0.0.1", critical=True)]
NFS_SLOW = [Result("nfs.responsive", Status.FAIL, "statfs took 7 s (limit 2 s)", "10.0.0.1", critical=True)]
NFS_NODES = [f"nfs{i}" for i in range(1, 6)]


def needed(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        assert not os.environ.get("CI"), f"{program} is not installed (tests/lab/lab.sh installs it)"
        pytest.skip(f"{program} is not installed")
    return found


def _textfile(library: Path, scenario: str, directory: Path) -> Path:
    directory.mkdir()
    env = scenario_env(library, scenario)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dltune",
            "audit",
            "--only",
            "gpu,driver,fabric",
            "--textfile-dir",
            str(directory),
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return directory


def _runs(directory: Path, runs: list[list[Result]], now: float, **health: Any) -> Path:
    """``directory`` with the node's textfile after each run (run-N.prom), the last run now."""
    directory.mkdir()
    start = now - (len(runs) - 1) * RUN_EVERY
    for index, text in enumerate(
        health_textfiles(runs, directory / "history.json", start, RUN_EVERY, **health)
    ):
        (directory / f"run-{index:02d}.prom").write_text(text)
    return directory


def test_prometheus_alerts_records_and_draws_what_real_audits_and_health_check_runs_write(
    tmp_path: Path,
    fake_nvml_dir: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    for program in ("prometheus", "prometheus-node-exporter", "unshare"):
        needed(program)
    library = fake_nvml_dir
    healthy = _textfile(library, "healthy_8gpu", tmp_path / "healthy")
    lost = _textfile(library, "one_gpu_lost", tmp_path / "lost")
    now = time.time()
    # Drained at each ECC fail, resumed at each pass (a hard check's drain ends at its first pass).
    flaky = _runs(tmp_path / "flaky", [ECC_PASS, ECC_FAIL] * 3 + [ECC_PASS], now)
    rma = acks.Ack("gpu.ecc", None, "alice", "RMA 4711", now - 3600, now + 12 * 3600)
    acked = _runs(
        tmp_path / "acked", [ECC_FAIL], now, acknowledgements=[rma], profile=HealthProfile.remediate
    )
    slow_nfs = [
        _runs(
            tmp_path / name,
            [NFS_PASS, NFS_SLOW],
            now,
            profile=HealthProfile.observe if name == "nfs5" else HealthProfile.drain,
        )
        for name in NFS_NODES
    ]
    replays = [
        f"--replay={name}={path}"
        for name, path in [("flaky", flaky), ("acked", acked), *zip(NFS_NODES, slow_nfs, strict=True)]
    ]
    seen = alerts_and_panels(
        ["--node", f"healthy={healthy}", "--node", f"lost={lost}", *replays],
        broken="lost",
        launcher=["unshare", "--net"],
        more_alerts=[
            "DltuneNodeFailingRepeatedly@flaky",
            "DltuneCheckFailingOnManyNodes@check=nfs.responsive",
            "DltuneAcknowledgementExpiring@acked",
        ],
    )
    assert_fires_for_only(seen, "lost", health_panels=True)
    firing = {
        (a["labels"]["alertname"], a["labels"].get("instance") or a["labels"].get("check"))
        for a in seen["alerts"]
        if a["state"] == "firing"
    }
    assert firing == {
        ("DltuneCriticalFailure", "lost"),
        ("DltuneNodeFailingRepeatedly", "flaky"),
        ("DltuneCheckFailingOnManyNodes", "nfs.responsive"),
        ("DltuneAcknowledgementExpiring", "acked"),
    }, firing
    recorded = {
        name: {
            tuple(sorted((k, v) for k, v in s["labels"].items() if k != "__name__")): s["value"]
            for s in series
        }
        for name, series in seen["recorded"].items()
    }
    assert [name for name, series in recorded.items() if not series] == [], recorded
    flaky_node = (("instance", "flaky"),)
    assert recorded["instance_check:dltune_health_drains:increase1d"] == {
        (("check", "gpu.ecc"), *flaky_node): 3
    }
    assert recorded["instance:dltune_health_drains:increase7d"][flaky_node] == 3
    # 900 s drained over 3 drains ended; increase() extrapolates the seconds by the share of a scrape
    # interval in the few seconds Prometheus watched.
    assert 300 <= recorded["instance:dltune_health_time_to_repair_seconds:mean7d"][flaky_node] < 360
    between = recorded["instance:dltune_health_time_between_failures_seconds:mean7d"][flaky_node]
    assert (7 * 86400 - 1100) / 3 < between <= (7 * 86400 - 900) / 3
    assert recorded[":dltune_health_drained_nodes:sum"] == {(): 0}
    assert recorded["profile:dltune_health_nodes:sum"] == {
        (("profile", "drain"),): 5,
        (("profile", "observe"),): 1,
        (("profile", "remediate"),): 1,
    }
    assert recorded["check:dltune_health_pending_nodes:count"] == {(("check", "nfs.responsive"),): 5}
    assert recorded["check:dltune_failing_nodes:count"][(("check", "nfs.responsive"),)] == 5


def alerts_and_panels(
    exporters: list[str], broken: str, launcher: list[str] | None = None, more_alerts: Sequence[str] = ()
) -> dict[str, Any]:
    """tests/lab/prometheus_live.py over ``exporters`` (its --node, --replay or --target arguments) with
    the shipped rules and dashboard, waiting for DltuneCriticalFailure on ``broken`` and for each of
    ``more_alerts`` (ALERTNAME@NODE or ALERTNAME@LABEL=VALUE): what it saw."""
    done = subprocess.run(
        [
            *(launcher or []), sys.executable, str(REPO_ROOT / "tests/lab/prometheus_live.py"), *exporters,
            "--rules", str(REPO_ROOT / "monitoring/dltune-rules.yml"),
            "--dashboard", str(DASHBOARD),
            "--wait-alert", f"DltuneCriticalFailure@{broken}",
            *(f"--wait-alert={alert}" for alert in more_alerts),
        ],
        capture_output=True, text=True, check=False, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def _health_panel(expr: str) -> bool:
    """A panel that reads the health check's series or the acknowledgements (directly or recorded)."""
    return "dltune_health_" in expr or "dltune_check_acknowledged" in expr


def assert_fires_for_only(
    seen: dict[str, Any], broken: str, also_critical: Sequence[str] = (), health_panels: bool = False
) -> None:
    """The critical alert fired for ``broken`` (and the ``also_critical`` nodes) and no other node; every
    dashboard panel has series, those of the health check's and the acknowledgements' series only with
    ``health_panels`` (an audit alone writes neither: nodes without `dltune healthcheck` leave them
    empty)."""
    assert seen["up"], seen
    (fired,) = seen["fired"][f"DltuneCriticalFailure@{broken}"]
    assert (
        fired["labels"]["severity"] == "critical"
        and f"{broken}: a critical dltune check fails" in fired["annotations"]["summary"]
    ), fired
    critical = sorted(
        a["labels"].get("instance", "")
        for a in seen["alerts"]
        if a["labels"]["alertname"] == "DltuneCriticalFailure"
    )
    assert critical == sorted([broken, *also_critical]), seen["alerts"]
    panels = {
        panel["title"]: all(_health_panel(target["expr"]) for target in panel["targets"])
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        if panel.get("targets")
    }
    assert sorted(seen["panels"]) == sorted(panels), "two panels with one title"
    empty = [
        title
        for title, series in seen["panels"].items()
        if series == 0 and (health_panels or not panels[title])
    ]
    assert empty == [], seen["panels"]
