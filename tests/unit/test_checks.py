"""Checks judged on snapshots: pure functions, no host."""

from __future__ import annotations

import pytest

from dltune.checks import check, registered, run_checks
from dltune.checks.storage import tmp_tmpfs, tmpfs_size_kb
from dltune.checks.system import reboot_required
from dltune.model import Result, Status, exit_code
from dltune.probes import collect_snapshot
from dltune.probes.mounts import parse_fstab
from dltune.snapshot import Fstab, Mount, RebootState, Snapshot
from tests.conftest import FIXTURES

MEM_KB = 24684080
MANIFEST = {
    "tmpfs_tmp": {
        "schema_version": 1,
        "role": "tmpfs_tmp",
        "mount_point": "/tmp",
        "size": "10%",
        "options": ["noatime", "nosuid", "nodev", "mode=1777", "size=10%"],
    }
}
FSTAB_OK = parse_fstab("tmpfs /tmp tmpfs noatime,nosuid,nodev,mode=1777,size=10% 0 0\n")
ROOT = Mount("/", "ext4", "/dev/vda", ("rw", "relatime"), ("rw",))


def tmpfs(options: tuple[str, ...] = ("rw", "nosuid", "nodev", "noatime"), size: str = "2468408k") -> Mount:
    return Mount("/tmp", "tmpfs", "tmpfs", options, ("rw", f"size={size}"))


def snap(mounts: tuple[Mount, ...], fstab=FSTAB_OK, expected=MANIFEST) -> Snapshot:  # type: ignore[no-untyped-def]
    return Snapshot(root="/", mounts=mounts, fstab=fstab, mem_total_kb=MEM_KB, expected=expected)


def test_tmpfs_of_ten_percent_with_noatime_passes() -> None:
    r = tmp_tmpfs(snap((ROOT, tmpfs())))
    assert r.status is Status.PASS, r.summary
    assert r.metrics["size_bytes"] == 2468408 * 1024


def test_missing_noatime_on_a_managed_node_fails_and_names_the_variable() -> None:
    r = tmp_tmpfs(snap((ROOT, tmpfs(options=("rw", "nosuid", "nodev", "relatime")))))
    assert r.status is Status.FAIL
    assert "noatime" in r.summary
    assert r.remedy is not None and "tmpfs_tmp_options" in r.remedy


def test_wrong_size_fails_but_page_rounding_does_not() -> None:
    assert tmp_tmpfs(snap((ROOT, tmpfs(size="1048576k")))).status is Status.FAIL
    assert tmp_tmpfs(snap((ROOT, tmpfs(size="2468412k")))).status is Status.PASS


def test_drift_without_manifest_is_only_a_warning() -> None:
    r = tmp_tmpfs(snap((ROOT, tmpfs(size="1048576k")), expected={}))
    assert r.status is Status.WARN
    assert "built-in" in r.evidence["judged_against"]


def test_tmp_on_disk_with_fstab_line_waits_for_reboot() -> None:
    r = tmp_tmpfs(snap((ROOT,)))
    assert r.status is Status.WARN and "reboot" in r.summary
    assert r.evidence["live_fstype"] == "ext4"


def test_tmp_on_disk_without_fstab_line_fails_when_the_role_applied_it() -> None:
    assert tmp_tmpfs(snap((ROOT,), fstab=Fstab())).status is Status.FAIL
    assert tmp_tmpfs(snap((ROOT,), fstab=Fstab(), expected={})).status is Status.WARN


def test_live_tmpfs_that_fstab_would_lose_at_reboot_is_drift() -> None:
    r = tmp_tmpfs(snap((ROOT, tmpfs()), fstab=Fstab()))
    assert r.status is Status.FAIL and "lost at reboot" in r.summary


def test_manifest_with_other_size_is_what_is_judged() -> None:
    expected = {
        "tmpfs_tmp": {
            **MANIFEST["tmpfs_tmp"],
            "size": "16g",
            "options": ["noatime", "nosuid", "nodev", "mode=1777", "size=16g"],
        }
    }
    fstab = parse_fstab("tmpfs /tmp tmpfs noatime,nosuid,nodev,mode=1777,size=16g 0 0\n")
    assert tmp_tmpfs(snap((ROOT, tmpfs(size="16777216k")), fstab, expected)).status is Status.PASS
    assert tmp_tmpfs(snap((ROOT, tmpfs()), fstab, expected)).status is Status.FAIL


def test_an_unreadable_table_fails_every_check_that_needs_it_and_names_why() -> None:
    """Never a verdict on the contents (no "not mounted", no "every line parses"), never an error
    (dltune is fine: the node's file is not), by the contract."""
    unreadable = Snapshot(
        root="/x",
        errors={
            "/proc/self/mountinfo": "PermissionError: Permission denied",
            "/etc/fstab": "IsADirectoryError: Is a directory",
        },
    )
    results = {r.id: r for r in run_checks(unreadable, ["storage", "nfs"])}
    for check_id in ("storage.tmp_tmpfs", "storage.fstab_parse", "nfs.fstab", "nfs.vip_mounts"):
        assert results[check_id].status is Status.FAIL, results[check_id]
        assert results[check_id].summary.startswith("cannot judge"), results[check_id]
    assert "Permission denied" in results["storage.tmp_tmpfs"].summary
    assert "/etc/fstab" in results["storage.fstab_parse"].evidence["unusable_inputs"]
    assert results["storage.tmp_tmpfs"].critical is False


def test_a_corrupt_manifest_fails_its_roles_checks_and_names_the_file() -> None:
    corrupt = Snapshot(
        root="/x", manifest_problems={"tmpfs_tmp": "/etc/dltune/expected.d/tmpfs_tmp.json is not valid JSON"}
    )
    result = next(r for r in run_checks(corrupt, ["storage"]) if r.id == "storage.tmp_tmpfs")
    assert result.status is Status.FAIL and "tmpfs_tmp.json is not valid JSON" in result.summary
    others = [r for r in run_checks(corrupt, ["storage"]) if r.id != "storage.tmp_tmpfs"]
    assert all("cannot judge" not in r.summary for r in others)


@pytest.mark.parametrize(
    ("size", "kb"),
    [
        ("10%", MEM_KB // 10),
        ("16g", 16 * 1024**2),
        ("512m", 512 * 1024),
        ("2468408k", 2468408),
        ("1048576", 1024),
        ("lots", None),
    ],
)
def test_tmpfs_size_units(size: str, kb: int | None) -> None:
    assert tmpfs_size_kb(size, MEM_KB) == kb


def test_reboot_required_warns_and_names_who_asked() -> None:
    r = reboot_required(Snapshot(root="/", reboot=RebootState(True, ("tmpfs_tmp",))))
    assert r.status is Status.WARN and r.evidence["requested_by"] == ["tmpfs_tmp"]
    assert reboot_required(Snapshot(root="/")).status is Status.PASS


@pytest.mark.parametrize(
    ("case", "statuses", "code"),
    [
        ("tmp_tmpfs_ok", {"storage.tmp_tmpfs": "pass", "system.reboot_required": "pass"}, 0),
        ("tmp_on_root_unmanaged", {"storage.tmp_tmpfs": "warn", "system.reboot_required": "pass"}, 0),
        ("tmp_pending_reboot", {"storage.tmp_tmpfs": "warn", "system.reboot_required": "warn"}, 0),
        ("tmp_drift_managed", {"storage.tmp_tmpfs": "fail", "system.reboot_required": "pass"}, 1),
    ],
)
def test_fixture_trees_end_to_end(case: str, statuses: dict[str, str], code: int) -> None:
    results = run_checks(collect_snapshot(FIXTURES / case), ["storage", "system"])
    judged = {r.id: r.status.value for r in results if r.id in statuses}
    assert judged == statuses
    assert exit_code(results) == code


def test_a_check_that_raises_becomes_an_error_and_others_still_run() -> None:
    @check("env.raises_for_test")
    def _broken(_: Snapshot) -> Result:
        raise RuntimeError("boom")

    try:
        results = run_checks(collect_snapshot(FIXTURES / "tmp_tmpfs_ok"), ["env", "storage"])
        by_id = {r.id: r for r in results}
        assert by_id["env.raises_for_test"].status is Status.ERROR
        assert "boom" in by_id["env.raises_for_test"].summary
        assert by_id["storage.tmp_tmpfs"].status is Status.PASS
        assert exit_code(results) == 2
    finally:
        from dltune import checks

        checks._REGISTRY.pop("env.raises_for_test")


def test_check_ids_name_a_known_area() -> None:
    with pytest.raises(ValueError, match="area"):
        check("nosuch.thing")
    assert all(cid.count(".") == 1 for cid in registered())


def test_exit_codes() -> None:
    def r(s: Status) -> Result:
        return Result("system.x", s, "")

    assert exit_code([r(Status.PASS), r(Status.WARN), r(Status.SKIP)]) == 0
    assert exit_code([r(Status.ERROR), r(Status.FAIL)]) == 1
    assert exit_code([r(Status.ERROR), r(Status.PASS)]) == 2
