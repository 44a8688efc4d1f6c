"""Helpers for the slurm_tmpdir verifier: jobs submitted as unprivileged users to the real Slurm
in the molecule container, and waits until the Epilog has run."""

from __future__ import annotations

import base64
import re
import sys
import time
from pathlib import Path
from typing import Any

SCENARIO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SCENARIO.parent.parent))

from tests.molecule_support import (  # noqa: E402, F401
    audit_as_user,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    run_playbook,
    run_playbook_per_case,
)

__all__ = [
    "SCENARIO",
    "audit_as_user",
    "run_playbook",
    "run_playbook_per_case",
    "submit",
    "wait_gone",
    "write_as",
]

BASE = "/localscratch"
# --export=NONE: the job gets nothing from the submitting shell, so what it sees came from Slurm's hooks.
JOB_HEADER = "#!/bin/bash\nset -eu\nexport PATH=/usr/local/bin:/usr/bin:/bin\n"


def write_as(host: Any, user: str, path: str, content: str, mode: str = "0644") -> None:
    blob = base64.b64encode(content.encode()).decode()
    cmd = host.run(
        f"echo {blob} | base64 -d | runuser -u {user} -- tee {path} >/dev/null && chmod {mode} {path}"
    )
    assert cmd.rc == 0, cmd.stderr


def submit(host: Any, user: str, body: str, *, hold: bool = False, name: str = "job") -> str:
    """Submit a batch job as ``user``; returns its id (held jobs start on `scontrol release`)."""
    script = f"/home/{user}/{name}.sh"
    write_as(host, user, script, JOB_HEADER + body, "0755")
    flags = "--hold " if hold else ""
    cmd = host.run(
        f"cd /home/{user} && runuser -u {user} -- sbatch --parsable --export=NONE {flags}"
        f"-o /home/{user}/{name}-%j.out {script}"
    )
    assert cmd.rc == 0, cmd.stderr
    return cmd.stdout.strip().split(";")[0]


def wait_gone(host: Any, job: str, timeout: float = 120) -> None:
    """Until the job has left squeue: it has ended and its Epilog has run (COMPLETING is listed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not host.run(f"squeue -h -j {job} 2>/dev/null").stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} still in squeue after {timeout}s: {host.run('squeue').stdout}")


def job_output(host: Any, user: str, job: str, name: str = "job") -> str:
    return host.file(f"/home/{user}/{name}-{job}.out").content_string


def field(output: str, key: str) -> str:
    match = re.search(rf"^{key} (.*)$", output, re.MULTILINE)
    assert match, f"no '{key}' line in the job output:\n{output}"
    return match.group(1).strip()
