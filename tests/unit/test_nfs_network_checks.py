"""nfs and network checks on snapshots built from text (mountinfo, fstab, `ip -j route get` answers
recorded in a fixture tree), and the killable statfs probe against a child that never answers."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from dltune.checks.network import vip_routes, vip_spread
from dltune.checks.nfs import fstab, responsive, vip_mounts
from dltune.model import Status
from dltune.probes import collect_snapshot
from dltune.probes.network import probe_responsive_many
from dltune.snapshot import Mount, Responsiveness, Snapshot

OPTIONS = ["vers=3", "proto=tcp", "rsize=524288", "wsize=524288", "hard", "_netdev", "nofail"]
MANIFEST = {
    "schema_version": 1,
    "role": "nfs_multivip",
    "server_path": "/nfs0",
    "state": "mounted",
    "options": OPTIONS,
    "vips": [
        {"address": "10.21.115.6", "mount_point": "/mnt/nfs0", "interface": "em1", "source": "10.21.115.112"},
        {"address": "10.21.115.7", "mount_point": "/mnt/nfs1", "interface": "em2", "source": "10.21.115.113"},
    ],
}
SUPER = "rw,vers=3,rsize=524288,wsize=524288,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys"
MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n"
    f"40 22 0:50 / /mnt/nfs0 rw,noatime - nfs 10.21.115.6:/nfs0 {SUPER},addr=10.21.115.6\n"
    f"41 22 0:51 / /mnt/nfs1 rw,noatime - nfs 10.21.115.7:/nfs0 {SUPER.replace('hard', 'soft')}"
    ",addr=10.21.115.7\n"
)
FSTAB = "".join(
    f"{v['address']}:/nfs0 {v['mount_point']} nfs {','.join(OPTIONS)} 0 0\n"
    for v in MANIFEST["vips"]  # type: ignore[index]
)


def route(dev: str, src: str) -> dict[str, object]:
    return {"stdout": json.dumps([{"dst": "x", "dev": dev, "prefsrc": src}])}


def tree(tmp_path: Path, routes: dict[str, dict[str, object]]) -> Path:
    (tmp_path / "etc/dltune/expected.d").mkdir(parents=True)
    (tmp_path / "etc/dltune/expected.d/nfs_multivip.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "etc/fstab").write_text(FSTAB)
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(MOUNTINFO)
    (tmp_path / "dltune-commands.json").write_text(
        json.dumps({f"ip -j route get {vip}": answer for vip, answer in routes.items()})
    )
    return tmp_path


def test_routes_as_planned_pass_and_a_vip_on_the_wrong_nic_fails(tmp_path: Path) -> None:
    good = collect_snapshot(
        tree(
            tmp_path,
            {"10.21.115.6": route("em1", "10.21.115.112"), "10.21.115.7": route("em2", "10.21.115.113")},
        ),
        areas=["network"],
    )
    assert [r.status for r in vip_routes(good)] == [Status.PASS, Status.PASS]
    assert vip_spread(good).status is Status.PASS
    collapsed = collect_snapshot(
        tree(
            tmp_path / "b",
            {"10.21.115.6": route("em1", "10.21.115.112"), "10.21.115.7": route("em1", "10.21.115.112")},
        ),
        areas=["network"],
    )
    statuses = {r.subject: r.status for r in vip_routes(collapsed)}
    assert statuses == {"10.21.115.6": Status.PASS, "10.21.115.7": Status.FAIL}
    spread = vip_spread(collapsed)
    assert spread.status is Status.FAIL and spread.evidence["actual_vips_per_nic"] == {"em1": 2}
    missing = collect_snapshot(tree(tmp_path / "c", {}), areas=["network"])
    assert all(r.status is Status.FAIL and r.critical for r in vip_routes(missing))


def test_mounts_are_judged_against_the_plan(tmp_path: Path) -> None:
    snap = collect_snapshot(tree(tmp_path, {}), areas=["nfs"])
    results = {r.subject: r for r in vip_mounts(snap)}
    assert results["/mnt/nfs0"].status is Status.PASS
    assert results["/mnt/nfs1"].status is Status.FAIL
    assert "hard" in results["/mnt/nfs1"].evidence["option_gaps"]
    assert [r.status for r in fstab(snap)] == [Status.PASS, Status.PASS]
    # no statfs under a fixture root: those mounts are not this host's
    assert [r.status for r in responsive(snap)] == [Status.SKIP]
    # Nothing mounted at all: each VIP's mount names its server as the shared cause.
    unmounted = vip_mounts(dataclasses.replace(snap, mounts=()))
    assert len(unmounted) == 2 and all(r.status is Status.FAIL and r.critical for r in unmounted)
    assert {r.shared_dependency for r in unmounted} == {
        f"NFS server {r.summary.split('(expected ')[1].split(':')[0]}" for r in unmounted
    } and all((r.shared_dependency or "").startswith("NFS server 10.") for r in unmounted)
    assert results["/mnt/nfs1"].shared_dependency is None  # mounted with the wrong options: this node's


def test_two_vip_mounts_on_one_tcp_connection_fail(tmp_path: Path) -> None:
    """A connection is its peer and its client port. Two VIPs' mounts on the same client port are two
    connections (the kernel binds NFS sockets with SO_REUSEPORT from the reserved range, so the same
    number comes up by chance: it did on CI's VM, and the audit failed a healthy node). Only mounts
    whose RPC client talks to one server address (``addr=``, as NFSv4.1 trunking leaves the second
    VIP's mount) over one port share a connection: the bandwidth of one VIP."""
    root = tree(tmp_path, {})

    def stats(port_a: int, port_b: int) -> str:
        return "".join(
            f"device {v['address']}:/nfs0 mounted on {v['mount_point']} with fstype nfs statvers=1.1\n"
            f"\topts:\trw,vers=3,proto=tcp\n\txprt:\ttcp {port} 1 1 0 0 10 10 0 10 0 2 0 0\n"
            for v, port in zip(MANIFEST["vips"], (port_a, port_b), strict=True)  # type: ignore[call-overload]
        )

    def judged(mountinfo: str, mountstats: str) -> dict[str, Any]:
        (root / "proc/self/mountinfo").write_text(mountinfo)
        (root / "proc/self/mountstats").write_text(mountstats)
        return {r.subject: r for r in vip_mounts(collect_snapshot(root, areas=["nfs"]))}

    healthy = MOUNTINFO.replace("soft", "hard")
    for ports in ((875, 876), (875, 875)):
        separate = judged(healthy, stats(*ports))
        assert {s: r.status for s, r in separate.items()} == {
            "/mnt/nfs0": Status.PASS,
            "/mnt/nfs1": Status.PASS,
        }, ports
        assert separate["/mnt/nfs0"].evidence["transports"][0]["source_port"] == 875
    trunked = healthy.replace("addr=10.21.115.7", "addr=10.21.115.6")
    assert {s: r.status for s, r in judged(trunked, stats(875, 876)).items()} == {
        "/mnt/nfs0": Status.PASS,
        "/mnt/nfs1": Status.PASS,
    }
    shared = judged(trunked, stats(875, 875))
    assert shared["/mnt/nfs1"].status is Status.FAIL
    assert shared["/mnt/nfs1"].evidence["shares_connection_with"] == ["/mnt/nfs0"]
    assert "one TCP connection" in shared["/mnt/nfs1"].summary
    # Without addr= in the mount table the mount's source names the peer: two VIPs, two connections.
    bare = "".join(line.rsplit(",addr=", 1)[0] + "\n" for line in healthy.splitlines())
    assert {r.status for r in judged(bare, stats(875, 875)).values()} == {Status.PASS}


def test_present_state_skips_the_mount_check_and_no_manifest_skips_all() -> None:
    present = Snapshot(root="/", expected={"nfs_multivip": {**MANIFEST, "state": "present"}})
    assert [r.status for r in vip_mounts(present)] == [Status.SKIP]
    bare = Snapshot(root="/")
    assert [r.status for r in fstab(bare)] == [Status.SKIP]
    assert vip_spread(bare).status is Status.SKIP


def test_a_mount_that_does_not_answer_is_reported_stale_within_the_timeout() -> None:
    """A child that never returns stands in for statfs on a dead hard NFS mount."""
    start = time.monotonic()
    probe = probe_responsive_many(["/mnt/nfs0"], timeout=0.5, argv={"/mnt/nfs0": ["sleep", "30"]})[
        "/mnt/nfs0"
    ]
    elapsed = time.monotonic() - start
    assert not probe.ok and "no answer within 0.5s" in probe.detail
    assert elapsed < 1.5
    snap = Snapshot(
        root="/",
        nfs_responsive={"/mnt/nfs0": probe, "/mnt/ok": Responsiveness(True, 0.01, "ok")},
        mounts=(Mount("/mnt/nfs0", "nfs", "10.0.0.5:/export", ("rw",), ()),),
    )
    results = {r.subject: r for r in responsive(snap)}
    assert results["/mnt/nfs0"].status is Status.FAIL and results["/mnt/nfs0"].critical
    assert results["/mnt/nfs0"].shared_dependency == "NFS server 10.0.0.5"
    assert results["/mnt/ok"].shared_dependency is None
    assert results["/mnt/nfs0"].summary.startswith("stale or unreachable")
    assert results["/mnt/ok"].status is Status.PASS
    assert probe_responsive_many(["/"], timeout=5)["/"].ok


def test_many_dead_mounts_take_one_timeout_not_one_each() -> None:
    start = time.monotonic()
    found = probe_responsive_many(
        ["/a", "/b", "/c", "/"], 0.5, {p: ["sleep", "30"] for p in ("/a", "/b", "/c")}
    )
    assert time.monotonic() - start < 1.5
    assert [found[p].ok for p in ("/a", "/b", "/c", "/")] == [False, False, False, True]
