"""Area ``nfs``: the export is in fstab and mounted once per VIP with the planned options, and
every NFS mount answers (probed in a killable child: a dead server gives `fail`, never a hang)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.checks.network import expected_vips
from dltune.model import FailureClass, Result, Status
from dltune.snapshot import NFS_FSTYPES, Snapshot, option_value

# Options the mount table must show as planned (the kernel reports these in its superblock options).
JUDGED_OPTIONS = ("vers", "proto", "rsize", "wsize", "nconnect")
JUDGED_FLAGS = ("hard", "soft")


def _manifest(snap: Snapshot) -> Mapping[str, Any]:
    return snap.expected.get("nfs_multivip", {})


def _option_gaps(planned: list[str], actual: tuple[str, ...]) -> dict[str, Any]:
    gaps: dict[str, Any] = {}
    planned_t = tuple(planned)
    for name in JUDGED_OPTIONS:
        want = option_value(planned_t, name)
        if want is not None:
            have = option_value(actual, name)
            # vers=3 shows as vers=3; the kernel may print 4.2 for 4: compare the planned prefix
            if have is None or not (have == want or have.startswith(f"{want}.")):
                gaps[name] = {"planned": want, "actual": have}
    for flag in JUDGED_FLAGS:
        if flag in planned_t and flag not in actual:
            gaps[flag] = {"planned": True, "actual": False}
    return gaps


@check("nfs.fstab", needs=("fstab", "manifest:nfs_multivip"))
def fstab(snap: Snapshot) -> list[Result]:
    vips = expected_vips(snap)
    if not vips:
        return [Result("nfs.fstab", Status.SKIP, "no nfs_multivip manifest (or state absent)")]
    manifest = _manifest(snap)
    planned = [str(o) for o in manifest.get("options", [])]
    results = []
    for vip in vips:
        mount_point, source = str(vip["mount_point"]), f"{vip['address']}:{manifest.get('server_path')}"
        entries = [e for e in snap.fstab.entries if e.mount_point.rstrip("/") == mount_point.rstrip("/")]
        if len(entries) != 1:
            results.append(
                Result(
                    "nfs.fstab",
                    Status.FAIL,
                    f"fstab has {len(entries)} entries for {mount_point} (expected one, from {source})",
                    subject=mount_point,
                    remedy="apply role nfs_multivip",
                )
            )
            continue
        entry = entries[0]
        missing = sorted(set(planned) - set(entry.options))
        ok = entry.spec == source and entry.fstype in NFS_FSTYPES and not missing
        results.append(
            Result(
                "nfs.fstab",
                Status.PASS if ok else Status.FAIL,
                f"{entry.spec} -> {mount_point}"
                + ("" if ok else f" differs from the plan ({source}; missing options: {', '.join(missing)})"),
                subject=mount_point,
                evidence={"spec": entry.spec, "fstype": entry.fstype, "missing_options": missing},
                remedy=None if ok else "apply role nfs_multivip",
            )
        )
    return results


@check("nfs.vip_mounts", needs=("mountinfo", "manifest:nfs_multivip"))
def vip_mounts(snap: Snapshot) -> list[Result]:
    vips = expected_vips(snap)
    manifest = _manifest(snap)
    if not vips:
        return [Result("nfs.vip_mounts", Status.SKIP, "no nfs_multivip manifest (or state absent)")]
    if manifest.get("state") != "mounted":
        return [
            Result("nfs.vip_mounts", Status.SKIP, f"state {manifest.get('state')}: fstab only, not mounted")
        ]
    planned = [str(o) for o in manifest.get("options", [])]
    by_point = {m.mount_point.rstrip("/"): m for m in snap.mounts if m.fstype in NFS_FSTYPES}
    shared = _shared_connections(snap, [str(v["mount_point"]).rstrip("/") for v in vips])
    results = []
    for vip in vips:
        mount_point, source = str(vip["mount_point"]), f"{vip['address']}:{manifest.get('server_path')}"
        mount = by_point.get(mount_point.rstrip("/"))
        if mount is None:
            results.append(
                Result(
                    "nfs.vip_mounts",
                    Status.FAIL,
                    f"{mount_point} is not mounted (expected {source})",
                    subject=mount_point,
                    remedy=f"mount {mount_point} (or apply role nfs_multivip); check the server and route",
                    critical=True,
                    shared_dependency=f"NFS server {vip['address']}",
                )
            )
            continue
        gaps = _option_gaps(planned, mount.options)
        sharing = shared.get(mount_point.rstrip("/"), [])
        ok = mount.source == source and not gaps and not sharing
        problems = [f"differs from the plan ({source}, {gaps})"] if mount.source != source or gaps else []
        if sharing:
            problems.append(
                f"shares one TCP connection with {', '.join(sharing)}: one VIP's bandwidth, not two"
            )
        stats = snap.nfs_stats.get(mount.mount_point)
        results.append(
            Result(
                "nfs.vip_mounts",
                Status.PASS if ok else Status.FAIL,
                f"{mount.source} on {mount_point}" + ("" if ok else f": {'; '.join(problems)}"),
                subject=mount_point,
                evidence={
                    "source": mount.source,
                    "option_gaps": gaps,
                    "transports": [
                        {"protocol": t.protocol, "source_port": t.source_port, "connects": t.connects}
                        for t in (stats.transports if stats else ())
                    ],
                    "shares_connection_with": sharing,
                },
                remedy=None if ok else f"umount {mount_point} && mount {mount_point} (fstab has the plan)",
            )
        )
    return results


def _shared_connections(snap: Snapshot, mount_points: list[str]) -> dict[str, list[str]]:
    """VIP mount point -> the other VIP mount points that ride the same TCP connection.

    A connection is its peer and its client port together. The client port alone (mountstats' xprt
    line) is not one: the kernel binds NFS sockets with SO_REUSEPORT from a small reserved range, so
    two mounts of two VIPs can draw the same port number on two separate connections. The peer is the
    mount's ``addr=`` (the server address the kernel's NFS client talks to; a client the kernel
    merged by NFSv4.1 trunking shows the first VIP's there), else the host in the mount's source."""
    peers = {m.mount_point.rstrip("/"): _peer(m.options, m.source) for m in snap.mounts}
    by_connection: dict[tuple[str, int], list[str]] = {}
    for mount_point in mount_points:
        stats = snap.nfs_stats.get(mount_point) or snap.nfs_stats.get(mount_point + "/")
        if stats is None:
            continue
        peer = peers.get(mount_point) or _peer((), stats.device)
        for transport in stats.transports:
            if transport.protocol == "tcp" and transport.source_port:
                by_connection.setdefault((peer, transport.source_port), []).append(mount_point)
    shared: dict[str, list[str]] = {}
    for points in by_connection.values():
        for point in points:
            others = sorted(set(points) - {point})
            if others:
                shared[point] = others
    return shared


def _peer(options: tuple[str, ...], source: str) -> str:
    """The NFS server address a mount's RPC client talks to: ``addr=`` where the kernel shows it,
    else the server in its source."""
    return option_value(options, "addr") or _source_server(source)


def _source_server(source: str) -> str:
    """The server of an NFS source ``server:/path`` (an IPv6 address without its brackets); "" where
    the source names none."""
    return source.rpartition(":")[0].strip("[]")


def nfs_server(snap: Snapshot, mount_point: str) -> str:
    """ "NFS server 10.0.0.5" for the mount at ``mount_point`` (its source is server:path)."""
    mount = next((m for m in snap.mounts if m.mount_point.rstrip("/") == mount_point.rstrip("/")), None)
    server = _source_server(mount.source) if mount is not None else ""
    return f"NFS server {server or 'of ' + mount_point}"


# A slow answer passes with the server's load or a failover: transient (debounced).
@check("nfs.responsive", needs=("mountinfo", "manifest:nfs_multivip"), failure=FailureClass.TRANSIENT)
def responsive(snap: Snapshot) -> list[Result]:
    if not snap.nfs_responsive:
        return [Result("nfs.responsive", Status.SKIP, "no NFS mounts")]
    results = []
    for mount_point, probe in sorted(snap.nfs_responsive.items()):
        results.append(
            Result(
                "nfs.responsive",
                Status.PASS if probe.ok else Status.FAIL,
                probe.detail if probe.ok else f"stale or unreachable: {probe.detail}",
                subject=mount_point,
                metrics={"statfs_seconds": round(probe.seconds, 3)},
                critical=not probe.ok,
                remedy=None if probe.ok else "check the NFS server and the route to its VIP; drain the node",
                shared_dependency=None if probe.ok else nfs_server(snap, mount_point),
            )
        )
    return results
