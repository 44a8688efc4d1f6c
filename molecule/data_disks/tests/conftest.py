"""Helpers for the data_disks verifier (runs against the molecule container)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).resolve().parent.parent


@pytest.fixture
def disks(host: Any) -> dict[str, str]:
    return dict(json.loads(host.file("/etc/dltune-test/disks.json").content_string))


def audit_as_user(host: Any) -> tuple[int, dict[tuple[str, str | None], dict[str, Any]]]:
    cmd = host.run("runuser -u nobody -- dltune audit --only storage --format json")
    assert cmd.rc in (0, 1), cmd.stderr
    return cmd.rc, {(r["id"], r["subject"]): r for r in json.loads(cmd.stdout)["results"]}


def run_role(host: Any, extra_vars: dict[str, Any]) -> tuple[int, list[str], int]:
    """Run the role again through bad_input.yml with these variables: (rc, failure messages, changed)."""
    name = host.backend.get_hostname()
    done = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            "--limit",
            name,
            "-e",
            json.dumps(extra_vars),
            str(SCENARIO / "bad_input.yml"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"},
    )
    report = json.loads(done.stdout)
    failures = []
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get(name, {})
            if not result.get("failed"):
                continue
            # A looped assert fails as "One or more items failed"; its message is in the failed item.
            items = [str(i.get("msg", "")) for i in result.get("results", []) if i.get("failed")]
            failures.append(" | ".join(items) if items else str(result.get("msg", "")))
    return done.returncode, failures, report["stats"][name]["changed"]
