"""Where the lab's nodes mount the base Python of the repository's venv (tests/lab/lib.sh), whose
PyTorch their bench environment imports (tests/lab/torch-env.sh).

A venv made from a stock Ubuntu's python3 has /usr as its base: mounted at its own path, the host's
/usr would hide the node's own (and, read-only, make `docker cp` into it fail: "mounted volume is
marked read-only", where `make lab` stopped). A system prefix goes elsewhere; a Python of its own
prefix (pyenv, /opt) keeps its path, which its build may name inside (an rpath to its libpython).
The lab that runs this is tested by `make lab` itself with each kind of venv (torch-env.sh imports
torch on every node)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

RELOCATED = "/opt/dltune-lab/python-base"


def node_base(base: str, tmp_path: Path) -> str:
    done = subprocess.run(
        ["bash", "-c", 'source tests/lab/lib.sh && lab_torch_node_base "$1"', "node_base", base],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=True,
        env={"PATH": "/usr/bin:/bin", "DLTUNE_LAB_STATE": str(tmp_path / "state"),
             "DLTUNE_BUILD_DIR": str(tmp_path / "build")},
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("base", "on_the_node"),
    [
        ("/usr", RELOCATED),
        ("/usr/local", RELOCATED),
        ("/", RELOCATED),
        ("/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7"),
        ("/opt/python/3.11", "/opt/python/3.11"),
        ("/usrlocal/python", "/usrlocal/python"),
    ],
)
def test_a_system_prefix_is_mounted_apart_and_any_other_at_its_own_path(
    base: str, on_the_node: str, tmp_path: Path
) -> None:
    assert node_base(base, tmp_path) == on_the_node
