"""examples/gpu-first-run.sh (issue 46): it printed nothing and exited 0 when every step in it
failed. Each step now says on stderr whether it did its part; the script exits 1 naming the steps
that failed, 0 only when all did (a dltune verdict with findings, exit 1, is one that did). Run
with stand-ins on a PATH of their own: no GPU, no dltune, no PyTorch is needed or touched."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "gpu-first-run.sh"
TOOLS = ("date", "timeout", "mkdir", "sleep")  # what the script and the stand-ins run beside builtins
STEPS = ("nvidia-smi-L", "nvidia-smi-q", "collect_env", "audit-gpu", "audit-all", "bench")


def _bin(tmp_path: Path, **programs: str) -> Path:
    """A PATH holding only the tools the script needs and the given stand-ins (name -> sh body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    for name, body in programs.items():
        program = bin_dir / name
        program.write_text(f"#!/bin/sh\n{body}\n")
        program.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(SCRIPT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), **env},
        timeout=60,
    )


DLTUNE = 'case "$1" in audit) echo "{}"; exit ${AUDIT_RC:-0};; bench) echo "{}"; exit ${BENCH_RC:-0};; esac'
WORKING = {"nvidia-smi": 'echo "GPU 0: stand-in ($*)"', "python3": "echo collect_env", "fakedltune": DLTUNE}


def test_every_step_done_exits_0_and_says_so(tmp_path: Path) -> None:
    done = _run(tmp_path, _bin(tmp_path, **WORKING), DLTUNE="fakedltune", AUDIT_RC="1")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[:6] == [
        "gpu-first-run: nvidia-smi-L: done",
        "gpu-first-run: nvidia-smi-q: done",
        "gpu-first-run: collect_env: done",
        "gpu-first-run: audit-gpu: done (exit 1: findings, in audit.json)",
        "gpu-first-run: audit-all: done (exit 1: findings, in audit-all.json)",
        "gpu-first-run: bench: done",
    ]
    assert lines[6:] == [f"gpu-first-run: all 6 steps done; the files are in {tmp_path / 'out'}"]
    out = tmp_path / "out"
    assert (out / "nvidia-smi-L.txt").read_text() == "GPU 0: stand-in (-L)\n"
    assert (out / "audit.json").read_text() == "{}\n" and done.stdout == ""
    assert "== bench: exit 0 after" in (out / "log.txt").read_text()


def test_a_node_where_every_step_fails_exits_1_naming_them(tmp_path: Path) -> None:
    """The issue's case: nothing installed. Every step is named with why, and the exit code is 1."""
    done = _run(tmp_path, _bin(tmp_path), DLTUNE="dltune")
    assert done.returncode == 1
    log = tmp_path / "out" / "log.txt"
    programs = ("nvidia-smi", "nvidia-smi", "python3", "dltune", "dltune", "dltune")
    for step, program in zip(STEPS, programs, strict=True):
        why = f"{program}: not found or not executable, exit 127"
        assert f"gpu-first-run: {step}: FAILED ({why}); see {log}" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"gpu-first-run: 6 of 6 steps failed: {' '.join(STEPS)}; what the others wrote is in "
        f"{tmp_path / 'out'}"
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"BENCH_RC": "2"}, "gpu-first-run: bench: FAILED (exit 2); see "),
        (
            {"BENCH_TIMEOUT": "1", "BENCH_RC": "slow"},
            "gpu-first-run: bench: FAILED (stopped at its 1s limit, exit 124)",
        ),
    ],
)
def test_one_failed_step_fails_the_script_and_the_others_still_run(
    tmp_path: Path, env: dict[str, str], said: str
) -> None:
    """A dltune error (exit 2: no verdict) or a step past its time limit fails the script; the steps
    before it kept their files."""
    programs = dict(WORKING)
    if env.get("BENCH_RC") == "slow":
        programs["fakedltune"] = DLTUNE.replace('bench) echo "{}"', "bench) sleep 30")
    done = _run(tmp_path, _bin(tmp_path, **programs), DLTUNE="fakedltune", **env)
    assert done.returncode == 1
    assert said in done.stderr
    assert done.stderr.splitlines()[-1].startswith("gpu-first-run: 1 of 6 steps failed: bench;")
    assert (tmp_path / "out" / "audit-all.json").read_text() == "{}\n"


def test_a_missing_outdir_is_a_usage_error(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run(
        [bash, str(SCRIPT)], capture_output=True, text=True, check=False, env=dict(os.environ)
    )
    assert (done.returncode, done.stderr) == (2, "usage: gpu-first-run.sh OUTDIR\n")
