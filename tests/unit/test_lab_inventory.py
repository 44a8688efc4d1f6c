"""inventory/lab_vm.py, run by real ansible-inventory beside inventory/lab.yml: the lab's NFS VM is a
node of the inventory only while its QEMU runs, so `-i inventory` never lists a node that cannot
answer. QEMU is not started here: a copy of `sleep` named qemu-system-x86_64 stands in for its
process (only its PID file and process name are read); the real VM is listed and reached in
tests/integration/test_nfs_multivip_vm.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

VM = "dltune-lab-nfsvm"


def inventory_groups(lab_state: Path) -> dict[str, dict[str, list[str]]]:
    done = subprocess.run(
        ["ansible-inventory", "-i", "inventory", "--list"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "DLTUNE_LAB_STATE": str(lab_state),
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
        },
    )
    groups: dict[str, dict[str, list[str]]] = json.loads(done.stdout)
    return groups


@pytest.fixture
def qemu_like(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    binary = tmp_path / "qemu-system-x86_64"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", binary)
    process = subprocess.Popen([str(binary), "600"])
    yield process
    process.kill()
    process.wait()


def write_pid(lab_state: Path, pid: int) -> None:
    (lab_state / "vm").mkdir(parents=True, exist_ok=True)
    (lab_state / "vm/qemu.pid").write_text(f"{pid}\n")


def test_without_a_vm_only_the_containers_are_listed(tmp_path: Path) -> None:
    groups = inventory_groups(tmp_path)
    assert "lab_vm" not in groups and "lab_vm" not in groups["gpu_nodes"].get("children", [])
    assert sorted(groups["lab_containers"]["hosts"]) == [f"dltune-lab-node{i}" for i in (1, 2, 3)]


def test_a_running_vm_joins_gpu_nodes_without_driver_or_slurm(
    tmp_path: Path, qemu_like: subprocess.Popen[bytes]
) -> None:
    write_pid(tmp_path, qemu_like.pid)
    groups = inventory_groups(tmp_path)
    assert groups["lab_vm"]["hosts"] == [VM]
    assert "lab_vm" in groups["gpu_nodes"]["children"]
    assert VM in groups["nvidia_driver_excluded"]["hosts"]
    assert VM not in groups["slurm"]["hosts"]
    host_vars = groups["_meta"]["hostvars"][VM]
    assert host_vars["ansible_connection"] == "ssh"  # not the containers' Docker connection
    assert "ProxyCommand='ip netns exec dltune-nfs-storage " in host_vars["ansible_ssh_common_args"]
    assert str(tmp_path / "vm/ssh/id_ed25519") == host_vars["ansible_ssh_private_key_file"]
    assert len(host_vars["nfs_multivip_vips"]) == 4


def test_a_stale_or_foreign_pid_file_lists_no_vm(tmp_path: Path, qemu_like: subprocess.Popen[bytes]) -> None:
    write_pid(tmp_path, os.getpid())  # alive, but not QEMU (a PID reused after a crash)
    assert "lab_vm" not in inventory_groups(tmp_path)
    qemu_like.kill()
    qemu_like.wait()
    write_pid(tmp_path, qemu_like.pid)  # QEMU gone
    assert "lab_vm" not in inventory_groups(tmp_path)
