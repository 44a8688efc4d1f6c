"""The molecule verifiers' platform-skip accounting, run by pytest itself on a small suite: a test
meant for a group of nodes that no node belongs to fails the run instead of skipping on every node.
The hosts are stand-ins for testinfra's (only their group names and hostname matter here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

CONFTEST = """
import pytest
from tests.molecule_support import pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401


class Host:
    def __init__(self, name, groups):
        self.name, self.groups = name, groups
        self.ansible = self
        self.backend = self

    def get_variables(self):
        return {"group_names": self.groups}

    def get_hostname(self):
        return self.name


@pytest.fixture(params=[("jammy", ["tmp_clean"]), ("noble", ["tmp_busy"])], ids=["jammy", "noble"])
def host(request):
    return Host(*request.param)
"""

SUITE = """
from tests.molecule_support import only_on


def test_everywhere(host):
    assert host


def test_clean_only(host):
    only_on(host, group="tmp_clean", why="the clean node")


def test_{name}(host):
    only_on(host, group="{group}", why="a renamed group")
"""


def run_suite(tmp_path: Path, group: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE.format(name="renamed", group=group))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_a_test_that_ran_on_some_node_passes_and_is_counted(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "tmp_busy")
    assert done.returncode == 0, done.stdout
    assert "platform skips: 2 test(s) skip on some nodes; 2 of them ran on another" in done.stdout


def test_a_test_that_ran_on_no_node_fails_the_run(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "tmp_gone")
    assert done.returncode == 1, done.stdout
    assert "RAN ON NO NODE: test_suite.py::test_renamed" in done.stdout
