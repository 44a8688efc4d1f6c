"""The NFS storage lab (nfs-storage.sh) and its VM (nfs-vm.sh) from Python: shared by the tier 2
test (tests/integration/test_nfs_multivip_vm.py) and benchmarks/nfs_audit.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
STORAGE = "dltune-nfs-storage"
LAB_STATE = Path(os.environ.get("DLTUNE_LAB_STATE", "/var/tmp/dltune-lab"))
VM_DIR = LAB_STATE / "vm"
NET = "10.21.115"
HOST = "gpu-node-vm"
# .6 and .8 leave by em1, .7 and .9 by em2 (the VM's em1 is .122, em2 .123)
VIPS = [
    {"address": f"{NET}.{last}", "mount_point": f"/mnt/nfs{i}", "interface": nic, "source": src}
    for i, (last, nic, src) in enumerate(
        [
            (6, "em1", f"{NET}.122"),
            (7, "em2", f"{NET}.123"),
            (8, "em1", f"{NET}.122"),
            (9, "em2", f"{NET}.123"),
        ]
    )
]
ROLE_VARS: dict[str, Any] = {
    "nfs_multivip_server_path": "/nfs0",
    "nfs_multivip_vips": VIPS,
    "nfs_multivip_state": "mounted",
    # nfs-ganesha runs without NLM here
    "nfs_multivip_extra_options": ["nolock"],
}
SSH = [
    "ssh", "-n", "-q", "-i", str(VM_DIR / "ssh/id_ed25519"), "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=30", "-p", "2222", "root@127.0.0.1",
]  # fmt: skip


def lab(script: str, action: str) -> None:
    subprocess.run(["bash", str(REPO_ROOT / "tests/lab" / script), action], check=True)


@contextmanager
def storage_and_vm(variant: str = "lab-init") -> Iterator[None]:
    """nfs-ganesha on the VIPs and the VM (lab-init, or systemd for reboots) booted on the storage
    bridge; both gone afterwards."""
    lab("nfs-vm.sh", "build")
    lab("nfs-storage.sh", "up")
    try:
        subprocess.run(["bash", str(REPO_ROOT / "tests/lab/nfs-vm.sh"), "start", variant], check=True)
        yield
    finally:
        lab("nfs-vm.sh", "stop")
        lab("nfs-storage.sh", "down")


def vm(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A shell command in the VM, over SSH from the storage namespace."""
    return subprocess.run(
        ["ip", "netns", "exec", STORAGE, *SSH, command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def vm_answers(timeout: float = 15) -> bool:
    """Whether SSH into the VM runs a command now. While the guest boots, QEMU's port forward accepts
    the TCP connection and nothing answers, so a timeout means "not up yet", not an error."""
    try:
        return vm("true", timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def reboot_vm(timeout: float = 600) -> float:
    """`systemctl reboot` in the systemd VM; returns the seconds until SSH answers again."""
    # Started by systemd a second later, so the SSH session that asks for it ends cleanly.
    vm("systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot", timeout=60)
    start = time.monotonic()
    while time.monotonic() - start < 60 and vm_answers():
        time.sleep(1)  # still going down
    while time.monotonic() - start < timeout:
        if vm_answers():
            return time.monotonic() - start
        time.sleep(2)
    raise TimeoutError(f"the VM did not come back within {timeout} s")


def tap_tx() -> dict[str, int]:
    """Bytes the storage side sent towards each of the VM's NICs."""
    sent = {}
    for nic, tap in (("em1", "tapem1"), ("em2", "tapem2")):
        done = subprocess.run(
            ["ip", "netns", "exec", STORAGE, "cat", f"/sys/class/net/{tap}/statistics/tx_bytes"],
            capture_output=True,
            text=True,
            check=True,
        )
        sent[nic] = int(done.stdout)
    return sent


def stop_nfs_server() -> None:
    pid = (LAB_STATE / "nfs/ganesha.pid").read_text().strip()
    subprocess.run(["kill", pid], check=True)


def apply_roles(workdir: Path, extra_vars: dict[str, Any] | None = None) -> dict[str, Any]:
    """dltune + nfs_multivip on the VM over SSH; returns Ansible's stats for the VM; raises on failure."""
    inventory = workdir / "inventory.ini"
    inventory.write_text(
        f"{HOST} ansible_host=127.0.0.1 ansible_port=2222 ansible_user=root"
        f" ansible_ssh_private_key_file={VM_DIR / 'ssh/id_ed25519'}"
        " ansible_python_interpreter=/usr/bin/python3"
        " ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'\n"
    )
    playbook = REPO_ROOT / "tests/integration/playbooks/nfs_multivip_vm.yml"
    done = subprocess.run(
        ["ip", "netns", "exec", STORAGE, "ansible-playbook", "-i", str(inventory),
         "-e", json.dumps({**ROLE_VARS, **(extra_vars or {})}), str(playbook)],
        capture_output=True, text=True, check=False, timeout=1500, cwd=REPO_ROOT,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
             "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles")},
    )  # fmt: skip
    report = json.loads(done.stdout)
    failures = [
        t["hosts"][HOST].get("msg")
        for p in report["plays"]
        for t in p["tasks"]
        if t["hosts"].get(HOST, {}).get("failed")
    ]
    if done.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed on the VM: {failures or done.stderr[-2000:]}")
    return dict(report["stats"][HOST])
