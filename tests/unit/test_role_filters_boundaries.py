"""Each decision of the roles' filter plugins at its boundary: what data_disks does with a disk (and that
it never formats one that holds data), how it composes fstab, which paths and mount options the shared
input check lets through, nfs_multivip's VIP and NIC checks, and what tmpfs_tmp lets a mount hide.

Pure functions fed with real outputs where the corpus has them (tests/fixtures/real/fstab) and with
recorded command output otherwise; each assertion names the exact result, messages included, so a
changed limit, default or word fails here. Helpers come from the roles' own test files."""

from __future__ import annotations

from typing import Any

import pytest

from dltune.probes.mounts import parse_fstab
from tests.conftest import load_role_module
from tests.real_corpus import CORPUS, load
from tests.unit.test_data_disks_filters import DISK, WANT, filters, plan, probe
from tests.unit.test_dltune_paths_filter import (
    EMPTY_DIR,
    NOTHING,
    SKIPPED,
    found_mounts,
    options,
    paths,
    point_errors,
    problem,
)
from tests.unit.test_nfs_multivip_filters import FACTS, GOOD, errors_of
from tests.unit.test_tmpfs_tmp_filters import HIDEABLE
from tests.unit.test_tmpfs_tmp_filters import filters as tmpfs

nfs = load_role_module("plugins/filter/nfs_multivip.py")

RENDERED = "UUID=aaaa\t/data/a\text4\tdefaults,noatime,errors=remount-ro,nofail\t0\t2"
FS = "UUID=abcd\nTYPE=ext4\nUSAGE=filesystem\n"
NAME = "/dev/loop3 (for /data/a)"


def real_fstab(name: str) -> str:
    return load(CORPUS / "fstab" / f"{name}.txt").body


# --- which filter name runs which function (the names the roles' tasks call) --------------------------------


def test_each_filter_name_runs_its_function() -> None:
    assert filters.FilterModule().filters() == {
        "data_disks_compose": filters.data_disks_compose,
        "data_disks_entries": filters.data_disks_entries,
        "data_disks_plan": filters.data_disks_plan,
        "data_disks_fstab": filters.data_disks_fstab,
        "data_disks_verify_errors": filters.data_disks_verify_errors,
        "data_disks_fstab_mount_points": filters.data_disks_fstab_mount_points,
        "data_disks_mount_point_errors": filters.data_disks_mount_point_errors,
    }
    assert paths.FilterModule().filters() == {
        "dltune_path_problem": paths.dltune_path_problem,
        "dltune_path_errors": paths.dltune_path_errors,
        "dltune_mount_option_problem": paths.dltune_mount_option_problem,
        "dltune_mount_option_errors": paths.dltune_mount_option_errors,
        "dltune_unrecorded_errors": paths.dltune_unrecorded_errors,
    }
    assert nfs.FilterModule().filters() == {"nfs_multivip_errors": nfs.nfs_multivip_errors}
    assert tmpfs.FilterModule().filters() == {"tmpfs_tmp_blocking_entries": tmpfs.tmpfs_tmp_blocking_entries}


# --- data_disks: which fstab lines are entries (the audit parser's rules) -----------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "UUID=x / ext4 defaults 0 1",
        "UUID=x / ext4 defaults 0 1\r",  # a CRLF file: the \r ends the line, it is not in the pass number
        "UUID=x / ext4 defaults 0 1\x0b",  # a vertical tab is part of the pass number: not a number
        "UUID=x / ext4 defaults 0 1\x0c",
        "\x0b#UUID=x / ext4 defaults 0 1",  # not a comment: only a blank may precede the #
        "X#dev /data/a ext4",
        "  # UUID=x / ext4 defaults 0 1",
        "UUID=x / ext4 defaults 0 2X",  # a typo in the pass number: mount(8) refuses the line
        "/dev/sdb1 /media/sdb1 ext4 noauto,users,exec 0 0 # Added by KNOPPIX",
        "/dev/sdb1 /media/sdb1 ext4 noauto 0 0 trailing words",
    ],
)
def test_a_line_is_an_entry_exactly_when_the_audit_parser_reads_one(line: str) -> None:
    parsed = parse_fstab(line)
    fields = filters._entry_fields(line)
    if not parsed.entries:
        assert fields is None
        return
    assert fields is not None and len(fields) == min(6, len(line.split()))
    (entry,) = parsed.entries
    assert (filters._spec(fields[0].group()), fields[1].group(), fields[2].group()) == (
        entry.spec,
        entry.mount_point,
        entry.fstype,
    )


def test_a_real_line_with_words_after_the_pass_number_is_the_disks_line_and_stays() -> None:
    """KNOPPIX's generated lines end in "# Added by KNOPPIX": libmount reads six fields and ignores the rest,
    so the line already says what the disk wants and is kept byte for byte, not rewritten or doubled."""
    text = real_fstab("extra_fields_ubuntuforums_knoppix_2012")
    entry = {
        "spec": "/dev/sdb1",
        "mount_point": "/media/sdb1",
        "fstype": "ext4",
        "options": ["noauto", "users", "exec"],
        "dump": 0,
        "passno": 0,
    }
    assert filters.data_disks_fstab(text, [entry], []) == text


def test_the_real_doubled_line_keeps_the_first_and_comments_out_the_second() -> None:
    """ansible.posix#595: the mount module doubled a line that had a comment after the pass number."""
    text = real_fstab("extra_fields_ansible_posix_595")
    entry = {
        "spec": "/dev/sda",
        "mount_point": "/mnt3",
        "fstype": "ntfs3",
        "options": ["defaults"],
        "dump": 0,
        "passno": 0,
    }
    first, second = text.splitlines()
    assert filters.data_disks_fstab(text, [entry], []) == (
        f"{first}\n# data_disks: duplicate of the /mnt3 line above: {second}\n"
    )


# --- data_disks: composing the fstab text -------------------------------------------------------------------

PLAIN = {
    "spec": "UUID=aaaa",
    "mount_point": "/data/a",
    "fstype": "ext4",
    "options": ["defaults"],
    "dump": 0,
    "passno": 0,
}


@pytest.mark.parametrize(
    "line",
    [
        "UUID=aaaa /data/a ext4",  # mount(8) fills in defaults 0 0
        "UUID=aaaa /data/a ext4 defaults",
        "UUID=aaaa /data/a ext4 defaults 0",
        "UUID=aaaa /data/a ext4 defaults 0 0",
        'UUID="aaaa" /data\\057a ext4 defaults 0 0',  # a quoted tag and an escaped path: the same line
    ],
)
def test_a_short_line_that_means_the_disks_entry_is_left_as_it_is(line: str) -> None:
    assert filters.data_disks_fstab(line + "\n", [PLAIN], []) == line + "\n"


@pytest.mark.parametrize(
    "line",
    [
        "/dev/vdb /data/a ext4 defaults 0 0",  # the device name instead of the UUID
        "UUID=aaaa /data/a xfs defaults 0 0",
        "UUID=aaaa /data/a ext4 noatime 0 0",
        "UUID=aaaa /data/a ext4 defaults 1 0",
        "UUID=aaaa /data/a ext4 defaults 0 2",
        "UUID=aaaa /data/a ext4 defaults 0 2X",  # not an entry at all: the disk's line is added
    ],
)
def test_a_line_differing_in_any_field_gets_the_disks_line(line: str) -> None:
    new = filters.data_disks_fstab(line + "\n", [PLAIN], [])
    want = "UUID=aaaa\t/data/a\text4\tdefaults\t0\t0\n"
    assert new == (line + "\n" + want if line.endswith("X") else want)


def test_dump_and_pass_are_the_entrys_or_zero_and_two() -> None:
    bare = {k: v for k, v in PLAIN.items() if k not in ("dump", "passno")}
    assert filters.data_disks_fstab("", [bare], []) == "UUID=aaaa\t/data/a\text4\tdefaults\t0\t2\n"
    own = {**PLAIN, "dump": 1, "passno": 0}
    assert filters.data_disks_fstab("", [own], []) == "UUID=aaaa\t/data/a\text4\tdefaults\t1\t0\n"


def test_only_blanks_and_backslashes_are_escaped_in_a_mount_point() -> None:
    odd = {**PLAIN, "mount_point": "/data/X 1\\"}
    assert filters.data_disks_fstab("", [odd], []) == "UUID=aaaa\t/data/X\\0401\\134\text4\tdefaults\t0\t0\n"


def test_an_empty_fstab_gets_just_the_new_lines() -> None:
    assert filters.data_disks_fstab("", [], []) == ""
    assert filters.data_disks_fstab("", [DISK], []) == RENDERED + "\n"


def test_every_new_disk_is_appended_in_order() -> None:
    other = {**DISK, "mount_point": "/data/b", "spec": "UUID=bbbb"}
    assert filters.data_disks_fstab("", [DISK, other], []) == (
        RENDERED + "\n" + RENDERED.replace("aaaa", "bbbb").replace("/data/a", "/data/b") + "\n"
    )


def test_a_file_without_a_final_newline_keeps_its_end() -> None:
    assert filters.data_disks_fstab("UUID=1 / ext4 defaults 0 1", [], ["/"]) == (
        "UUID=1 / ext4 defaults,noatime 0 1"
    )
    assert filters.data_disks_fstab("# only a comment", [], []) == "# only a comment"
    assert filters.data_disks_fstab("# c", [DISK], []) == "# c\n" + RENDERED + "\n"


def test_noatime_goes_into_a_real_four_field_line_and_never_becomes_the_dump_field() -> None:
    """util-linux's own test fstab: `foo.com:/mnt/share /mnt/remote nfs noauto` (4 fields)."""
    text = real_fstab("utillinux_comment")
    new = filters.data_disks_fstab(text, [], ["/mnt/remote"])
    assert new == text.replace("\tnfs\tnoauto\n", "\tnfs\tnoauto,noatime\n")
    (entry,) = [e for e in parse_fstab(new).entries if e.mount_point == "/mnt/remote"]
    assert entry.options == ("noauto", "noatime") and entry.freq == 0


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("tmpfs /scratch tmpfs", "tmpfs /scratch tmpfs\tnoatime"),
        ("tmpfs /scratch tmpfs \t ", "tmpfs /scratch tmpfs\tnoatime"),
        (" tmpfs /scratch tmpfs", " tmpfs /scratch tmpfs\tnoatime"),
        ("none /scratch myfsX", "none /scratch myfsX\tnoatime"),  # only blanks are trimmed
    ],
)
def test_noatime_is_appended_as_the_options_field_of_a_three_field_line(line: str, want: str) -> None:
    assert filters.data_disks_fstab(line + "\n", [], ["/scratch"]) == want + "\n"


def test_noatime_goes_to_every_system_mount_asked() -> None:
    text = "tmpfs /a tmpfs\ntmpfs /b tmpfs\n"
    assert (
        filters.data_disks_fstab(text, [], ["/a", "/b"])
        == "tmpfs /a tmpfs\tnoatime\ntmpfs /b tmpfs\tnoatime\n"
    )


def test_findmnt_verify_errors_without_a_target_or_a_space() -> None:
    out = "   [E] unreachable on-disk source: /dev/x\n/data/a\n   [E]no space\n   [W] only a warning\n"
    assert filters.data_disks_verify_errors(out) == [
        ["", "unreachable on-disk source: /dev/x"],
        ["/data/a", "no space"],
    ]


# --- data_disks: what each disk holds, and the plan ---------------------------------------------------------


def test_blkid_export_values_may_hold_an_equals_sign() -> None:
    assert filters._blkid_export("LABEL=a=b\nTYPE=ext4\nnoise\n") == {"LABEL": "a=b", "TYPE": "ext4"}


def test_a_plan_names_everything_the_next_tasks_read() -> None:
    used = plan(WANT, probe("/dev/loop3\n", FS, mounted=[{"target": "/data/a", "options": "rw,noatime"}]))
    assert used == {
        "mount_point": "/data/a",
        "fstype": "ext4",
        "device": "/dev/loop3",
        "uuid": "abcd",
        "action": "use",
        "mounted_at": ["/data/a"],
        "live_options": ["rw", "noatime"],
        "errors": [],
        "move_from": [],
    }
    assert plan(WANT, probe("", rc=1)) == {
        "mount_point": "/data/a",
        "fstype": "ext4",
        "device": "",
        "uuid": None,
        "action": "use",
        "mounted_at": [],
        "live_options": [],
        "errors": [f"{NAME}: no such device"],
    }


@pytest.mark.parametrize(("rc", "stdout"), [(0, ""), (0, None), (0, " \n"), (1, "/dev/loop3"), (2, "")])
def test_a_device_is_found_only_when_the_lookup_succeeds_and_names_one(rc: int, stdout: Any) -> None:
    blank = probe("/dev/loop3")
    p = plan(WANT, ({"rc": rc, "stdout": stdout}, *blank[1:]))
    assert p["errors"] == [f"{NAME}: no such device"] and p["action"] == "use"


def test_a_missing_device_does_not_stop_the_next_disks_plan() -> None:
    other = {"device": "/dev/loop4", "mount_point": "/data/b", "fstype": "ext4"}
    missing, blank = probe("", rc=1), probe("/dev/loop4")
    plans = filters.data_disks_plan(
        [WANT, other], *[[m, b] for m, b in zip(missing, blank, strict=True)], True, False
    )
    assert [p["action"] for p in plans] == ["use", "format"]
    assert plans[1]["errors"] == []


def test_every_probe_list_must_have_one_result_per_disk() -> None:
    p = probe("/dev/loop3")
    with pytest.raises(ValueError):
        filters.data_disks_plan([WANT, WANT], [p[0]], [p[1]], [p[2]], [p[3]], True, False)
    with pytest.raises(ValueError):
        filters.data_disks_plan([WANT], [p[0], p[0]], [p[1]], [p[2]], [p[3]], True, False)
    with pytest.raises(ValueError):
        filters.data_disks_mount_point_errors([WANT, WANT], [NOTHING], [EMPTY_DIR], [SKIPPED], [NOTHING])
    with pytest.raises(ValueError):
        filters.data_disks_mount_point_errors([WANT], [NOTHING], [EMPTY_DIR], [SKIPPED], [NOTHING, NOTHING])


def test_a_filesystem_without_a_usage_line_is_used_as_a_filesystem() -> None:
    """`blkid -o export` without --probe prints TYPE but no USAGE: a TYPE alone is a filesystem."""
    p = plan(WANT, probe("/dev/loop3", "UUID=abcd\nTYPE=ext4\n"))
    assert (p["action"], p["uuid"], p["errors"]) == ("use", "abcd", [])


def test_a_filesystem_of_another_type_is_refused_by_name() -> None:
    p = plan(WANT, probe("/dev/loop3", "UUID=abcd\nTYPE=xfs\nUSAGE=filesystem\n"))
    assert p["errors"] == [
        f"{NAME} holds a xfs filesystem, not ext4: it is never reformatted; set its fstype to match or wipe "
        "it yourself"
    ]


@pytest.mark.parametrize(
    ("blkid", "wipefs", "kinds"),
    [
        ("PTUUID=x\nPTTYPE=gpt\n", None, "gpt"),  # blkid saw a partition table, wipefs nothing
        ("UUID=y\nTYPE=LVM2_member\nUSAGE=raid\n", None, "LVM2_member"),  # blkid saw LVM, wipefs nothing
        ("PTTYPE=dos\n", [{"type": "dos"}, {"offset": "0x1fe"}], "?, dos"),  # a signature without a type
        ("", [{"offset": "0x1fe"}], "?"),
        ("UUID=z\nTYPE=linux_raid_member\nUSAGE=raid\nPTTYPE=dos\n", None, "dos, linux_raid_member"),
    ],
)
def test_a_disk_holding_anything_but_a_filesystem_is_never_formatted(
    blkid: str, wipefs: list[dict[str, str]] | None, kinds: str
) -> None:
    p = plan(WANT, probe("/dev/loop3", blkid, wipefs), fmt=True)
    assert p["action"] == "use"
    assert p["errors"] == [
        f"{NAME} has no filesystem but holds {kinds} (partition table, LVM or RAID member): refusing to "
        "format it"
    ]


def test_a_blank_disk_not_allowed_to_be_formatted_is_only_used() -> None:
    p = plan(WANT, probe("/dev/loop3"), fmt=False)
    assert (p["action"], p["uuid"]) == ("use", None)
    assert p["errors"] == [
        f"{NAME} is blank (no filesystem or signature): set data_disks_format_allowed: true to create ext4 "
        "on it"
    ]


def test_findmnt_json_without_filesystems_is_mounted_nowhere() -> None:
    p = plan(WANT, (*probe("/dev/loop3", FS)[:3], {"rc": 0, "stdout": "{}"}))
    assert (p["mounted_at"], p["move_from"], p["live_options"], p["errors"]) == ([], [], [], [])


def test_mounted_elsewhere_only_the_mount_point_has_live_options_and_a_move_names_every_place() -> None:
    elsewhere = [{"target": "/mnt/old", "options": "rw"}, {"target": "/mnt/older", "options": "ro"}]
    p = plan(WANT, probe("/dev/loop3", FS, mounted=elsewhere))
    assert p["live_options"] == [] and p["move_from"] == ["/mnt/old", "/mnt/older"]
    assert p["errors"] == [
        f"{NAME} is mounted at /mnt/old, /mnt/older: set data_disks_move_allowed: true to unmount it there "
        "and mount it at /data/a"
    ]


def test_a_disk_mounted_here_and_elsewhere_needs_no_move() -> None:
    both = [{"target": "/mnt/old", "options": "rw"}, {"target": "/data/a", "options": "rw,noatime"}]
    p = plan(WANT, probe("/dev/loop3", FS, mounted=both))
    assert (p["move_from"], p["errors"], p["live_options"]) == ([], [], ["rw", "noatime"])


# --- data_disks: the mount point check ----------------------------------------------------------------------

REFUSED = "data_disks_devices[{}].mount_point=/data/{} is refused: "
FILE = {"stat": {"exists": True, "islnk": False, "isdir": False}}


def two_points(first: tuple[Any, ...], second: tuple[Any, ...]) -> list[str]:
    disks = [
        {"device": "/dev/sdb", "mount_point": "/data/a"},
        {"device": "/dev/sdc", "mount_point": "/data/b"},
    ]
    return list(
        filters.data_disks_mount_point_errors(disks, *[list(p) for p in zip(first, second, strict=True)])
    )


def test_each_disks_mount_point_is_checked_whatever_the_one_before_was() -> None:
    file_refusal = REFUSED.format(1, "b") + "it is a file, not a directory"
    rerun = (found_mounts({"target": "/data/a", "options": "rw"}), EMPTY_DIR, SKIPPED, NOTHING)
    taken = (NOTHING, EMPTY_DIR, SKIPPED, found_mounts({"source": "/dev/sda2", "target": "/data/a"}))
    missing = (NOTHING, {"stat": {"exists": False}}, SKIPPED, NOTHING)
    second = (NOTHING, FILE, SKIPPED, NOTHING)
    assert two_points(rerun, second) == [file_refusal]
    assert two_points(missing, second) == [file_refusal]
    assert two_points(taken, second) == [
        REFUSED.format(0, "a")
        + "/dev/sda2 is mounted there, not /dev/sdb: unmount it or choose another mount point",
        file_refusal,
    ]


def test_every_filesystem_mounted_at_the_point_is_named_even_without_a_source() -> None:
    there = found_mounts({"source": "/dev/sda2", "target": "/data/a"}, {"target": "/data/a"})
    assert point_errors(NOTHING, EMPTY_DIR, SKIPPED, there) == [
        REFUSED.format(0, "a")
        + "/dev/sda2, ? is mounted there, not /dev/disk/by-id/nvme-a: unmount it or choose another "
        "mount point"
    ]


def test_findmnt_json_without_filesystems_has_nothing_mounted_there() -> None:
    empty = {"rc": 0, "stdout": "{}"}
    assert point_errors(empty, EMPTY_DIR, {"rc": 0, "stdout": ""}, empty) == []


def test_a_link_without_its_target_is_refused_all_the_same() -> None:
    link = {"stat": {"exists": True, "islnk": True, "isdir": False}}
    assert point_errors(NOTHING, link, SKIPPED, NOTHING) == [
        REFUSED.format(0, "a") + "it is a link (to ?), which a mount would follow"
    ]


@pytest.mark.parametrize(
    ("listing", "shown"),
    [
        ("c\nb\na\n", "a, b, c"),
        ("d\nc\n\nb\na\n", "a, b, c and 1 more"),
        ("lost+found\n", "lost+found"),
    ],
)
def test_a_full_mount_point_names_three_entries_and_counts_the_rest(listing: str, shown: str) -> None:
    assert point_errors(NOTHING, EMPTY_DIR, {"rc": 0, "stdout": listing}, NOTHING) == [
        REFUSED.format(0, "a")
        + f"it is not empty (holds {shown}): mounting /dev/disk/by-id/nvme-a there would hide that data; "
        "empty it or choose another mount point"
    ]


# --- dltune_paths: paths ------------------------------------------------------------------------------------


def test_the_path_length_limits_are_inclusive() -> None:
    component = "a" * 255
    assert problem("/localscratch/" + component) == ""
    longest = "/localscratch/" + "/".join([component] * 16)
    longest = longest[:4095]
    assert len(longest) == 4095 and not longest.endswith("/")
    assert problem(longest) == ""
    assert problem(longest + "b") == "some_role_dir=" + longest + "b is refused: longer than 4095 characters"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "not a path (give an absolute path such as /localscratch)"),
        ("scratch", "not an absolute path"),
        ("/localscratch/", "ends with '/' (write it without the trailing slash)"),
        ("/localscratch//x", "holds '//' (write each '/' once)"),
        ("/localscratch/./x", "holds a '.' component (write the path it means)"),
        (
            "/localscratch/a,b",
            "has the component 'a,b': use letters, digits and _.@+- (not first: '.' or '-'), no spaces, "
            "commas, quotes, globs or other characters fstab, shells and units read differently",
        ),
        ("/var/run/x", "below /var/run, a system link (give the real path it points to)"),
        ("/", "/ itself (every system directory is below it)"),
        ("/dev/shm", "a system directory"),
        (
            "/usr/local/share/x",
            "not at or below an allowed directory (/localscratch, /scratch, /var/tmp, /mnt, /raid)",
        ),
    ],
)
def test_each_path_refusal_in_full(value: Any, why: str) -> None:
    assert problem(value) == f"some_role_dir={value} is refused: {why}"


def test_a_value_that_is_not_a_plain_word_is_shown_quoted() -> None:
    assert problem("/local scratch").startswith(
        "some_role_dir='/local scratch' is refused: has the component"
    )
    assert problem(["/x"]).startswith("some_role_dir=['/x'] is refused: not a path")


def test_an_allowed_directory_is_matched_as_a_whole_name() -> None:
    assert problem("/data/x", allowed=["/dataX"]) == (
        "some_role_dir=/data/x is refused: not at or below an allowed directory (/dataX)"
    )
    assert problem("/dataX/x", allowed=["/dataX"]) == ""


def test_the_directory_the_role_creates_is_never_a_system_directory() -> None:
    assert problem("/jobenv", allowed=None, parent_created=True) == (
        "some_role_dir=/jobenv is refused: its directory /, which the role creates and chmods, is a system "
        "directory"
    )
    assert problem("/", allowed=None, system_ok=True, parent_created=True) == ""


@pytest.mark.parametrize(
    ("allowed", "why"),
    [
        ("/localscratch", "its allow-list /localscratch is not a list of directories"),
        (5, "its allow-list 5 is not a list of directories"),
        (["/x/"], "its allow-list holds /x/, which is not an absolute directory below /"),
        ([None], "its allow-list holds None, which is not an absolute directory below /"),
    ],
)
def test_a_broken_allow_list_refusal_in_full(allowed: Any, why: str) -> None:
    assert (
        problem("/localscratch/jobs", allowed=allowed)
        == f"some_role_dir=/localscratch/jobs is refused: {why}"
    )


def test_path_errors_passes_every_setting_of_a_check() -> None:
    errors = paths.dltune_path_errors(
        [
            {"value": "/etc/jobs", "allowed_under": ["/localscratch"]},
            {"name": "b", "value": "/home"},
            {"name": "c", "value": "/home", "system_ok": True},
            {"name": "d", "value": "/x/y", "parent_created": True},
        ]
    )
    assert errors == [
        "?=/etc/jobs is refused: not at or below an allowed directory (/localscratch)",
        "b=/home is refused: a system directory",
    ]


def test_unrecorded_errors_name_a_nameless_check_with_a_question_mark() -> None:
    assert paths.dltune_unrecorded_errors([{"value": "/x", "recorded": "/y"}]) == [
        "?=/x is refused: not what the role recorded creating (/y), so state=absent will not remove it"
    ]


# --- dltune_paths: mount options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "setting"),
    [
        ("noatime", ("atime mode", "noatime")),
        ("proto=tcp", ("transport", "tcp")),
        ("nfsvers=4.1", ("vers=", "4.1")),
        ("size=1g", ("size=", "1g")),
        ("opt=a=b", ("opt=", "a=b")),
        ("nodev", ("dev", "off")),
        ("nox", ("x", "off")),
        ("no", ("no", "on")),
        ("dev", ("dev", "on")),
    ],
)
def test_what_each_option_sets(option: str, setting: tuple[str, str]) -> None:
    assert paths._setting(option) == setting


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (["ro", "rw"], "ro,rw is refused: 'ro' and 'rw' contradict each other (read-only or read-write)"),
        (
            "size=1g,size=2g",
            "size=1g,size=2g is refused: 'size=1g' and 'size=2g' contradict each other (size)",
        ),
        (["opt=a=b", "opt=c"], "opt=a=b,opt=c is refused: 'opt=a=b' and 'opt=c' contradict each other (opt)"),
        (
            ["fooX=1", "fooX=2"],
            "fooX=1,fooX=2 is refused: 'fooX=1' and 'fooX=2' contradict each other (fooX)",
        ),
        (["nox", "x"], "nox,x is refused: 'nox' and 'x' contradict each other (x)"),
        (["noatime", ""], "noatime, is refused: an empty option (an empty item or two commas in a row)"),
        (["a b"], "'a b' is refused: the option 'a b' has characters fstab does not take unquoted"),
        ({"noatime": True}, "{'noatime': True} is refused: not a list of mount options"),
    ],
)
def test_each_option_refusal_in_full(value: Any, why: str) -> None:
    assert options(value) == f"role_options={why}"


def test_a_size_option_and_a_flag_of_the_same_name_are_different_settings() -> None:
    assert options(["size=1g", "size"]) == "" and options(["nosize", "size=1g"]) == ""


def test_option_errors_name_a_nameless_check_with_a_question_mark() -> None:
    assert paths.dltune_mount_option_errors([{"value": ["ro", "rw"]}]) == [
        "?=ro,rw is refused: 'ro' and 'rw' contradict each other (read-only or read-write)"
    ]


# --- nfs_multivip: VIPs and NICs ----------------------------------------------------------------------------

VIP0 = "nfs_multivip_vips[0]"
VIP1 = "nfs_multivip_vips[1]"


def test_a_nic_name_with_a_dash_is_found_under_its_fact_name() -> None:
    """Ansible stores the facts of br-storage under ansible_br_storage."""
    facts = {"interfaces": ["br-storage"], "br_storage": {"ipv4": {"address": "10.0.0.2"}}}
    vip = {"address": "10.0.0.9", "mount_point": "/mnt/nfs0", "interface": "br-storage", "source": "10.0.0.2"}
    assert errors_of([vip], "/nfs0", facts) == []


def test_a_nic_without_an_ipv4_address_has_no_source_to_offer() -> None:
    facts = {
        **FACTS,
        "interfaces": [*FACTS["interfaces"], "em3"],
        "em3": {"ipv6": [{"address": "fe80::1"}], "ipv4_secondaries": ["junk", {"netmask": "255.0.0.0"}]},
    }
    vip = {**GOOD[0], "interface": "em3"}
    assert errors_of([vip], "/nfs0", facts) == [
        f"{VIP0}.source='10.21.115.112' is not an address on em3 ([])"
    ]


def test_a_vip_without_an_interface_is_refused_naming_an_empty_one() -> None:
    vip = {k: v for k, v in GOOD[0].items() if k != "interface"}
    assert errors_of([vip], "/nfs0", FACTS) == [
        f"{VIP0}.interface='' is not an interface of this host (['em1', 'em2', 'eno1', 'lo'])"
    ]


def test_the_ansible_connection_refusal_names_its_device() -> None:
    assert errors_of(GOOD, "/nfs0", FACTS, {"peer": "10.21.115.7", "dev": "eno1"}) == [
        f"{VIP1}.address=10.21.115.7 is the address Ansible connects from (via eno1): routing it over em2 "
        "would cut this connection"
    ]


@pytest.mark.parametrize("mount_point", [None, 3, "/", "//", "mnt"])
def test_a_mount_point_must_be_an_absolute_path_other_than_root(mount_point: Any) -> None:
    assert errors_of([{**GOOD[0], "mount_point": mount_point}], "/nfs0", FACTS) == [
        f"{VIP0}.mount_point={mount_point!r} must be an absolute path other than /"
    ]


@pytest.mark.parametrize(
    "points",
    [("/X", "/mnt/nfs1"), ("/mnt/nfs", "/mnt/nfsX"), ("/mnt/nfsX", "/mnt/nfs"), ("/mnt/nfs ", "/mnt/nfs")],
)
def test_mount_points_are_the_same_only_up_to_trailing_slashes(points: tuple[str, str]) -> None:
    vips = [{**GOOD[0], "mount_point": points[0]}, {**GOOD[1], "mount_point": points[1]}]
    assert errors_of(vips, "/nfs0", FACTS) == []


def test_a_second_vip_on_a_mount_point_names_the_first_vip() -> None:
    vips = [GOOD[0], {**GOOD[1], "mount_point": "/mnt/nfs0//"}]
    assert errors_of(vips, "/nfs0", FACTS) == [
        f"{VIP1}.mount_point=/mnt/nfs0// is already used by 10.21.115.6: one mount point per VIP"
    ]


def test_every_vip_that_is_not_a_mapping_is_named_and_the_rest_still_checked() -> None:
    assert errors_of(["10.21.115.6", {**GOOD[1], "address": "x"}], "/nfs0", FACTS) == [
        f"{VIP0} must be a mapping with address, mount_point, interface, source",
        f"{VIP1}.address='x' is not an IPv4 address",
    ]


# --- tmpfs_tmp: what a live mount may hide ------------------------------------------------------------------


def test_a_star_matches_a_newline_in_a_name_too() -> None:
    assert tmpfs.tmpfs_tmp_blocking_entries(["systemd-private-a\nb"], HIDEABLE) == []


def test_what_is_inside_a_hideable_plain_directory_is_hideable_too() -> None:
    assert tmpfs.tmpfs_tmp_blocking_entries(["cache", "cache/obj.o", ".cache/x"], ["cache", ".cache"]) == [
        ".cache/x"
    ]


@pytest.mark.parametrize("silent", [1, 2, 3])
def test_a_probe_without_an_answer_leaves_the_disk_unknown_never_formatted(silent: int) -> None:
    """blkid, wipefs or findmnt without stdout (skipped, or a result of another shape) on a device that
    resolved: read as empty, a disk with data would look blank and be formatted. It is refused, naming
    the probe, and the next tasks see no format."""
    tools = {1: "blkid", 2: "wipefs", 3: "findmnt"}
    probes = list(probe("/dev/loop3"))
    probes[silent] = SKIPPED
    p = plan(WANT, tuple(probes))
    assert p["errors"] == [f"{NAME}: {tools[silent]} gave no answer, so what it holds is unknown"]
    assert (p["action"], p["uuid"]) == ("use", None)


def test_a_mount_point_directory_that_could_not_be_listed_is_refused() -> None:
    """A directory whose listing has no answer holds something unknown: a mount there could hide data.
    A listing that ran and printed nothing is an empty directory."""
    assert point_errors(NOTHING, EMPTY_DIR, SKIPPED, NOTHING) == [
        "data_disks_devices[0].mount_point=/data/a is refused: find gave no answer, so what it holds is "
        "unknown"
    ]
    assert point_errors(NOTHING, EMPTY_DIR, {"rc": 0, "stdout": ""}, NOTHING) == []


def test_a_silent_probe_on_one_disk_does_not_stop_the_next_disks_plan() -> None:
    other = {"device": "/dev/loop4", "mount_point": "/data/b", "fstype": "ext4"}
    silent = list(probe("/dev/loop3"))
    silent[1] = SKIPPED
    plans = filters.data_disks_plan(
        [WANT, other], *[[s, b] for s, b in zip(silent, probe("/dev/loop4"), strict=True)], True, False
    )
    assert [p["errors"] != [] for p in plans] == [True, False] and plans[1]["action"] == "format"


def test_findmnt_with_no_output_is_a_disk_mounted_nowhere() -> None:
    """findmnt --source prints nothing (rc 1) for a device that is not mounted."""
    p = plan(WANT, probe("/dev/loop3", "UUID=abcd\nTYPE=ext4\nUSAGE=filesystem\n"))
    assert (p["mounted_at"], p["live_options"], p["errors"]) == ([], [], [])
