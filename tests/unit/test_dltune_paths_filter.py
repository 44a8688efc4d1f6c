"""The shared input check of every role (plugins/filter/dltune_paths.py): paths by
allow-list, mount option lists as they are joined, rollback paths against the record; and data_disks'
mount point check (empty, or already this disk). Pure functions, fed with values and probe results."""

from __future__ import annotations

import itertools
import json
import posixpath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import load_role_module
from tests.fuzzing import FUZZ

paths = load_role_module("plugins/filter/dltune_paths.py")
disks = load_role_module("plugins/filter/data_disks.py")
SYSTEM = sorted(paths.SYSTEM_DIRS)
SCRATCH = ["/localscratch", "/scratch", "/var/tmp", "/mnt", "/raid"]


def problem(value: Any, allowed: list[str] | None = SCRATCH, **options: bool) -> str:
    return str(paths.dltune_path_problem(value, "some_role_dir", allowed, **options))


# The issue's system directories: each refused as a value, whatever the allow-list says.
ISSUE_SYSTEM_DIRS = [
    "/", "/usr", "/usr/lib", "/usr/local", "/etc", "/var", "/var/lib", "/var/log", "/home", "/root", "/boot",
    "/dev", "/dev/shm", "/proc", "/sys", "/run", "/tmp", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/srv",
    "/mnt", "/media", "/snap", "/var/tmp", "/var/cache",
]  # fmt: skip


@pytest.mark.parametrize("value", ISSUE_SYSTEM_DIRS)
def test_a_system_directory_is_refused_even_when_the_allow_list_names_it(value: str) -> None:
    found = problem(value, allowed=[value] if value != "/" else ["/x"])
    assert found.startswith(f"some_role_dir={value} is refused: ")
    assert "system directory" in found or "/ itself" in found


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/etc/dltune", "parent of the system directory /etc/dltune/expected.d"),
        ("/etc/systemd", "system directory"),
    ],
)
def test_a_parent_of_a_system_directory_is_refused(value: str, why: str) -> None:
    assert why in problem(value, allowed=["/etc"])


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("localscratch", "not an absolute path"),
        ("", "not a path"),
        (None, "not a path"),
        (["/localscratch"], "not a path"),
        ("/localscratch/", "ends with '/'"),
        ("//localscratch", "'//'"),
        ("/localscratch//jobs", "'//'"),
        ("/localscratch/./jobs", "'.' component"),
        ("/localscratch/..", "'..' component"),
        ("/localscratch/../etc", "'..' component"),
        ("/local scratch", "component 'local scratch'"),
        ("/localscratch,ro", "component 'localscratch,ro'"),
        ("/localscratch/%u", "component '%u'"),
        ("/localscratch/*", "component '*'"),
        ("/localscratch/\njobs", "component"),
        ("/localscratch/-rf", "component '-rf'"),
        ("/localscratch/.hidden", "component '.hidden'"),
        ("/localscratch/~", "component '~'"),
        ("/l\u043ecalscratch", "component"),  # a Cyrillic o that looks like the Latin one
        ("/" + "a" * 256, "longer than 255"),
        ("/var/run/jobs", "below /var/run, a system link"),
        ("/lib/jobs", "below /lib, a system link"),
        ("/proc/self/root/etc", "below /proc/self, a system link"),
        ("/dev/fd/3", "below /dev/fd, a system link"),
        (
            "/etc/jobs",
            "not at or below an allowed directory (/localscratch, /scratch, /var/tmp, /mnt, /raid)",
        ),
        ("/localscratchy", "not at or below an allowed directory"),
    ],
)
def test_each_refusal_names_the_variable_the_value_and_why(value: Any, why: str) -> None:
    found = problem(value)
    assert found.startswith("some_role_dir=") and " is refused: " in found and why in found, found
    assert "\n" not in found.replace("\\n", "")  # one line (a newline in the value is shown escaped)


@pytest.mark.parametrize(
    "value", ["/localscratch", "/localscratch/jobs", "/var/tmp/jobs", "/mnt/nvme0/x", "/raid"]
)
def test_paths_at_or_below_an_allowed_directory_are_accepted(value: str) -> None:
    assert problem(value) == ""


def test_without_an_allow_list_only_the_form_and_system_directories_count() -> None:
    assert problem("/etc/dltune/job-env", allowed=None) == ""
    assert "system directory" in problem("/etc", allowed=None)
    assert problem("/sys", allowed=None, system_ok=True) == ""
    assert "'..'" in problem("/sys/../etc", allowed=None, system_ok=True)


def test_a_system_mount_may_be_named_where_that_is_the_point() -> None:
    assert problem("/home", allowed=None, system_ok=True) == ""
    assert problem("/", allowed=None, system_ok=True) == ""
    assert "ends with" in problem("/home/", allowed=None, system_ok=True)


def test_a_file_whose_directory_the_role_creates_needs_a_directory_of_its_own() -> None:
    assert problem("/etc/dltune/job-env", allowed=["/etc/dltune"], parent_created=True) == ""
    found = problem("/tmp/job-env", allowed=["/tmp"], parent_created=True)
    assert "its directory /tmp, which the role creates and chmods, is a system directory" in found
    assert "is a system directory" in problem("/etc/job-env", allowed=["/etc"], parent_created=True)


@pytest.mark.parametrize("allowed", [["/"], ["relative"], ["/x/"], "/localscratch", [None]])
def test_a_broken_allow_list_refuses_rather_than_allowing_everything(allowed: Any) -> None:
    assert "allow-list" in problem("/localscratch/jobs", allowed=allowed)


def test_an_empty_allow_list_allows_nothing() -> None:
    assert "(nothing)" in problem("/localscratch", allowed=[])


def test_path_errors_collects_one_line_per_refused_variable() -> None:
    errors = paths.dltune_path_errors(
        [
            {"name": "a", "value": "/dev/shm", "allowed_under": SCRATCH},
            {"name": "b", "value": "/localscratch", "allowed_under": SCRATCH},
            {"name": "c", "value": "/tmp/x", "allowed_under": ["/tmp"], "parent_created": True},
            {"name": "d", "value": "/home", "system_ok": True},
        ]
    )
    assert [e.split("=", 1)[0] for e in errors] == ["a", "c"]


# Path pieces that sound harmless but resolve into system directories, or are not in normal form.
PIECES = st.sampled_from(
    ["..", ".", "", "localscratch", "jobs", "etc", "usr", "lib", "dev", "shm", "var", "tmp"]
)


@FUZZ
@given(st.sampled_from(SYSTEM), st.lists(PIECES, min_size=1, max_size=6), st.booleans())
def test_no_spelling_of_a_path_reaches_a_system_directory(
    base: str, pieces: list[str], trailing: bool
) -> None:
    """Whatever is glued to a system directory (.., ., empty components, a trailing slash), an accepted
    path is in normal form and is neither a system directory nor a parent of one."""
    value = base.rstrip("/") + "/" + "/".join(pieces) + ("/" if trailing else "")
    everything = sorted({d for d in SYSTEM if d != "/"} | set(SCRATCH))
    found = problem(value, allowed=everything)
    if found:
        assert found.startswith(f"some_role_dir={value} is refused: ") or "some_role_dir='" in found
        return
    assert value == posixpath.normpath(value) and value.startswith("/")
    assert value not in paths.SYSTEM_DIRS
    assert not any(d.startswith(value + "/") for d in paths.SYSTEM_DIRS)
    assert any(value.startswith(d + "/") for d in everything if d in paths.SYSTEM_DIRS) or any(
        value == d or value.startswith(d + "/") for d in everything if d not in paths.SYSTEM_DIRS
    )


@FUZZ
@given(st.sampled_from(SYSTEM), st.sampled_from(["..", ".", ""]), st.lists(PIECES, max_size=3))
def test_a_dot_dot_or_empty_component_is_always_refused(base: str, bad: str, rest: list[str]) -> None:
    value = "/".join([base.rstrip("/"), bad, *rest])
    assert problem(value, allowed=["/localscratch", "/var/tmp"]) != ""


NAMES = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)


@FUZZ
@given(st.sampled_from(["/localscratch", "/scratch", "/raid"]), st.lists(NAMES, max_size=5))
def test_any_clean_path_below_an_allowed_directory_is_accepted(base: str, names: list[str]) -> None:
    value = "/".join([base, *names])
    assert problem(value) == "", value


# Mount options -----------------------------------------------------------------------------------

DEFAULTS = {
    "data_disks": ["defaults", "noatime", "errors=remount-ro", "nofail", "x-systemd.device-timeout=10s"],
    "nfs_multivip": [
        "vers=3", "proto=tcp", "rsize=524288", "wsize=524288", "hard", "timeo=600", "retrans=2", "noatime",
        "_netdev", "nofail", "x-systemd.mount-timeout=30", "nolock", "nconnect=2",
    ],
    "tmpfs_tmp": ["noatime", "nosuid", "nodev", "mode=1777", "size=10%"],
}  # fmt: skip


def options(value: Any) -> str:
    return str(paths.dltune_mount_option_problem(value, "role_options"))


@pytest.mark.parametrize("role", sorted(DEFAULTS))
def test_the_roles_default_options_are_accepted(role: str) -> None:
    assert options(DEFAULTS[role]) == ""
    assert options(",".join(DEFAULTS[role])) == ""


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (["defaults,relatime"], "the item 'defaults,relatime' holds a comma, so it is 2 options"),
        (["x-systemd.device-timeout=10s,ro"], "holds a comma"),
        (["noatime", ""], "an empty option"),
        ("noatime,,nodev", "an empty option"),
        (["noatime", "a b"], "'a b' has characters"),
        (["noatime", 'context="x"'], "has characters"),
        (["noatime", 3], "3 is not a string"),
        ({"noatime": True}, "not a list"),
        (["ro", "rw"], "'ro' and 'rw' contradict each other"),
        (["sync", "async"], "contradict"),
        (["hard", "soft"], "'hard' and 'soft' contradict"),
        (["tcp", "proto=udp"], "'tcp' and 'proto=udp' contradict"),
        (["vers=3", "nfsvers=4.1"], "'vers=3' and 'nfsvers=4.1' contradict"),
        (["size=10%", "size=20%"], "'size=10%' and 'size=20%' contradict"),
        (["nosuid", "suid"], "'nosuid' and 'suid' contradict"),
        (["exec", "noexec"], "contradict"),
        (["nolock", "lock"], "contradict"),
        (["errors=remount-ro", "errors=panic"], "contradict"),
    ],
)
def test_each_option_refusal_names_the_variable_and_the_joined_value(value: Any, why: str) -> None:
    found = options(value)
    assert found.startswith("role_options=") and " is refused: " in found and why in found, found


ATIME = ["atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime"]


@pytest.mark.parametrize(("first", "second"), list(itertools.permutations(ATIME, 2)))
def test_two_atime_modes_contradict_each_other(first: str, second: str) -> None:
    assert "contradict each other (atime mode)" in options(["defaults", first, "nodev", second])


def test_repeating_an_option_is_not_a_contradiction() -> None:
    assert (
        options(["noatime", "noatime", "size=1g", "size=1g", "tcp", "proto=tcp", "vers=3", "nfsvers=3"]) == ""
    )
    assert options(["noatime", "nodiratime", "nofail", "lazytime"]) == ""


POOL = ["defaults", "noatime", "nodev", "nosuid", "nofail", "_netdev", "hard", "tcp", "vers=3", "mode=1777"]


@FUZZ
@given(st.permutations(POOL), st.integers(min_value=0, max_value=len(POOL) - 2))
def test_options_are_judged_joined(pool: list[str], at: int) -> None:
    """A list is accepted exactly as its joined text; gluing two neighbours into one item with a comma
    is refused; adding an option's opposite is refused, wherever it goes."""
    assert options(pool) == "" and options(",".join(pool)) == ""
    glued = [*pool[:at], pool[at] + "," + pool[at + 1], *pool[at + 2 :]]
    assert "holds a comma" in options(glued)
    opposite = {"noatime": "relatime", "nodev": "dev", "hard": "soft", "tcp": "udp", "vers=3": "vers=4"}
    for option, other in opposite.items():
        assert "contradict" in options([*pool[:at], other, *pool[at:]]), (option, other)


def test_option_errors_collect_one_line_per_refused_list() -> None:
    errors = paths.dltune_mount_option_errors(
        [
            {"name": "a", "value": ["noatime"]},
            {"name": "b", "value": ["ro", "rw"]},
            {"name": "c", "value": ["x,y"]},
        ]
    )
    assert [e.split("=", 1)[0] for e in errors] == ["b", "c"]


# Rollback against the record ---------------------------------------------------------------------


def test_rollback_refuses_a_path_the_role_did_not_record() -> None:
    errors = paths.dltune_unrecorded_errors(
        [
            {"name": "a", "value": "/opt/dltune", "recorded": "/opt/dltune"},
            {"name": "b", "value": "/", "recorded": "/opt/dltune"},
            {"name": "c", "value": "/data/b", "recorded": ["/data/a", "/data/c"]},
            {"name": "d", "value": "/data/a", "recorded": ["/data/a"]},
            {"name": "e", "value": "/x", "recorded": []},
        ]
    )
    assert errors == [
        "b=/ is refused: not what the role recorded creating (/opt/dltune), so state=absent will not "
        "remove it",
        "c=/data/b is refused: not what the role recorded creating (/data/a, /data/c), so state=absent will "
        "not remove it",
        "e=/x is refused: not what the role recorded creating (nothing), so state=absent will not remove it",
    ]


# data_disks: a mount point must be empty or already this disk --------------------------------------


def found_mounts(*entries: dict[str, str]) -> dict[str, Any]:
    return {
        "rc": 0 if entries else 1,
        "stdout": json.dumps({"filesystems": list(entries)}) if entries else "",
    }


def point_errors(
    here: dict[str, Any], stat: dict[str, Any], listing: dict[str, Any], there: dict[str, Any]
) -> list[str]:
    disk = {"device": "/dev/disk/by-id/nvme-a", "mount_point": "/data/a"}
    return list(disks.data_disks_mount_point_errors([disk], [here], [stat], [listing], [there]))


NOTHING = found_mounts()
SKIPPED = {"skipped": True, "changed": False}
EMPTY_DIR = {"stat": {"exists": True, "isdir": True, "islnk": False}}


def test_a_missing_or_empty_mount_point_is_accepted() -> None:
    assert point_errors(NOTHING, {"stat": {"exists": False}}, SKIPPED, NOTHING) == []
    assert point_errors(NOTHING, EMPTY_DIR, {"rc": 0, "stdout": ""}, NOTHING) == []


def test_a_mount_point_already_holding_this_disk_is_accepted_whatever_it_holds() -> None:
    here = found_mounts({"target": "/data/a", "options": "rw,noatime"})
    there = found_mounts({"source": "/dev/nvme0n1", "target": "/data/a"})
    assert point_errors(here, EMPTY_DIR, {"rc": 0, "stdout": "train\nval\n"}, there) == []


def test_a_mount_point_holding_files_is_refused_naming_them() -> None:
    (error,) = point_errors(NOTHING, EMPTY_DIR, {"rc": 0, "stdout": "e\nd\nc\nb\na\n"}, NOTHING)
    assert error.startswith(
        "data_disks_devices[0].mount_point=/data/a is refused: it is not empty (holds a, b, c "
    )
    assert "and 2 more" in error and "/dev/disk/by-id/nvme-a" in error


def test_a_mount_point_with_another_filesystem_is_refused() -> None:
    here = found_mounts({"target": "/mnt/old", "options": "rw"})
    there = found_mounts({"source": "/dev/sda2", "target": "/data/a"})
    (error,) = point_errors(here, EMPTY_DIR, {"rc": 0, "stdout": ""}, there)
    assert "/dev/sda2 is mounted there, not /dev/disk/by-id/nvme-a" in error


def test_a_link_or_a_file_as_mount_point_is_refused() -> None:
    link = {"stat": {"exists": True, "islnk": True, "isdir": False, "lnk_source": "/home"}}
    assert "a link (to /home)" in point_errors(NOTHING, link, SKIPPED, NOTHING)[0]
    file = {"stat": {"exists": True, "islnk": False, "isdir": False}}
    assert "a file, not a directory" in point_errors(NOTHING, file, SKIPPED, NOTHING)[0]
