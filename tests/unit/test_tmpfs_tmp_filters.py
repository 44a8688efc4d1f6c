"""Role tmpfs_tmp's decision whether /tmp can be mounted over now: which entries a tmpfs would hide
from programs still using them (filter tmpfs_tmp_blocking_entries). The end state on a real node
(mounted now, or at the next boot) is molecule/tmpfs_tmp's."""

from __future__ import annotations

import pytest

from tests.conftest import REPO_ROOT, load_role_module

filters = load_role_module("plugins/filter/tmpfs_tmp.py")
# The role's own lists: defaults' hideable names and the payloads Ansible itself leaves in /tmp.
HIDEABLE = [".X11-unix", ".ICE-unix", ".XIM-unix", ".font-unix", ".Test-unix", "systemd-private-*"]
OWN = ["ansible_*_payload_*"]


@pytest.mark.parametrize(
    ("entry", "blocks"),
    [
        (".X11-unix", False),  # an empty X11 socket directory: hidden, nothing lost
        (".X11-unix/X0", True),  # a live X server's socket inside it
        (".ICE-unix/1234", True),
        ("systemd-private-4f1c-chronyd.service-Ab12Cd", False),
        ("systemd-private-4f1c-chronyd.service-Ab12Cd/tmp", False),  # not a dot-directory
        ("systemd-private-", False),  # `*` matches nothing too
        ("xsystemd-private-1", True),  # the glob is anchored at the start
        ("systemd-privateX", True),
        ("aX11-unix", True),  # the dot is a dot, not any character
        (".X11-unixes", True),  # and anchored at the end
        ("ansible_command_payload_x1y2", False),
        ("ansible_payload", True),
        ("build-cache", True),  # a user's files
        ("build-cache/obj.o", True),
        ("slurm-1234/data", True),
    ],
)
def test_an_entry_blocks_a_live_mount_unless_its_top_name_is_hideable(entry: str, blocks: bool) -> None:
    assert filters.tmpfs_tmp_blocking_entries([entry], HIDEABLE + OWN) == ([entry] if blocks else [])


def test_every_blocking_entry_is_listed_in_find_order_and_none_blocks_an_empty_tmp() -> None:
    entries = ["b-user", ".X11-unix", ".X11-unix/X0", "systemd-private-1", "a-user"]
    assert filters.tmpfs_tmp_blocking_entries(entries, HIDEABLE) == ["b-user", ".X11-unix/X0", "a-user"]
    assert filters.tmpfs_tmp_blocking_entries([], HIDEABLE) == []
    assert filters.tmpfs_tmp_blocking_entries(["anything"], []) == ["anything"]


def test_only_the_star_is_special_in_a_glob() -> None:
    assert filters.tmpfs_tmp_blocking_entries(["a?c", "abc", "[x]", "x"], ["a?c", "[x]"]) == ["abc", "x"]


def test_the_role_uses_the_filter_with_its_defaults_and_its_own_entries() -> None:
    """The lists above are the role's: a default added there and not here would go untested."""
    import yaml

    defaults = yaml.safe_load((REPO_ROOT / "roles/tmpfs_tmp/defaults/main.yml").read_text())
    own = yaml.safe_load((REPO_ROOT / "roles/tmpfs_tmp/vars/main.yml").read_text())
    assert defaults["tmpfs_tmp_hideable_entries"] == HIDEABLE
    assert own["tmpfs_tmp__own_entries"] == OWN
    task = (REPO_ROOT / "roles/tmpfs_tmp/tasks/mount.yml").read_text()
    assert "tmpfs_tmp_blocking_entries(tmpfs_tmp_hideable_entries + tmpfs_tmp__own_entries)" in task
