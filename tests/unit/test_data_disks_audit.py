"""Data disk checks on fixture trees and snapshots, and the fstab/mountinfo parsers under fuzzing."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dltune.checks import run_checks
from dltune.checks.storage import data_space
from dltune.cli import app
from dltune.model import Status
from dltune.probes import collect_snapshot
from dltune.probes.mounts import parse_fstab, parse_mountinfo
from dltune.snapshot import Snapshot, SpaceInfo
from tests.conftest import FIXTURES


def by_subject(case: str, check_id: str) -> dict[str | None, object]:
    results = run_checks(collect_snapshot(FIXTURES / case), ["storage"])
    return {r.subject: r for r in results if r.id == check_id}


def test_managed_disks_mounted_noatime_by_uuid_pass() -> None:
    noatime = by_subject("data_ok_managed", "storage.data_noatime")
    assert {s: r.status for s, r in noatime.items()} == {  # type: ignore[attr-defined]
        "/data/scratch": Status.PASS,
        "/data/datasets": Status.PASS,
    }
    fstab = by_subject("data_ok_managed", "storage.data_fstab")
    assert all(r.status is Status.PASS for r in fstab.values()), fstab  # type: ignore[attr-defined]
    assert fstab["/data/scratch"].evidence["uuid_device"] == "/dev/nvme0n1"  # type: ignore[attr-defined]


def test_relatime_on_a_managed_disk_fails_with_the_data_disks_remedy() -> None:
    out = CliRunner().invoke(
        app,
        ["audit", "--root", str(FIXTURES / "data_relatime_managed"), "--only", "storage", "--format", "json"],
    )
    assert out.exit_code == 1
    results = {(r["id"], r["subject"]): r for r in json.loads(out.stdout)["results"]}
    scratch = results[("storage.data_noatime", "/data/scratch")]
    assert scratch["status"] == "fail"
    assert "relatime" in scratch["summary"]
    assert "data_disks" in scratch["remedy"] and "remount,noatime /data/scratch" in scratch["remedy"]
    assert results[("storage.data_noatime", "/data/datasets")]["status"] == "pass"
    assert results[("storage.data_fstab", "/data/scratch")]["status"] == "fail"  # live lacks fstab's noatime


def test_same_tree_without_manifest_only_advises() -> None:
    out = CliRunner().invoke(
        app,
        [
            "audit",
            "--root",
            str(FIXTURES / "data_relatime_unmanaged"),
            "--only",
            "storage",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0
    results = {(r["id"], r["subject"]): r for r in json.loads(out.stdout)["results"]}
    assert results[("storage.data_noatime", "/data/scratch")]["status"] == "warn"
    assert "data_disks_devices" in results[("storage.data_noatime", "/data/scratch")]["remedy"]
    assert results[("storage.data_noatime", "/data/datasets")]["status"] == "pass"
    assert results[("storage.data_fstab", None)]["status"] == "skip"


def test_missing_uuid_and_wrong_device_fail(tmp_path) -> None:  # type: ignore[no-untyped-def]
    snap = collect_snapshot(FIXTURES / "data_ok_managed")
    gone = Snapshot(
        **{
            **snap.__dict__,
            "uuid_devices": {**snap.uuid_devices, "aaaaaaaa-1111-4222-8333-444444444444": None},
        }
    )
    swapped = Snapshot(
        **{
            **snap.__dict__,
            "uuid_devices": {**snap.uuid_devices, "aaaaaaaa-1111-4222-8333-444444444444": "/dev/sdz"},
        }
    )
    for s, words in ((gone, "no device has UUID"), (swapped, "but UUID")):
        results = {r.subject: r for r in run_checks(s, ["storage"]) if r.id == "storage.data_fstab"}
        assert results["/data/scratch"].status is Status.FAIL and words in results["/data/scratch"].summary


def test_space_and_inode_headroom() -> None:
    gib = 1 << 30

    def judge(free: int, ifree: int) -> Status:
        snap = Snapshot(root="/", space={"/data": SpaceInfo(100 * gib, free * gib, 1000, ifree)})
        (r,) = data_space(snap)
        return r.status

    assert judge(50, 500) is Status.PASS
    assert judge(5, 500) is Status.WARN
    assert judge(50, 20) is Status.FAIL  # inodes run out first with many small files
    assert judge(1, 500) is Status.FAIL


def test_golden_ubuntu_server_parses_everything_and_reports_the_broken_line() -> None:
    fstab = parse_fstab((FIXTURES / "golden_ubuntu_server/etc/fstab").read_text())
    points = [e.mount_point for e in fstab.entries]
    assert points == [
        "/",
        "/boot",
        "/boot/efi",
        "/scratch",
        "none",
        "/var/lib/containers",
        "/home",
        "/tmp",
        "/srv/data",
    ]
    assert fstab.entries[2].spec == "PARTUUID=5c3b2a19-01" and fstab.entries[3].spec == "LABEL=scratch"
    assert fstab.entries[4].fstype == "swap" and "bind" in fstab.entries[5].options
    assert fstab.entries[8].spec == "/mnt/My Data"
    assert [(u.line_no, u.text) for u in fstab.unparsed] == [(19, "broken-line-with-one-field")]
    results = {(r.id, r.subject): r for r in run_checks(collect_snapshot(FIXTURES / "golden_ubuntu_server"))}
    assert results[("storage.fstab_parse", None)].status is Status.WARN
    assert results[("storage.data_noatime", "/data/raw")].status is Status.WARN
    assert results[("storage.data_noatime", "/scratch")].status is Status.PASS
    assert ("storage.data_noatime", "/home") not in results  # NFS is the nfs area's business
    assert ("storage.data_noatime", "/boot") not in results


@settings(max_examples=300)
@given(st.text())
def test_fstab_parser_never_raises_and_never_drops_a_line(text: str) -> None:
    fstab = parse_fstab(text)
    stripped = [ln.strip(" \t\r") for ln in text.split("\n")]
    meaningful = [ln for ln in stripped if ln and not ln.startswith("#")]
    assert len(fstab.entries) + len(fstab.unparsed) == len(meaningful)


@settings(max_examples=300)
@given(st.text())
def test_mountinfo_parser_never_raises(text: str) -> None:
    for mount in parse_mountinfo(text):
        assert isinstance(mount.mount_point, str)
