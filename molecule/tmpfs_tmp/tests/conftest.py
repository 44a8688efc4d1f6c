"""Helpers for the tmpfs_tmp scenario's verifier (runs against the molecule containers)."""

from __future__ import annotations

import json
from typing import Any

import pytest


def groups_of(host: Any) -> list[str]:
    return list(host.ansible.get_variables().get("group_names", []))


def audit_as_user(host: Any, *args: str) -> tuple[int, dict[str, Any]]:
    """Run `dltune audit --format json` as an ordinary user, as the contract promises it works."""
    cmd = host.run("runuser -u nobody -- dltune audit --format json " + " ".join(args))
    assert cmd.rc in (0, 1), f"dltune audit exited {cmd.rc}: {cmd.stderr}"
    return cmd.rc, json.loads(cmd.stdout)


def result(report: dict[str, Any], check_id: str) -> dict[str, Any]:
    matches = [r for r in report["results"] if r["id"] == check_id]
    assert len(matches) == 1, f"{check_id} missing from {[r['id'] for r in report['results']]}"
    return matches[0]


@pytest.fixture
def mem_total_kb(host: Any) -> int:
    for line in host.file("/proc/meminfo").content_string.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise AssertionError("no MemTotal in /proc/meminfo")
