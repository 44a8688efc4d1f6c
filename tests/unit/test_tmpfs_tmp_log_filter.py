"""What role tmpfs_tmp writes about /tmp into the Ansible log (filter tmpfs_tmp_some_entries): at most
five of the entries that kept the mount back are named, the others counted, at every boundary; and the
role shows /tmp only through it (the decision itself is test_tmpfs_tmp_filters.py's)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO_ROOT, load_role_module

log = load_role_module("plugins/filter/tmpfs_tmp_log.py")
MOUNT_TASKS = yaml.safe_load((REPO_ROOT / "roles/tmpfs_tmp/tasks/mount.yml").read_text())


def entries(count: int) -> list[str]:
    return [f"user{i}/file" for i in range(count)]


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (0, ""),
        (1, "user0/file"),
        (5, "user0/file, user1/file, user2/file, user3/file, user4/file"),
        (6, "user0/file, user1/file, user2/file, user3/file, user4/file and 1 more"),
        (100, "user0/file, user1/file, user2/file, user3/file, user4/file and 95 more"),
    ],
)
def test_at_most_five_entries_are_named_and_the_rest_counted(count: int, message: str) -> None:
    assert log.tmpfs_tmp_some_entries(entries(count)) == message


def test_never_more_than_five_names_whatever_the_count() -> None:
    for count in (5, 6, 7, 50, 10_000):
        shown = log.tmpfs_tmp_some_entries(entries(count))
        assert shown.count("user") == 5 and shown.count("/file") == 5
        assert shown.endswith("" if count == 5 else f" and {count - 5} more")


def test_the_limit_is_an_argument_and_no_limit_only_counts() -> None:
    assert log.tmpfs_tmp_some_entries(["a", "b", "c"], 2) == "a, b and 1 more"
    assert log.tmpfs_tmp_some_entries(["a", "b", "c"], 0) == "3 entries"
    assert log.tmpfs_tmp_some_entries(["a"], 0) == "1 entry"
    assert log.tmpfs_tmp_some_entries([], 0) == ""
    assert log.tmpfs_tmp_some_entries(iter(["a", "b"])) == "a, b"  # any iterable, read once


def test_a_file_name_cannot_put_control_characters_into_the_log() -> None:
    assert log.tmpfs_tmp_some_entries(["\x1b[2Jx", "a\tb", "é✓"]) == "?[2Jx, a?b, é✓"


def test_the_filter_name_runs_its_function() -> None:
    assert log.FilterModule().filters() == {"tmpfs_tmp_some_entries": log.tmpfs_tmp_some_entries}


def _task(name_start: str) -> dict:
    (task,) = [t for t in MOUNT_TASKS if t["name"].startswith(name_start)]
    return task


def test_the_role_shows_tmp_only_through_the_filter() -> None:
    """The listing task keeps its output out of the log (no_log: `-v` prints a result); the only fact
    that holds names is the filter's bounded text, and the message uses it."""
    listing = _task("List what a mount over /tmp would hide")
    assert listing["no_log"] is True and listing["failed_when"] is False
    failing = _task("Fail when /tmp cannot be listed")
    assert failing["when"] == "tmpfs_tmp__entries.rc | default(0) != 0"
    decide = _task("Decide whether /tmp can be mounted now")["ansible.builtin.set_fact"]
    assert decide["tmpfs_tmp__blocking_shown"] == (
        "{{ tmpfs_tmp__blocking | dltune.cluster.tmpfs_tmp_some_entries }}"
    )
    # The decision is the rule's: unchanged by what the log shows.
    assert "tmpfs_tmp__blocking | length == 0" in decide["tmpfs_tmp__mount_now"]
    assert not any("tmpfs_tmp__blocking }}" in str(value) for value in decide.values())
    said = _task("Say why /tmp was left for the next boot")["ansible.builtin.debug"]["msg"]
    assert "'it holds ' ~ tmpfs_tmp__blocking_shown" in said and "join" not in said
