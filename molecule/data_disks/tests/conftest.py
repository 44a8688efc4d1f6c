"""Helpers for the data_disks verifier (runs against the molecule container)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SCENARIO.parent.parent))

from tests.molecule_support import audit_as_user as audit_storage_as_user  # noqa: E402
from tests.molecule_support import (  # noqa: E402, F401
    pytest_runtest_logreport,
    pytest_sessionfinish,
    run_playbook,
)


@pytest.fixture
def disks(host: Any) -> dict[str, str]:
    return dict(json.loads(host.file("/etc/dltune-test/disks.json").content_string))


def attach_loop(host: Any, image: str) -> str:
    """Attach IMAGE to a free loop device in the container, as prepare does (tests/lab/attach-loop.sh
    makes the device node a container lacks), and return the device."""
    script = (SCENARIO.parent.parent / "tests" / "lab" / "attach-loop.sh").read_text()
    return str(host.check_output("sh -c %s attach-loop %s", script, image)).strip()


def audit_as_user(host: Any) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    return audit_storage_as_user(host, "--only", "storage")


def run_role(host: Any, extra_vars: dict[str, Any]) -> tuple[int, list[str], int]:
    """Run the role again through bad_input.yml with these variables: (rc, failure messages, changed)."""
    run = run_playbook(host, SCENARIO / "bad_input.yml", extra_vars)
    return run.rc, run.failures, run.changed
