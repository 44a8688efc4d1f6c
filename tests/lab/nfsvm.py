"""The NFS storage lab (nfs-storage.sh) and its VM (nfs-vm.sh) from Python: shared by the tier 2 and
3 tests (tests/integration/test_nfs_multivip_*.py), benchmarks/nfs_audit.py, and the inventory entry
that makes the VM one more node of the lab while it runs (inventory/lab_vm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
# The VM's name in the inventory (its own hostname is gpu-node-vm).
HOST = "dltune-lab-nfsvm"
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
# The VM's SSH port (nfs-vm.sh) is forwarded to 127.0.0.1 inside the storage namespace only: SSH from
# the root namespace goes through tcp_stdio.py run there, as its ProxyCommand.
SSH_PORT = 2222
SSH_KEY = VM_DIR / "ssh/id_ed25519"
PROXY_COMMAND = (
    f"ip netns exec {STORAGE} {sys.executable} {REPO_ROOT / 'tests/lab/tcp_stdio.py'} 127.0.0.1 {SSH_PORT}"
)
SSH = [
    "ssh", "-n", "-q", "-i", str(SSH_KEY), "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=30", "-p", str(SSH_PORT), "root@127.0.0.1",
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


def vm_running() -> bool:
    """Whether nfs-vm.sh's QEMU runs now (its PID file, and that PID is QEMU). Readable by any user."""
    try:
        pid = int((VM_DIR / "qemu.pid").read_text())
        return Path(f"/proc/{pid}/comm").read_text().startswith("qemu-system")
    except (OSError, ValueError):
        return False


def inventory() -> dict[str, Any]:
    """The VM as a node of the lab (group gpu_nodes, driver excluded: no GPU there), with the vars that
    mount the lab's export once per VIP; nothing while the VM is down, so `-i inventory` never lists a
    node that cannot answer."""
    if not vm_running():
        return {"_meta": {"hostvars": {}}}
    host_vars = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": SSH_PORT,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(SSH_KEY),
        "ansible_python_interpreter": "/usr/bin/python3",
        # Every boot starts from the built image (-snapshot): a new host key each time.
        "ansible_ssh_common_args": (
            f"-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ProxyCommand='{PROXY_COMMAND}'"
        ),
        **ROLE_VARS,
    }
    return {
        "_meta": {"hostvars": {HOST: host_vars}},
        "lab_vm": {"hosts": [HOST]},
        "gpu_nodes": {"children": ["lab_vm"]},
        "nvidia_driver_excluded": {"hosts": [HOST]},
    }


def apply_roles(
    playbook: str = "tests/integration/playbooks/nfs_multivip_vm.yml",
    extra_vars: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A playbook (default: dltune + nfs_multivip) on the VM through the lab inventory (-i inventory,
    limited to the VM); returns Ansible's stats for the VM; raises on failure."""
    done = subprocess.run(
        ["ansible-playbook", "-i", "inventory", "--limit", HOST,
         "-e", json.dumps(extra_vars or {}), playbook],
        capture_output=True, text=True, check=False, timeout=1500, cwd=REPO_ROOT,
        env={**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
             "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")},
    )  # fmt: skip
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError as error:
        output = f"{done.stdout[-2000:]} {done.stderr[-2000:]}"
        raise RuntimeError(f"ansible-playbook gave no JSON: {output}") from error
    failures = [
        t["hosts"][HOST].get("msg")
        for p in report["plays"]
        for t in p["tasks"]
        if t["hosts"].get(HOST, {}).get("failed") or t["hosts"].get(HOST, {}).get("unreachable")
    ]
    if done.returncode != 0:
        raise RuntimeError(f"ansible-playbook failed on the VM: {failures or done.stderr[-2000:]}")
    return dict(report["stats"][HOST])
