"""nfs_multivip on Ubuntu's network stack: in a lab Ubuntu 22.04 container with netplan.io and two
NICs (a veth pair, addressed by the node's own netplan file), the role picks netplan for the routes'
persistence, and the real `netplan generate` merges its file with the node's: the systemd-networkd
units it renders keep each NIC's address and gain the VIP host routes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.lab
CONTAINER = "dltune-test-netplan"
IMAGE = "dltune-lab/ubuntu:22.04"
NODE_NETPLAN = """\
network:
  version: 2
  ethernets:
    em1: {addresses: [10.21.115.112/24]}
    em2: {addresses: [10.21.115.113/24]}
"""


def sh(*argv: str) -> str:
    return subprocess.run(
        ["docker", "exec", CONTAINER, *argv], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture(scope="module")
def ubuntu() -> Iterator[None]:
    if (
        not shutil.which("docker")
        or subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode
    ):
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail(f"the lab image {IMAGE} is not there (make lab)")
        pytest.skip(f"the lab image {IMAGE} is not there (make lab)")
    subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True, check=False)
    subprocess.run(
        ["docker", "run", "-d", "--name", CONTAINER, "--privileged", IMAGE, "sleep", "infinity"],
        check=True,
        capture_output=True,
    )
    try:
        sh(
            "sh",
            "-c",
            "export DEBIAN_FRONTEND=noninteractive;"
            " apt-get update -qq && apt-get install -y -qq netplan.io >/dev/null",
        )
        sh("ip", "link", "add", "em1", "type", "veth", "peer", "name", "em2")
        sh("ip", "addr", "add", "10.21.115.112/24", "dev", "em1")
        sh("ip", "addr", "add", "10.21.115.113/24", "dev", "em2")
        sh("ip", "link", "set", "em1", "up")
        sh("ip", "link", "set", "em2", "up")
        sh("sh", "-c", f"mkdir -p /etc/netplan && printf '%s' '{NODE_NETPLAN}' > /etc/netplan/50-node.yaml")
        sh("chmod", "600", "/etc/netplan/50-node.yaml")
        yield
    finally:
        subprocess.run(["docker", "rm", "-f", CONTAINER], capture_output=True, check=False)


def test_netplan_renders_the_vip_routes_beside_the_nodes_addresses(ubuntu: None) -> None:
    vips = [
        {"address": "10.21.115.6", "mount_point": "/mnt/nfs0", "interface": "em1", "source": "10.21.115.112"},
        {"address": "10.21.115.7", "mount_point": "/mnt/nfs1", "interface": "em2", "source": "10.21.115.113"},
    ]
    extra = {"nfs_multivip_server_path": "/nfs0", "nfs_multivip_vips": vips, "nfs_multivip_state": "present"}
    done = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            f"{CONTAINER},",
            "-c",
            "community.docker.docker",
            "-e",
            json.dumps(extra),
            "-e",
            "ansible_python_interpreter=/usr/bin/python3",
            str(REPO_ROOT / "tests/integration/playbooks/nfs_multivip.yml"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles")},
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert json.loads(sh("cat", "/etc/dltune/expected.d/nfs_multivip.json"))["route_persistence"] == "netplan"
    sh("netplan", "generate")
    for nic, vip in (("em1", vips[0]), ("em2", vips[1])):
        unit = sh("cat", f"/run/systemd/network/10-netplan-{nic}.network")
        assert f"Address={vip['source']}/24" in unit
        route = unit.split("[Route]", 1)[1]
        assert f"Destination={vip['address']}/32" in route
        assert f"PreferredSource={vip['source']}" in route
        assert "Scope=link" in route
