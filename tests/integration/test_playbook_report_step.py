"""The controller's report step of playbooks/audit.yml and bench.yml (playbooks/tasks/merge_report.yml),
run by the real ansible-playbook on localhost with no node in the play: a controller without dltune
fails the play with a message that says how to install it (it used to end green with no report, reading
"No module named dltune" as findings); a report that crashes fails it; dltune's own 0/1 let it pass."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("ansible")
PLAYBOOKS = ("playbooks/audit.yml", "playbooks/bench.yml")


def run_play(playbook: str, report_dir: Path, executable: str) -> subprocess.CompletedProcess[str]:
    # No host of its own: the merge play runs on Ansible's implicit localhost, as on a controller.
    inventory = report_dir.parent / "empty-inventory.yml"
    inventory.write_text("all: {}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [
            "ansible-playbook", playbook, "-i", str(inventory),
            "-e", json.dumps({"dltune_hosts": "no_such_group", "dltune_report_dir": str(report_dir),
                              "dltune_report_executable": executable}),
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=300, env=env,
    )  # fmt: skip


def one_node_report(report_dir: Path) -> None:
    report_dir.mkdir(exist_ok=True)
    node = {"schema_version": 1, "host": "node1", "results": [
        {"id": "storage.noatime", "area": "storage", "status": "fail", "summary": "relatime on /data",
         "subject": "/data", "evidence": {}, "remedy": None, "metrics": {}, "critical": False}]}  # fmt: skip
    (report_dir / "node1.bench.json").write_text(json.dumps(node))


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_a_controller_without_dltune_fails_the_play_saying_how_to_install_it(
    playbook: str, tmp_path: Path
) -> None:
    done = run_play(playbook, tmp_path / "report", str(tmp_path / "no-dltune-here"))
    assert done.returncode != 0, done.stdout[-2000:]
    assert "cannot run on the controller" in done.stdout and "install dltune there" in done.stdout
    assert "dltune_report_executable=" in done.stdout, done.stdout[-2000:]


def test_a_report_that_crashes_fails_the_play(tmp_path: Path) -> None:
    """A stand-in executable that answers --help but exits 1 with no output when it should report:
    the play must not read that as "findings"."""
    fake = tmp_path / "dltune"
    fake.write_text('#!/bin/sh\n[ "$2" = --help ] && exit 0\necho "No module named dltune" >&2\nexit 1\n')
    fake.chmod(0o755)
    done = run_play("playbooks/audit.yml", tmp_path / "report", str(fake))
    assert done.returncode != 0, done.stdout[-2000:]
    assert "Run dltune report on the controller" in done.stdout


def test_findings_in_the_report_keep_the_play_green_and_write_the_report(tmp_path: Path) -> None:
    dltune = shutil.which("dltune")
    if dltune is None:
        pytest.skip("dltune is not on PATH (make venv)")
    report_dir = tmp_path / "report"
    one_node_report(report_dir)
    done = run_play("playbooks/bench.yml", report_dir, dltune)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (report_dir / "cluster.json").is_file() and (report_dir / "report.html").is_file()
    assert "node1" in done.stdout and "relatime on /data" in json.dumps(
        json.loads((report_dir / "cluster.json").read_text())
    )
