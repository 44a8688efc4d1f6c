"""The scale lab (tests/scale/scale-lab.sh, docs/scale.md) and the audit playbook over real SSH: 10
sshd-only nodes, host keys checked. `make test-slow` (root, Docker, `make wheelhouse`):

- the audit playbook, run as a fleet runs it (its own ansible.cfg: pipelining, ControlPersist, forks
  25), saves one report per node and merges them: every node in cluster.json with its results;
- a hung node (its container frozen: the kernel takes the TCP connection, sshd never answers) ends as
  an unreachable row naming it, the run not held past the connect timeout;
- a node whose host key is not the one recorded is refused (host key verification), named as such;
- `scale-lab.sh down` leaves none of its containers, network, guard route or keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.lab]
SCALE_LAB = REPO_ROOT / "tests/scale/scale-lab.sh"
STATE = Path("/var/tmp/dltune-scale-test")
NODES = 10
BIN = Path(sys.executable).parent
LABEL = "org.dltune.scale"
SUBNET = "198.19.48.0/24"  # not the benchmark's own, so that a lab left up by it is not touched
CONNECT_TIMEOUT_S = 10


def lab(*arguments: str) -> str:
    env = {**os.environ, "DLTUNE_SCALE_STATE": str(STATE), "DLTUNE_SCALE_SUBNET": SUBNET,
           "DLTUNE_SCALE_NETWORK": "dltune-scale-test"}  # fmt: skip
    done = subprocess.run(["bash", str(SCALE_LAB), *arguments], capture_output=True, text=True, env=env,
                          timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def scale_lab() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the scale lab needs root (Docker, a guard route)")
    if not any((REPO_ROOT / "build/wheelhouse").glob("dltune-*.whl")):
        pytest.skip("no wheelhouse: make wheelhouse")
    running = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}=node"],
                             capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
    if running:
        pytest.skip("a scale lab is up (make scale-lab-down first): its nodes have the names this one needs")
    lab("up", str(NODES))
    try:
        yield STATE / "inventory.yml"
    finally:
        lab("down")


def audit(tmp_path: Path, inventory: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, dict]]:
    config = tmp_path / "ansible.cfg"
    config.write_text(
        "[defaults]\nforks = 25\ninterpreter_python = /usr/bin/python3\nretry_files_enabled = false\n"
        f"timeout = {CONNECT_TIMEOUT_S}\n[ssh_connection]\npipelining = true\n"
        f"ssh_args = -o ControlMaster=auto -o ControlPersist=60s\ncontrol_path_dir = {tmp_path / 'cp'}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / "collections"),
               PATH=f"{BIN}:{env['PATH']}")  # fmt: skip
    report = tmp_path / "report"
    extra = {"dltune_report_dir": str(report), "dltune_report_executable": str(BIN / "dltune")}
    argv = [str(BIN / "ansible-playbook"), "dltune.cluster.audit", "-i", str(inventory)]
    done = subprocess.run(
        [*argv, "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    merged = {n["host"]: n for n in json.loads((report / "cluster.json").read_text())["nodes"]}
    return done, merged


def node(index: int) -> str:
    return f"scale-node-{index:03d}"


def address_of(index: int) -> str:
    return f"{SUBNET.rsplit('.', 1)[0]}.{10 + index}"


def test_the_audit_over_ssh_reports_every_node(scale_lab: Path, tmp_path: Path) -> None:
    done, merged = audit(tmp_path, scale_lab)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert sorted(merged) == [node(i) for i in range(1, NODES + 1)]
    assert all(n["problem"] is None and n["results"] for n in merged.values()), merged
    assert len(list((tmp_path / "report").glob("scale-node-*.audit.json"))) == NODES


def test_a_hung_node_is_named_and_does_not_hold_the_run(scale_lab: Path, tmp_path: Path) -> None:
    lab("hang", "1")
    try:
        start = time.monotonic()
        _, merged = audit(tmp_path, scale_lab)
        took = time.monotonic() - start
    finally:
        lab("unhang")
    hung = merged[node(NODES)]
    assert hung["problem"] and hung["problem"].startswith("unreachable:"), hung
    assert "banner" in hung["problem"] or "timed out" in hung["problem"], hung["problem"]
    assert all(merged[node(i)]["problem"] is None for i in range(1, NODES)), merged
    assert took < 300, took  # the connect timeout, not a hang: the run's ceiling is a generous bound


def test_a_node_whose_host_key_changed_is_refused_and_named(scale_lab: Path, tmp_path: Path) -> None:
    known_hosts = STATE / "known_hosts"
    original = known_hosts.read_text()
    first = node(1)
    keys = {line.split()[0]: line.split()[1:] for line in original.splitlines() if line.strip()}
    # Node i's address is .(10+i) (scale-lab.sh): node 1 is recorded with node 2's key.
    forged = [f"{address} {' '.join(keys[address_of(2)] if address == address_of(1) else key)}"
              for address, key in keys.items()]  # fmt: skip
    known_hosts.write_text("\n".join(forged) + "\n")
    try:
        _, merged = audit(tmp_path, scale_lab)
    finally:
        known_hosts.write_text(original)
    problem = merged[first]["problem"] or ""
    assert problem.startswith("unreachable:") and "Host key verification failed" in problem, problem
    assert all(merged[node(i)]["problem"] is None for i in range(2, NODES + 1)), merged


def test_down_leaves_nothing_of_the_lab(scale_lab: Path) -> None:
    """Last in the module: takes the lab down itself, then up again for the fixture's own down."""
    lab("down")
    containers = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL}=node"],
                                capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    networks = subprocess.run(["docker", "network", "ls", "-q", "--filter", f"label={LABEL}=network"],
                              capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    routes = subprocess.run(
        ["ip", "route", "show", SUBNET], capture_output=True, text=True, check=True
    ).stdout
    assert containers == [] and networks == [] and routes.strip() == "", (containers, networks, routes)
    assert not (STATE / "keys").exists() and not (STATE / "known_hosts").exists()
    lab("up", "1")
