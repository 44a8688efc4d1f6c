"""Helpers for the tmpfs_tmp scenario's verifier (runs against the molecule containers)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.molecule_support import audit_report_as_user as audit_as_user
from tests.molecule_support import (  # noqa: F401
    groups_of,
    pytest_runtest_logreport,
    pytest_sessionfinish,
)

__all__ = ["audit_as_user", "groups_of"]


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
