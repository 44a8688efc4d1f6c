"""Probe parsers on real-format mountinfo and fstab text (comments, tabs, octal escapes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dltune.probes import collect_snapshot
from dltune.probes.mounts import parse_fstab, parse_mountinfo, unescape
from dltune.snapshot import fstab_entry_for, mount_at, mount_containing, option_value
from tests.conftest import FIXTURES


def test_mountinfo_with_optional_fields_and_escaped_spaces() -> None:
    mounts = parse_mountinfo((FIXTURES / "tmp_tmpfs_ok/proc/self/mountinfo").read_text())
    data = mount_at(mounts, "/mnt/data disk")
    assert data is not None
    assert (data.fstype, data.source) == ("ext4", "/dev/vdb")
    assert "noatime" in data.mount_options
    tmp = mount_at(mounts, "/tmp")
    assert tmp is not None and tmp.fstype == "tmpfs"
    assert option_value(tmp.options, "size") == "2468408k"
    assert {"nosuid", "nodev", "noatime"} <= set(tmp.options)


def test_last_mount_on_a_path_is_the_visible_one() -> None:
    text = (
        "30 22 0:27 / /tmp rw,relatime - ext4 /dev/vda rw\n"
        "31 30 0:28 / /tmp rw,noatime - tmpfs tmpfs rw,size=1024k\n"
    )
    tmp = mount_at(parse_mountinfo(text), "/tmp")
    assert tmp is not None and tmp.fstype == "tmpfs"


def test_mount_containing_picks_the_longest_prefix_not_a_sibling_name() -> None:
    text = "1 0 0:1 / / rw - ext4 /dev/vda rw\n2 1 0:2 / /tm rw - tmpfs tmpfs rw\n"
    holder = mount_containing(parse_mountinfo(text), "/tmp")
    assert holder is not None and holder.mount_point == "/"


def test_fstab_skips_comments_and_reads_tabs_and_escapes() -> None:
    entries = parse_fstab((FIXTURES / "tmp_tmpfs_ok/etc/fstab").read_text())
    assert [e.mount_point for e in entries.entries] == ["/", "/mnt/data disk", "/tmp"]
    assert entries.unparsed == ()
    root = fstab_entry_for(entries, "/")
    assert root is not None and root.options == ("errors=remount-ro",) and root.passno == 1
    tmp = fstab_entry_for(entries, "/tmp")
    assert tmp is not None and tmp.line_no == 7 and option_value(tmp.options, "size") == "10%"


def test_fstab_line_with_missing_fields_defaults_like_mount() -> None:
    (entry,) = parse_fstab("tmpfs /tmp tmpfs\n").entries
    assert entry.options == ("defaults",) and entry.freq == 0 and entry.passno == 0


def _escape(text: str) -> str:
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in text)


@given(st.text(alphabet=st.sampled_from(list("ab/ \t\\_-.")), min_size=1, max_size=30))
def test_unescape_inverts_the_kernel_escaping(path: str) -> None:
    assert unescape(_escape(path)) == path


def test_snapshot_reads_fixture_tree_not_host(fixtures) -> None:  # type: ignore[no-untyped-def]
    snap = collect_snapshot(fixtures / "tmp_pending_reboot")
    assert snap.mem_total_kb == 24684080
    assert snap.reboot.required
    assert snap.reboot.packages == ("tmpfs_tmp", "linux-image-6.8.0-45-generic")
    assert snap.expected["tmpfs_tmp"]["size"] == "10%"
    assert snap.errors == {}


def test_snapshot_records_unreadable_files_as_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    snap = collect_snapshot(tmp_path)
    assert "/proc/self/mountinfo" in snap.errors
    assert snap.mounts == () and not snap.reboot.required


def test_broken_manifest_fragment_is_reported_not_raised(tmp_path) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "etc/dltune/expected.d"
    manifest.mkdir(parents=True)
    (manifest / "tmpfs_tmp.json").write_text("{not json")
    (manifest / "other.json").write_text('{"schema_version": 2, "role": "x"}')
    (manifest / "data_disks.json").write_text('{"schema_version": 1, "role": "data_disks", "disks": "/data"}')
    snap = collect_snapshot(tmp_path)
    assert snap.expected == {}
    assert set(snap.manifest_problems) == {"tmpfs_tmp", "other", "data_disks"}
    assert "tmpfs_tmp.json is not valid JSON" in snap.manifest_problems["tmpfs_tmp"]
    assert "$.schema_version" in snap.manifest_problems["other"]
    assert "$.disks: a list expected, found a string" in snap.manifest_problems["data_disks"]


def test_only_the_asked_areas_are_probed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # NVML left alone by `--only storage` on the real host: tests/integration/test_audit_host.py
    manifest = tmp_path / "etc/dltune/expected.d"
    manifest.mkdir(parents=True)
    (manifest / "data_disks.json").write_text(
        '{"schema_version": 1, "role": "data_disks", "disks": [{"mount_point": "/", "uuid": "x"}]}'
    )
    assert "/" in collect_snapshot(tmp_path, areas=["storage"]).space
    assert collect_snapshot(tmp_path, areas=["gpu"]).space == {}
