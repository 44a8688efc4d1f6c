"""The alert rules and the dashboard against a real Prometheus 2.42 scraping real node_exporters
(Debian's packages) that read textfiles written by real `dltune audit` runs: one node healthy, one
with a lost GPU. Only the GPUs are fake, at NVML (tests/fakenvml, the scenarios in
tests/fixtures/nvml/). Everything runs in a network namespace of its own (`unshare --net`): no packet
leaves it. DltuneCriticalFailure must fire for the broken node and only for it, and every panel of
monitoring/dltune-dashboard.json must return series."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.test_fake_nvml import fake_nvml_dir, scenario_env  # noqa: F401 (a fixture)


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


def test_a_lost_gpu_fires_its_alert_through_prometheus_and_every_panel_has_data(
    tmp_path: Path,
    fake_nvml_dir: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    for program in ("prometheus", "prometheus-node-exporter", "unshare"):
        needed(program)
    library = fake_nvml_dir
    healthy = _textfile(library, "healthy_8gpu", tmp_path / "healthy")
    lost = _textfile(library, "one_gpu_lost", tmp_path / "lost")
    seen = alerts_and_panels(
        ["--node", f"healthy={healthy}", "--node", f"lost={lost}"],
        broken="lost",
        launcher=["unshare", "--net"],
    )
    assert_fires_for_only(seen, "lost")


def alerts_and_panels(exporters: list[str], broken: str, launcher: list[str] | None = None) -> dict[str, Any]:
    """tests/lab/prometheus_live.py over ``exporters`` (its --node or --target arguments) with the shipped
    rules and dashboard, waiting for DltuneCriticalFailure on ``broken``: what it saw."""
    done = subprocess.run(
        [
            *(launcher or []), sys.executable, str(REPO_ROOT / "tests/lab/prometheus_live.py"), *exporters,
            "--rules", str(REPO_ROOT / "monitoring/dltune-rules.yml"),
            "--dashboard", str(REPO_ROOT / "monitoring/dltune-dashboard.json"),
            "--wait-alert", f"DltuneCriticalFailure@{broken}",
        ],
        capture_output=True, text=True, check=False, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def assert_fires_for_only(seen: dict[str, Any], broken: str) -> None:
    """The critical alert fired for ``broken`` and no other node; every dashboard panel has series."""
    assert seen["up"], seen
    (fired,) = seen["fired"]
    assert (
        fired["labels"]["severity"] == "critical"
        and f"{broken}: a critical dltune check fails" in fired["annotations"]["summary"]
    ), fired
    critical = [(name, node) for name, node, state in seen["alerts"] if name == "DltuneCriticalFailure"]
    assert critical == [("DltuneCriticalFailure", broken)], seen["alerts"]
    empty = [title for title, series in seen["panels"].items() if series == 0]
    assert empty == [] and len(seen["panels"]) == 13, seen["panels"]
