"""`dltune audit` on this very machine, through the installed console script, as root and as an
ordinary user: valid JSON on stdout, exit 0 or 1 as documented, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DLTUNE = shutil.which("dltune") or str(Path(sys.executable).with_name("dltune"))


def run_audit(*prefix: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, DLTUNE, "audit", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_audit_of_this_host_prints_valid_json_and_a_documented_exit_code() -> None:
    done = run_audit()
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema_version"] == 1
    statuses = {r["status"] for r in doc["results"]}
    assert statuses <= {"pass", "warn", "fail", "skip", "error"}
    assert done.returncode == (1 if "fail" in statuses else 0)
    assert {"storage.tmp_tmpfs", "system.reboot_required"} <= {r["id"] for r in doc["results"]}


def test_only_storage_leaves_the_gpu_driver_alone() -> None:
    """`--only storage` must not touch a GPU driver that may hang: NVML is not even loaded."""
    from dltune.probes.collect import collect_snapshot

    storage_only = collect_snapshot("/", areas=["storage"])
    assert storage_only.nvml.error is not None and storage_only.nvml.error.startswith("not probed")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root to switch user")
def test_audit_runs_as_an_ordinary_user() -> None:
    # The venv and the interpreter it points to (pyenv under /root here) must be reachable by others.
    needed = [Path(DLTUNE).resolve().parent, Path(sys.executable).resolve().parent]
    for path in needed:
        if any(not (p.stat().st_mode & 0o001) for p in (path, *path.parents)):
            pytest.skip(f"{path} is not reachable by other users (the lab containers cover this case)")
    done = run_audit("runuser", "-u", "nobody", "--")
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["results"]
