"""The install path the docs give, run as written on this machine: `make wheelhouse`'s script with the
system python3 (no dev venv), then a fresh virtualenv that installs dltune from that wheelhouse with
no index, and the installed command answering (`--version`, `python -m dltune`, shell completion, an
audit). Needs PyPI (or the mirror pip is configured for) to fill the wheelhouse, as CI has."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dltune

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("install") / "wheelhouse"
    env = {**os.environ, "PYTHON": SYSTEM_PYTHON, "DLTUNE_WHEELHOUSE": str(target)}
    built = _run(["bash", str(REPO / "tests/lab/wheelhouse.sh")], env=env)
    assert built.returncode == 0, built.stderr
    return target


def test_the_wheelhouse_serves_every_python_and_both_architectures(wheelhouse: Path) -> None:
    """dltune's wheel, and psutil (the one compiled dependency) for x86_64 and aarch64 nodes."""
    names = sorted(p.name for p in wheelhouse.glob("*.whl"))
    assert f"dltune-{dltune.__version__}-py3-none-any.whl" in names
    psutil = [n for n in names if n.startswith("psutil-")]
    assert any("x86_64" in n for n in psutil) and any("aarch64" in n for n in psutil), psutil
    assert Path(f"{wheelhouse}.tar").is_file()


def test_a_fresh_venv_installs_dltune_from_the_wheelhouse_alone_and_it_answers(
    wheelhouse: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    assert _run([SYSTEM_PYTHON, "-m", "venv", str(venv)]).returncode == 0
    pip = _run(
        [str(venv / "bin/pip"), "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), "dltune"]
    )
    assert pip.returncode == 0, pip.stderr
    expected = f"dltune {dltune.__version__}\n"
    assert _run([str(venv / "bin/dltune"), "--version"]).stdout == expected
    assert _run([str(venv / "bin/python"), "-m", "dltune", "--version"]).stdout == expected
    # Typer's completion protocol, as the script `dltune --show-completion bash` installs asks it.
    env = {**os.environ, "_DLTUNE_COMPLETE": "complete_bash", "COMP_WORDS": "dltune au", "COMP_CWORD": "1"}
    assert _run([str(venv / "bin/dltune")], env=env).stdout.split() == ["audit"]
    audit = _run([str(venv / "bin/dltune"), "audit", "--only", "system", "--format", "json"])
    assert audit.returncode in (0, 1), audit.stderr
    assert {r["area"] for r in json.loads(audit.stdout)["results"]} == {"system"}
