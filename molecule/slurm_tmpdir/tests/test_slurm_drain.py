"""`dltune audit --slurm-drain` (run as root, as a health hook would) on the real Slurm: a critical
fail drains the node with the failing ids as reason, health resumes it, and a drain an admin set for
another reason is never lifted by dltune."""

from __future__ import annotations

import time
from typing import Any

from conftest import BASE


def node_state(host: Any) -> tuple[str, str]:
    out = host.run("sinfo -h -N -o '%T|%E'").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_state(host: Any, wanted: str, timeout: float = 30) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state, reason = node_state(host)
        if state == wanted:
            return state, reason
        time.sleep(0.5)
    raise AssertionError(f"node not {wanted}: {node_state(host)}")


def test_a_critical_fail_drains_and_health_resumes(host: Any) -> None:
    assert host.run(f"chmod 0777 {BASE}").rc == 0  # users could now plant entries at job paths
    try:
        broken = host.run("dltune audit --only staging --slurm-drain --format json")
        assert broken.rc == 1, broken.stderr
        _state, reason = wait_state(host, "drained")
        assert reason == "dltune: staging.slurm_hooks"
    finally:
        host.run(f"chmod 0755 {BASE}")
    healthy = host.run("dltune audit --only staging --slurm-drain --format json")
    assert healthy.rc == 0, healthy.stderr
    assert "resumed" in healthy.stderr
    wait_state(host, "idle")


def test_an_admins_drain_is_left_alone(host: Any) -> None:
    host.run("scontrol update nodename=$(hostname -s) state=drain reason=maintenance")
    try:
        wait_state(host, "drained")
        done = host.run("dltune audit --only staging --slurm-drain --format json")
        assert done.rc == 0, done.stderr
        state, reason = node_state(host)
        assert state == "drained" and reason == "maintenance"
    finally:
        host.run("scontrol update nodename=$(hostname -s) state=resume")
    wait_state(host, "idle")
