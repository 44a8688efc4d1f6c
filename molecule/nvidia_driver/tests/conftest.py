"""Helpers for the nvidia_driver verifier (runs on the controller against the molecule containers)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SCENARIO.parent.parent))

from tests.molecule_support import (  # noqa: E402, F401
    PlaybookRun,
    audit_as_user,
    groups_of,
    one_worker_per_node,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    run_playbook,
)

__all__ = ["SCENARIO", "PlaybookRun", "audit_as_user", "groups_of", "run_playbook"]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The three nodes in parallel, each node's tests in file order on one worker."""
    return one_worker_per_node(config, log)


SYS_DIR = "/srv/fake-gpu-sys"


def gpgpu_recommended(host: Any, sys_dir: str = SYS_DIR) -> str:
    """ubuntu-drivers' own choice for the container's synthetic GPUs (`list --gpgpu --recommended`)."""
    cmd = host.run(f"UBUNTU_DRIVERS_SYS_DIR={sys_dir} ubuntu-drivers list --gpgpu --recommended 2>/dev/null")
    assert cmd.rc == 0, cmd.stderr
    drivers = [
        line.split()[0].rstrip(",") for line in cmd.stdout.splitlines() if line.startswith("nvidia-driver-")
    ]
    assert len(drivers) == 1, cmd.stdout
    return drivers[0]


def gpgpu_offer(host: Any, sys_dir: str = SYS_DIR) -> list[str]:
    """What the real ubuntu-drivers in the container offers for its synthetic GPUs (in no order of
    preference: ubuntu-drivers prints a dictionary)."""
    cmd = host.run(f"UBUNTU_DRIVERS_SYS_DIR={sys_dir} ubuntu-drivers list --gpgpu 2>/dev/null")
    assert cmd.rc == 0, cmd.stderr
    return [
        line.split(",")[0].strip() for line in cmd.stdout.splitlines() if line.startswith("nvidia-driver-")
    ]


def dpkg_status(host: Any) -> dict[str, str]:
    """package -> db:Status-Abbrev ("ii", "hi", ...) for every package dpkg knows."""
    out = host.check_output("dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n'")
    return {p: s.strip() for p, s in (line.split(" ", 1) for line in out.splitlines())}


def branch_of(driver_package: str) -> str:
    match = re.match(r"nvidia-driver-([0-9]+)", driver_package)
    assert match, driver_package
    return match.group(1)


@pytest.fixture
def manifest(host: Any) -> dict[str, Any]:
    return dict(json.loads(host.file("/etc/dltune/expected.d/nvidia_driver.json").content_string))
