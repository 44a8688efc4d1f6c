"""fstab lines as mount(8) reads them (util-linux libmount, tab_parse.c's mnt_parse_table_line): the
fields libmount needs, what it fills in, and a line it reads that still cannot be what it seems (a type
field holding mount options: mount(8) fails with "unknown filesystem type"). Each rule at its boundary,
through the probe's parser, storage.fstab_parse, and the data_disks role's reader, which must keep
finding such a line (libmount and systemd's generator see it, so the role replaces it in place)."""

from __future__ import annotations

import pytest

from dltune.checks.storage import fstab_parse
from dltune.model import Status
from dltune.probes.mounts import MOUNT_OPTION_NAMES, options_in_type, parse_fstab
from dltune.snapshot import Snapshot
from tests.conftest import load_role_module

role_filters = load_role_module("plugins/filter/data_disks.py")

DISK = {
    "mount_point": "/data",
    "spec": "UUID=aaaa",
    "fstype": "ext4",
    "options": ["defaults", "noatime", "nofail"],
    "dump": 0,
    "passno": 2,
}


# ------------------------------------------------------------------------- the fields libmount needs


def test_two_fields_are_refused_and_three_are_an_entry_with_mounts_defaults() -> None:
    """libmount needs the source, the target and the type; the options, dump and pass may be missing."""
    (two,) = parse_fstab("UUID=x /data\n").unparsed
    assert (two.line_no, two.mount_point) == (1, None) and "2 field(s)" in two.reason
    (three,) = parse_fstab("UUID=x /data ext4\n").entries
    assert (three.fstype, three.options, three.freq, three.passno) == ("ext4", ("defaults",), 0, 0)


def test_four_and_five_fields_read_what_is_there() -> None:
    (four,) = parse_fstab("UUID=x /data ext4 noatime\n").entries
    (five,) = parse_fstab("UUID=x /data ext4 noatime 1\n").entries
    assert (four.options, four.freq, four.passno) == (("noatime",), 0, 0)
    assert (five.freq, five.passno) == (1, 0)


def test_fields_after_the_pass_number_are_never_read() -> None:
    (entry,) = parse_fstab("UUID=x /data ext4 noatime 0 2 anything at all\n").entries
    assert entry.passno == 2


# ------------------------------------------------------------------ a type field holding options


@pytest.mark.parametrize(
    "line",
    [
        "UUID=x /data defaults 0 2",  # the type field left out: "defaults" is read as the type
        "UUID=x /data rw,nosuid,nodev,nofail 0 2",
        "UUID=x /data rw,nosuid,nodev,nofail",  # 3 fields: libmount takes them, mount(8) cannot
        "/dev/hda1 /data defaults",
        "UUID=x /data auto,nofail 0 0",  # "auto" among options is one of them
        "UUID=x /data x-systemd.automount 0 0",  # a userspace option by its prefix
        "UUID=x /data uid=1000,gid=1000",  # name=value: no filesystem type has an "="
        "UUID=x /data defaults ro 0 0",  # options in the options field too, but no bind
    ],
)
def test_a_type_field_of_mount_options_is_unparsed_and_keeps_its_mount_point(line: str) -> None:
    fstab = parse_fstab(line + "\n")
    assert fstab.entries == ()
    (unparsed,) = fstab.unparsed
    assert (unparsed.line_no, unparsed.text, unparsed.mount_point) == (1, line, "/data")
    assert "is mount options, not a filesystem type" in unparsed.reason
    assert "unknown filesystem type" in unparsed.reason


@pytest.mark.parametrize(
    ("line", "fstype"),
    [
        ("UUID=x /data ext4 defaults 0 2", "ext4"),
        ("UUID=x /data auto defaults 0 2", "auto"),  # alone, "auto" is fstab(5)'s type auto
        ("/dev/sr0 /media/cdrom udf,iso9660 user,noauto 0 0", "udf,iso9660"),
        ("UUID=x /data ext4,nofail 0 0", "ext4,nofail"),  # one real type in the list: mount tries it
        ("/a /b defaults bind 0 0", "defaults"),  # a bind mount's type is never used
        ("/a /b nofail rbind", "nofail"),
        ("/a /b defaults move", "defaults"),
        ("/a /b none bind 0 0", "none"),
        ("host:/x /data fuse.sshfs defaults 0 0", "fuse.sshfs"),
        ("tmpfs /tmp tmpfs mode=1777", "tmpfs"),
    ],
)
def test_a_real_type_or_a_bind_mount_stays_an_entry(line: str, fstype: str) -> None:
    fstab = parse_fstab(line + "\n")
    assert fstab.unparsed == ()
    assert [e.fstype for e in fstab.entries] == [fstype]


def test_every_option_libmount_knows_but_auto_is_no_type() -> None:
    for name in sorted(MOUNT_OPTION_NAMES - {"auto"}):
        assert options_in_type(name, "0"), name
    assert not options_in_type("auto", "0")
    for fstype in ("ext4", "xfs", "btrfs", "nfs", "nfs4", "cifs", "tmpfs", "swap", "none", "vfat", "9p"):
        assert not options_in_type(fstype, None), fstype
        assert fstype not in MOUNT_OPTION_NAMES


def test_the_mount_point_a_kept_line_stands_for_is_unescaped() -> None:
    (unparsed,) = parse_fstab("UUID=x /mnt/My\\040Disk defaults 0 2\n").unparsed
    assert unparsed.mount_point == "/mnt/My Disk"


def test_dump_and_pass_are_read_before_the_type_is_judged() -> None:
    """libmount refuses a word in the dump field first: such a line is not read at all (no mount point)."""
    (unparsed,) = parse_fstab("UUID=x /data defaults nofail bind 0\n").unparsed
    assert unparsed.mount_point is None and unparsed.reason.startswith("dump 'bind' is not a number")


# -------------------------------------------------------- blanks where \040 was needed: the reason


def test_a_blank_inside_a_field_is_named_where_it_shifted_the_fields() -> None:
    (spaced,) = parse_fstab("/dev/sdb1 /mnt/My Disk ext4 defaults 0 2\n").unparsed
    assert spaced.reason.startswith("dump 'defaults' is not a number (7 fields: a blank inside a field")
    assert "\\040" in spaced.reason
    (six,) = parse_fstab("Server:/share /media/nfs nfs rsize=8192 and wsize=8192\n").unparsed
    assert six.reason.startswith("dump 'and' is not a number (6 fields: a blank inside a field")


def test_a_typo_in_a_number_is_not_blamed_on_a_blank() -> None:
    (typo,) = parse_fstab("UUID=x /data ext4 defaults 0 2X\n").unparsed
    assert typo.reason == "pass '2X' is not a number"
    (signed,) = parse_fstab("UUID=x /data ext4 defaults -x 2\n").unparsed
    assert signed.reason == "dump '-x' is not a number"


def test_seven_fields_with_numbers_in_place_are_an_entry() -> None:
    (entry,) = parse_fstab("UUID=x /data ext4 defaults 0 0 0\n").entries
    assert entry.mount_point == "/data"


# ---------------------------------------------------------------------------- storage.fstab_parse


def test_the_check_reports_the_line_with_its_number_reason_and_mount_point() -> None:
    text = "UUID=a / ext4 defaults 0 1\n# data\nUUID=b /data defaults 0 2\n"
    (result,) = fstab_parse(Snapshot(root="/", fstab=parse_fstab(text)))
    assert result.status is Status.WARN
    assert result.evidence["entries"] == 1 and result.evidence["unparsed"] == 1
    (line,) = result.evidence["lines"]
    assert (line["line_no"], line["text"], line["mount_point"]) == (3, "UUID=b /data defaults 0 2", "/data")
    assert line["reason"].startswith("type 'defaults' is mount options")


def test_a_line_libmount_refuses_has_no_mount_point_in_the_evidence() -> None:
    (result,) = fstab_parse(Snapshot(root="/", fstab=parse_fstab("UUID=b /data\n")))
    assert result.evidence["lines"][0]["mount_point"] is None


def test_the_check_passes_the_same_line_with_its_type() -> None:
    (result,) = fstab_parse(Snapshot(root="/", fstab=parse_fstab("UUID=b /data ext4 defaults 0 2\n")))
    assert result.status is Status.PASS


# ------------------------------------------------------------------- the data_disks role's reader


def test_the_roles_reader_keeps_the_line_libmount_reads_and_replaces_it_in_place() -> None:
    """libmount reads the line as /data's entry: the role must find it, or mount -a and systemd's
    fstab generator would see two lines for /data (the broken one first)."""
    text = "UUID=a / ext4 defaults 0 1\nUUID=aaaa /data defaults 0 2\n"
    assert role_filters.data_disks_fstab_mount_points(text) == ["/", "/data"]
    new = role_filters.data_disks_fstab(text, [DISK], [])
    assert new.split("\n")[1] == "UUID=aaaa\t/data\text4\tdefaults,noatime,nofail\t0\t2"
    assert len(new.split("\n")) == 3  # replaced, not appended beside it
    fstab = parse_fstab(new)
    assert fstab.unparsed == () and [e.fstype for e in fstab.entries] == ["ext4", "ext4"]


def test_the_roles_reader_skips_a_line_libmount_refuses() -> None:
    assert role_filters.data_disks_fstab_mount_points("UUID=a /data\nUUID=b /x ext4 d bind 0\n") == []
