"""Tier 1 of nfs_multivip: the role applied inside a client network namespace with two NICs, against
a real userspace NFS server (nfs-ganesha) answering on four VIPs (tests/lab/nfs-storage.sh).

Real: namespaces, veths, a bridge, routes, sysctls, the NFS server and the NFS client protocol
(libnfs's nfs-cat reads the files). Not here: a kernel NFS client (the running kernel has none), so
the role runs with state `present` (fstab only); the kernel mount is tier 2 (VM).

The role runs under `unshare -m` with an overlay on /etc, so fstab, sysctl.d and the manifest it
writes stay inside the test. The test subnet exists only in the namespaces, behind a blackhole
guard route in the root namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.lab

CLIENT = "dltune-nfs-client"
STORAGE = "dltune-nfs-storage"
NET = "10.21.115"
STATE = Path(os.environ.get("DLTUNE_LAB_STATE", "/var/tmp/dltune-lab")) / "nfs"
BLOB_BYTES = 16 * 1024 * 1024
# .6 and .8 leave by em1, .7 and .9 by em2: the reference architecture's split of VIPs over NICs.
VIPS = [
    {"address": f"{NET}.{last}", "mount_point": str(STATE / f"mnt/nfs{i}"), "interface": nic, "source": src}
    for i, (last, nic, src) in enumerate(
        [
            (6, "em1", f"{NET}.112"),
            (7, "em2", f"{NET}.113"),
            (8, "em1", f"{NET}.112"),
            (9, "em2", f"{NET}.113"),
        ]
    )
]
BASE_VARS: dict[str, Any] = {
    "nfs_multivip_server_path": "/nfs0",
    "nfs_multivip_vips": VIPS,
    "nfs_multivip_state": "present",
    "nfs_multivip_extra_options": ["nolock"],
}


def client(*argv: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", CLIENT, *argv], capture_output=True, text=True, check=True
    ).stdout


@dataclass
class Applied:
    rc: int
    changed: int
    failures: list[str]
    # task name -> the diffs its results carried (--diff), each {"before": ..., "after": ...}
    diffs: dict[str, list[dict[str, Any]]]


class ClientNode:
    """The client namespace with its own /etc (an overlay kept between role runs)."""

    def __init__(self, root: Path) -> None:
        self.upper, self.work = root / "upper", root / "work"
        self.upper.mkdir(parents=True)
        self.work.mkdir()

    def etc_file(self, path: str) -> Path:
        """A file as the client sees it under /etc (changed copy in the overlay, else the host's)."""
        changed = self.upper / path.removeprefix("/etc/")
        return changed if changed.exists() else Path(path)

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """A command in the client namespace, seeing the client's /etc."""
        overlay = f"lowerdir=/etc,upperdir={self.upper},workdir={self.work}"
        inner = f"mount -t overlay overlay -o {overlay} /etc && {command}"
        return subprocess.run(
            ["ip", "netns", "exec", CLIENT, "unshare", "-m", "--propagation", "private", "sh", "-c", inner],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
            cwd=REPO_ROOT,
        )

    def audit(self) -> tuple[int, dict[tuple[str, str | None], str]]:
        done = self.run(f"{sys.executable} -m dltune.cli audit --only network,nfs --format json")
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, {
            (r["id"], r["subject"]): r["status"] for r in json.loads(done.stdout)["results"]
        }

    def apply(self, extra_vars: dict[str, Any], *, check: bool = False, diff: bool = False) -> Applied:
        playbook = REPO_ROOT / "tests/integration/playbooks/nfs_multivip.yml"
        ansible = Path(sys.executable).parent / "ansible-playbook"
        inner = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={self.upper},workdir={self.work} /etc"
            f" && exec {ansible} -c local -i localhost, -e ansible_python_interpreter={sys.executable}"
            f" -e '{json.dumps(extra_vars)}' {playbook}" + (" --check" if check else "")
            + (" --diff" if diff else "")
        )  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "SSH_CONNECTION"}
        env |= {
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
            "ANSIBLE_ROLES_PATH": str(REPO_ROOT / "roles"),
        }
        done = subprocess.run(
            ["ip", "netns", "exec", CLIENT, "unshare", "-m", "--propagation", "private", "sh", "-c", inner],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=300,
        )
        report = json.loads(done.stdout)
        stats = report["stats"]["localhost"]
        failures = [
            str(task["hosts"]["localhost"].get("msg", ""))
            for play in report["plays"]
            for task in play["tasks"]
            if task["hosts"].get("localhost", {}).get("failed")
        ]
        diffs: dict[str, list[dict[str, Any]]] = {}
        for play in report["plays"]:
            for task in play["tasks"]:
                result = task["hosts"].get("localhost", {})
                for one in [result, *result.get("results", [])]:
                    carried = one.get("diff") or []
                    for shown in [carried] if isinstance(carried, dict) else carried:
                        if shown.get("before") != shown.get("after"):
                            name = task["task"]["name"].split(" : ", 1)[-1]  # without "<role> : "
                            diffs.setdefault(name, []).append(shown)
        return Applied(done.returncode, stats["changed"], failures, diffs)


@pytest.fixture(scope="module")
def storage() -> Iterator[None]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        if os.environ.get("DLTUNE_LAB_REQUIRED") == "1":
            pytest.fail("the NFS tier needs root and iproute2")
        pytest.skip("the NFS tier needs root and iproute2")
    subprocess.run(["bash", str(REPO_ROOT / "tests/lab/nfs-storage.sh"), "up"], check=True)
    yield
    subprocess.run(["bash", str(REPO_ROOT / "tests/lab/nfs-storage.sh"), "down"], check=False)


@pytest.fixture(scope="module")
def node(storage: None, tmp_path_factory: pytest.TempPathFactory) -> ClientNode:
    return ClientNode(tmp_path_factory.mktemp("client-etc"))


def rx_bytes() -> dict[str, int]:
    return {nic: int(client("cat", f"/sys/class/net/{nic}/statistics/rx_bytes")) for nic in ("em1", "em2")}


def read_through(vip: str) -> dict[str, int]:
    """Read the 16 MiB blob through one VIP; bytes that arrived on each NIC meanwhile."""
    subprocess.run(["ip", "-n", STORAGE, "neigh", "flush", "all"], check=True)
    before = rx_bytes()
    subprocess.run(
        ["ip", "netns", "exec", CLIENT, "nfs-cat", f"nfs://{vip}/nfs0/blob.bin"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    after = rx_bytes()
    return {nic: after[nic] - before[nic] for nic in after}


def test_without_the_routes_every_vip_arrives_on_one_nic(node: ClientNode) -> None:
    """Negative control: without host routes the kernel picks one of the subnet's connected routes
    for every VIP, so all the storage traffic crosses one NIC and the other idles."""
    assert "/32" not in client("ip", "route", "show")
    carriers = set()
    for vip in VIPS:
        arrived = read_through(vip["address"])
        busy = [nic for nic, count in arrived.items() if count > BLOB_BYTES * 0.9]
        assert len(busy) == 1 and min(arrived.values()) < BLOB_BYTES * 0.1, (vip, arrived)
        carriers.add(busy[0])
    assert len(carriers) == 1, carriers


def test_bad_input_is_refused_before_any_change(node: ClientNode) -> None:
    cases = [
        ({"nfs_multivip_server_path": "nfs0"}, "nfs_multivip_server_path='nfs0'"),
        ({"nfs_multivip_vips": [{**VIPS[0], "address": "10.21.115.300"}]}, "address='10.21.115.300' is not"),
        ({"nfs_multivip_vips": [{**VIPS[0], "interface": "em9"}]}, "interface='em9' is not an interface"),
        (
            {"nfs_multivip_vips": [{**VIPS[0], "source": f"{NET}.113"}]},
            f"source='{NET}.113' is not an address on em1",
        ),
        (
            {"nfs_multivip_vips": [VIPS[0], {**VIPS[1], "mount_point": VIPS[0]["mount_point"]}]},
            "one mount point per VIP",
        ),
        ({"nfs_multivip_state": "gone"}, "nfs_multivip_state must be one of"),
    ]
    for extra, named in cases:
        applied = node.apply({**BASE_VARS, **extra})
        assert applied.rc != 0 and any(named in f for f in applied.failures), (extra, applied.failures)
        assert applied.changed == 0
        assert "/32" not in client("ip", "route", "show")
        assert not (node.upper / "fstab").exists()


def test_check_diff_previews_every_route_fstab_line_and_kernel_setting(node: ClientNode) -> None:
    """`--check --diff` on the node before the first run shows what an admin must see (modules without
    a diff of their own included): each VIP's host route, its fstab line, each ARP/rp_filter setting
    in the sysctl file; and it changes none of them."""
    applied = node.apply(BASE_VARS, check=True, diff=True)
    assert applied.rc == 0, applied.failures
    (routes,) = applied.diffs["Ensure each VIP's host route leaves by its interface and source address"]
    assert (routes["before"], routes["after"]) == (
        "", "".join(f"{v['address']}/32 dev {v['interface']} src {v['source']}\n" for v in VIPS)
    )  # fmt: skip
    fstab = [d["after"] for d in applied.diffs["Show the lines of /etc/fstab that change"]]
    for vip in VIPS:
        line = f"{vip['address']}:/nfs0 {vip['mount_point']} nfs "
        assert sum(line in after for after in fstab) == 1, (vip, fstab)
    sysctls = "".join(d["after"] for d in applied.diffs["Show the kernel settings that change"])
    for nic in ("em1", "em2"):
        for setting in ("arp_ignore=1", "arp_announce=2", "rp_filter=2"):
            assert f"net.ipv4.conf.{nic}.{setting}\n" in sysctls, sysctls
    assert "/32" not in client("ip", "route", "show")
    assert not (node.upper / "fstab").exists()
    assert client("sysctl", "-n", "net.ipv4.conf.em1.arp_ignore").strip() == "0"


def test_routes_spread_the_vips_over_both_nics(node: ClientNode) -> None:
    applied = node.apply(BASE_VARS)
    assert applied.rc == 0, applied.failures
    for vip in VIPS:
        route = json.loads(client("ip", "-j", "route", "get", vip["address"]))[0]
        assert (route["dev"], route["prefsrc"]) == (vip["interface"], vip["source"])
    for nic in ("em1", "em2"):
        assert client("sysctl", "-n", f"net.ipv4.conf.{nic}.arp_ignore").strip() == "1"
        assert client("sysctl", "-n", f"net.ipv4.conf.{nic}.rp_filter").strip() == "2"


def test_audit_passes_the_routes_the_role_applied(node: ClientNode) -> None:
    rc, results = node.audit()
    assert {results[("network.vip_routes", v["address"])] for v in VIPS} == {"pass"}
    assert results[("network.vip_spread", None)] == "pass"
    assert {results[("nfs.fstab", v["mount_point"])] for v in VIPS} == {"pass"}
    assert results[("nfs.vip_mounts", None)] == "skip"  # state present: fstab only
    assert rc == 0


def test_each_vip_reads_arrive_on_its_own_nic(node: ClientNode) -> None:
    for vip in VIPS:
        arrived = read_through(vip["address"])
        other = "em2" if vip["interface"] == "em1" else "em1"
        assert arrived[vip["interface"]] > BLOB_BYTES * 0.9, (vip, arrived)
        assert arrived[other] < BLOB_BYTES * 0.1, (vip, arrived)


def test_fstab_mounts_the_export_once_per_vip(node: ClientNode) -> None:
    lines = [line.split() for line in node.etc_file("/etc/fstab").read_text().splitlines() if "nfs" in line]
    assert sorted((f[0], f[1]) for f in lines) == sorted(
        (f"{v['address']}:/nfs0", v["mount_point"]) for v in VIPS
    )
    for fields in lines:
        options = fields[3].split(",")
        assert fields[2] == "nfs"
        assert {"vers=3", "proto=tcp", "rsize=524288", "wsize=524288", "hard", "_netdev", "nofail"} <= set(
            options
        )
    manifest = json.loads(node.etc_file("/etc/dltune/expected.d/nfs_multivip.json").read_text())
    assert [v["address"] for v in manifest["vips"]] == [v["address"] for v in VIPS]


def test_second_run_and_check_mode_change_nothing(node: ClientNode) -> None:
    assert node.apply(BASE_VARS).changed == 0
    assert node.apply(BASE_VARS, check=True).changed == 0


def test_a_moved_route_is_put_back(node: ClientNode) -> None:
    client("ip", "route", "replace", f"{VIPS[1]['address']}/32", "dev", "em1", "src", f"{NET}.112")
    assert node.apply(BASE_VARS, check=True).changed > 0
    assert json.loads(client("ip", "-j", "route", "get", VIPS[1]["address"]))[0]["dev"] == "em1"
    rc, results = node.audit()
    assert (rc, results[("network.vip_routes", VIPS[1]["address"])]) == (1, "fail")
    assert results[("network.vip_spread", None)] == "fail"
    assert node.apply(BASE_VARS).changed > 0
    assert json.loads(client("ip", "-j", "route", "get", VIPS[1]["address"]))[0]["dev"] == "em2"


def test_state_absent_removes_mounts_routes_and_persistence(node: ClientNode) -> None:
    applied = node.apply({**BASE_VARS, "nfs_multivip_state": "absent"})
    assert applied.rc == 0, applied.failures
    assert "/32" not in client("ip", "route", "show")
    assert "nfs" not in node.etc_file("/etc/fstab").read_text()
    assert not (node.upper / "dltune/nfs-multivip-routes").exists()
    assert json.loads(node.etc_file("/etc/dltune/expected.d/nfs_multivip.json").read_text())["vips"] == []
    assert node.apply({**BASE_VARS, "nfs_multivip_state": "absent"}).changed == 0
