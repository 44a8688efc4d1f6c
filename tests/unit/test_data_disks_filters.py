"""Filters of role data_disks (roles/data_disks/filter_plugins): the plan that refuses unsafe disks
and the fstab editor that keeps every foreign line. Pure functions: fed with recorded command output."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dltune.probes.mounts import parse_fstab
from tests.conftest import load_role_module

filters = load_role_module("plugins/filter/data_disks.py")

FSTAB = """# /etc/fstab: static file system information.
UUID=1111 / ext4 errors=remount-ro 0 1
# keep this comment
/swap.img\tnone\tswap\tsw\t0\t0
tmpfs /scratch-sys tmpfs relatime,size=64m 0 0
"""
DISK = {
    "mount_point": "/data/a",
    "spec": "UUID=aaaa",
    "fstype": "ext4",
    "options": ["defaults", "noatime", "errors=remount-ro", "nofail"],
    "dump": 0,
    "passno": 2,
}


def test_new_disk_is_appended_and_every_other_line_kept_byte_for_byte() -> None:
    new = filters.data_disks_fstab(FSTAB, [DISK], [])
    assert new.startswith(FSTAB)
    assert new[len(FSTAB) :] == "UUID=aaaa\t/data/a\text4\tdefaults,noatime,errors=remount-ro,nofail\t0\t2\n"


def test_applying_twice_changes_nothing() -> None:
    once = filters.data_disks_fstab(FSTAB, [DISK], ["/scratch-sys", "/"])
    assert filters.data_disks_fstab(once, [DISK], ["/scratch-sys", "/"]) == once


def test_existing_line_is_replaced_in_place_and_duplicates_commented_out() -> None:
    text = FSTAB + "/dev/vdb /data/a ext4 defaults 0 2\n# x\n/dev/vdc /data/a ext4 defaults 0 2\n"
    new = filters.data_disks_fstab(text, [DISK], []).split("\n")
    assert new[5].startswith("UUID=aaaa\t/data/a")
    assert new[6] == "# x"
    assert new[7].startswith("# data_disks: duplicate") and "/dev/vdc" in new[7]
    assert len([e for e in parse_fstab("\n".join(new)).entries if e.mount_point == "/data/a"]) == 1


def test_system_noatime_edits_only_the_options_field() -> None:
    new = filters.data_disks_fstab(FSTAB, [], ["/scratch-sys", "/"])
    lines = new.split("\n")
    assert lines[1] == "UUID=1111 / ext4 errors=remount-ro,noatime 0 1"
    assert lines[4] == "tmpfs /scratch-sys tmpfs size=64m,noatime 0 0"
    assert lines[0] == FSTAB.split("\n")[0] and lines[3] == FSTAB.split("\n")[3]


def test_system_noatime_without_a_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="/home"):
        filters.data_disks_fstab(FSTAB, [], ["/home"])


def test_a_line_mount_cannot_use_is_never_taken_for_the_system_mount() -> None:
    """Two fields (no type) for /: appending noatime would make "noatime" the filesystem type. The
    line is not one mount(8) uses (the audit's rule), so the role stops, naming the mount point."""
    with pytest.raises(ValueError, match="no fstab line for /"):
        filters.data_disks_fstab("UUID=1111 /\n", [], ["/"])
    assert parse_fstab("UUID=1111 /\n").unparsed


def test_a_quoted_uuid_line_is_the_same_line_and_stays_untouched() -> None:
    quoted = 'UUID="aaaa" /data/a ext4 defaults,noatime,errors=remount-ro,nofail 0 2\n'
    assert filters.data_disks_fstab(quoted, [DISK], []) == quoted
    assert parse_fstab(quoted).entries[0].spec == "UUID=aaaa"


@given(
    st.lists(
        st.sampled_from(
            [
                "# comment",
                "",
                "   ",
                "UUID=x / ext4 defaults 0 1",
                "LABEL=y /srv xfs noatime 0 2",
                "/a\\040b /c none bind",
                "broken",
                "tmpfs /tmp tmpfs size=10% 0 0",
            ]
        ),
        max_size=12,
    )
)
def test_foreign_lines_survive_any_edit(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    new = filters.data_disks_fstab(text, [DISK], [])
    assert new == text + "UUID=aaaa\t/data/a\text4\tdefaults,noatime,errors=remount-ro,nofail\t0\t2\n"


def probe(
    device: str,
    blkid: str = "",
    wipefs: list[dict[str, str]] | None = None,
    rc: int = 0,
    mounted: list[dict[str, str]] | None = None,
) -> tuple[dict[str, Any], ...]:
    return (
        {"rc": rc, "stdout": device},
        {"rc": 0 if blkid else 2, "stdout": blkid},
        {"rc": 0, "stdout": json.dumps({"signatures": wipefs}) if wipefs else ""},
        {"rc": 0 if mounted else 1, "stdout": json.dumps({"filesystems": mounted}) if mounted else ""},
    )


def plan(
    disk: dict[str, Any], probes: tuple[dict[str, Any], ...], fmt: bool = True, move: bool = False
) -> dict[str, Any]:
    (result,) = filters.data_disks_plan([disk], *[[p] for p in probes], fmt, move)
    return result


WANT = {"device": "/dev/loop3", "mount_point": "/data/a", "fstype": "ext4"}


def test_blank_disk_is_formatted_only_when_allowed() -> None:
    assert plan(WANT, probe("/dev/loop3"))["action"] == "format"
    refused = plan(WANT, probe("/dev/loop3"), fmt=False)
    assert "data_disks_format_allowed" in refused["errors"][0]


def test_disk_with_a_filesystem_is_used_never_formatted() -> None:
    p = plan(WANT, probe("/dev/loop3", "DEVNAME=/dev/loop3\nUUID=abcd\nTYPE=ext4\nUSAGE=filesystem\n"))
    assert (p["action"], p["uuid"], p["errors"]) == ("use", "abcd", [])
    other = plan(WANT, probe("/dev/loop3", "UUID=abcd\nTYPE=xfs\nUSAGE=filesystem\n"))
    assert other["action"] == "use" and "never reformatted" in other["errors"][0]


@pytest.mark.parametrize(
    ("blkid", "wipefs", "named"),
    [
        ("PTUUID=x\nPTTYPE=gpt\n", [{"type": "PMBR"}, {"type": "gpt"}], "gpt"),
        ("UUID=y\nTYPE=LVM2_member\nUSAGE=raid\n", [{"type": "LVM2_member"}], "LVM2_member"),
        (
            "UUID=z\nTYPE=linux_raid_member\nUSAGE=raid\n",
            [{"type": "linux_raid_member"}],
            "linux_raid_member",
        ),
        ("", [{"type": "dos"}], "dos"),
    ],
)
def test_signatures_without_filesystem_are_refused_even_when_format_is_allowed(
    blkid: str, wipefs: list[dict[str, str]], named: str
) -> None:
    p = plan(WANT, probe("/dev/loop3", blkid, wipefs))
    assert p["action"] == "use" and named in p["errors"][0] and "refusing to format" in p["errors"][0]


def test_missing_device_and_mounted_elsewhere_are_refused() -> None:
    assert "no such device" in plan(WANT, probe("", rc=1))["errors"][0]
    fs = "UUID=abcd\nTYPE=ext4\nUSAGE=filesystem\n"
    elsewhere = probe("/dev/loop3", fs, mounted=[{"target": "/mnt/old", "options": "rw,relatime"}])
    assert "data_disks_move_allowed" in plan(WANT, elsewhere)["errors"][0]
    moved = plan(WANT, elsewhere, move=True)
    assert moved["errors"] == [] and moved["move_from"] == ["/mnt/old"]
    here = plan(WANT, probe("/dev/loop3", fs, mounted=[{"target": "/data/a", "options": "rw,relatime"}]))
    assert here["live_options"] == ["rw", "relatime"] and here["move_from"] == []


def test_findmnt_verify_errors_are_parsed_per_target() -> None:
    out = (
        "/\n   [W] recommended root FS passno is 1 (current is 2)\n"
        "/data/a\n   [E] unreachable source: UUID=zz\n"
    )
    assert filters.data_disks_verify_errors(out) == [["/data/a", "unreachable source: UUID=zz"]]


# --- composing each disk's settings, then its fstab entry (the role's Jinja, moved here) -----------------

DEFAULTS = (["defaults", "noatime"], ["errors=remount-ro"])


def compose(
    devices: list[dict[str, Any]], nofail: bool = True, timeout: object = "10s"
) -> list[dict[str, Any]]:
    return filters.data_disks_compose(devices, *DEFAULTS, nofail, timeout)


def test_a_disk_that_gives_only_device_and_mount_point_gets_the_role_defaults() -> None:
    [disk] = compose([{"device": "/dev/sdb", "mount_point": "/data"}])
    assert disk == {
        "device": "/dev/sdb",
        "mount_point": "/data",
        "fstype": "ext4",
        "options": ["defaults", "noatime", "errors=remount-ro", "nofail", "x-systemd.device-timeout=10s"],
        "owner": "root",
        "group": "root",
        "mode": "0755",
    }


def test_ext4_options_only_on_ext4_and_a_disks_own_options_replace_the_defaults() -> None:
    [xfs, own] = compose(
        [
            {"device": "/dev/sdb", "mount_point": "/data", "fstype": "xfs"},
            {"device": "/dev/sdc", "mount_point": "/scratch", "options": ["noatime", "nofail"]},
        ]
    )
    assert xfs["options"] == ["defaults", "noatime", "nofail", "x-systemd.device-timeout=10s"]
    # nofail is in the disk's own list already: added once, not twice.
    assert own["options"] == ["noatime", "nofail", "x-systemd.device-timeout=10s"]
    assert own["fstype"] == "ext4" and "errors=remount-ro" not in own["options"]


@pytest.mark.parametrize(
    ("nofail", "timeout", "tail"),
    [
        (True, "10s", ["nofail", "x-systemd.device-timeout=10s"]),
        (False, "10s", ["x-systemd.device-timeout=10s"]),
        (True, "", ["nofail"]),
        (True, 90, ["nofail", "x-systemd.device-timeout=90"]),
        (False, None, []),
    ],
)
def test_nofail_and_the_device_timeout_as_asked(nofail: bool, timeout: object, tail: list[str]) -> None:
    [disk] = compose([{"device": "/dev/sdb", "mount_point": "/data"}], nofail, timeout)
    assert disk["options"] == ["defaults", "noatime", "errors=remount-ro", *tail]


def test_owner_group_and_mode_are_the_disks_own_and_paths_become_text() -> None:
    [disk] = compose(
        [{"device": "/dev/sdb", "mount_point": "/data", "owner": "ml", "group": "ml", "mode": 750}]
    )
    assert (disk["owner"], disk["group"], disk["mode"]) == ("ml", "ml", "750")
    assert compose([{"device": "/dev/sdb"}])[0]["mount_point"] == ""  # refused by the path check next


def test_each_entry_is_by_the_uuid_the_disk_holds_or_the_one_its_format_just_made() -> None:
    disks = compose(
        [{"device": "/dev/sdb", "mount_point": "/data"}, {"device": "/dev/sdc", "mount_point": "/scratch"}]
    )
    plans = [
        {
            "device": "/dev/sdb",
            "uuid": "1111",
            "mounted_at": ["/data"],
            "move_from": [],
            "live_options": ["rw"],
        },
        {
            "device": "/dev/sdc",
            "uuid": None,
            "mounted_at": ["/mnt/old"],
            "move_from": ["/mnt/old"],
            "live_options": [],
        },
    ]
    held, formatted = filters.data_disks_entries(disks, plans, {"/dev/sdc": "2222"})
    assert held == {
        **disks[0],
        "uuid": "1111",
        "spec": "UUID=1111",
        "dump": 0,
        "passno": 2,
        "device_node": "/dev/sdb",
        "mounted_here": True,
        "move_from": [],
        "live_options": ["rw"],
    }
    assert formatted["spec"] == "UUID=2222" and formatted["mounted_here"] is False
    assert formatted["move_from"] == ["/mnt/old"]
    # Check mode formats nothing: a placeholder no real fstab line can hold.
    [planned] = filters.data_disks_entries(disks[1:], plans[1:], {})
    assert planned["spec"] == "UUID=to-be-created-in-check-mode"


def test_noatime_added_to_a_short_line_of_a_crlf_fstab_goes_before_the_carriage_return() -> None:
    """It was appended after the \\r: libmount, and dltune's own parser, then read 'tmpfs\\r' as the type."""
    new = filters.data_disks_fstab("tmpfs /s tmpfs\r\nproc /proc proc defaults 0 0\r\n", [], ["/s"])
    assert new == "tmpfs /s tmpfs\tnoatime\r\nproc /proc proc defaults 0 0\r\n"
    assert [(e.fstype, e.options) for e in parse_fstab(new).entries if e.mount_point == "/s"] == [
        ("tmpfs", ("noatime",))
    ]


def test_composition_and_entries_at_their_edges() -> None:
    """A disk without a device is composed with an empty one (the path check refuses it next); a plan
    that never saw the disk mounted says so; plans and disks must pair one to one."""
    assert compose([{"mount_point": "/data"}])[0]["device"] == ""
    disks = compose([{"device": "/dev/sdb", "mount_point": "/data"}])
    [entry] = filters.data_disks_entries(disks, [{"device": "/dev/sdb", "uuid": "1111"}], {})
    assert entry["mounted_here"] is False and entry["move_from"] is None
    with pytest.raises(ValueError):
        filters.data_disks_entries(disks + disks, [{"device": "/dev/sdb", "uuid": "1111"}], {})
