"""Role slurm_tmpdir's slurm.conf planner and mount-type filter, on text (no Slurm needed here; the
molecule scenario runs them against a real Slurm)."""

from __future__ import annotations

import pytest

from tests.conftest import load_role_module

conf = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
filters = load_role_module("plugins/filter/slurm_tmpdir.py")

OURS = {
    "prolog": "/etc/slurm/dltune/prolog",
    "epilog": "/etc/slurm/dltune/epilog",
    "task_prolog": "/etc/slurm/dltune/task_prolog",
}
SITE = b"ClusterName=ci\nProlog=/etc/slurm/site-prolog.sh\nPrologFlags=Serial\nNodeName=n1 CPUs=2\n"
CONF = "/etc/slurm/slurm.conf"


def test_site_hooks_are_chained_and_the_lines_point_at_ours() -> None:
    data, site, notes, _record = conf.plan(CONF, SITE, OURS, {}, {})
    parsed = conf.parse(data.decode())
    assert parsed["prolog"] == OURS["prolog"]
    assert parsed["epilog"] == OURS["epilog"] and parsed["taskprolog"] == OURS["task_prolog"]
    assert parsed["prologflags"] == "Serial,Alloc"
    assert site == {"prolog": "/etc/slurm/site-prolog.sh"}
    assert b"NodeName=n1 CPUs=2" in data and notes


def test_second_plan_is_a_no_op_and_keeps_the_recorded_site_hook() -> None:
    data, site, _, record = conf.plan(CONF, SITE, OURS, {}, {})
    again, site_again, notes, record_again = conf.plan(CONF, data, OURS, site, record)
    assert again == data and site_again == site and notes == [] and record_again == record


def test_restore_gives_the_site_its_file_back_byte_for_byte() -> None:
    """Rollback: the site's Prolog comes back, the Epilog/TaskProlog lines the site never had go, and
    PrologFlags gets the site's value back (Serial): the file is the site's, byte for byte."""
    applied, _site, _, record = conf.plan(CONF, SITE, OURS, {}, {})
    restored, notes = conf.restore(CONF, applied, record)
    assert restored == SITE
    assert len(notes) == 4
    again, notes = conf.restore(CONF, restored, record)
    assert again == restored and notes == []


def test_restore_leaves_a_hook_the_site_changed_since() -> None:
    applied, _site, _, record = conf.plan(CONF, SITE, OURS, {}, {})
    edited = applied.replace(f"Epilog={OURS['epilog']}".encode(), b"Epilog=/etc/slurm/new-site-epilog.sh")
    restored, _ = conf.restore(CONF, edited, record)
    assert conf.parse(restored.decode())["epilog"] == "/etc/slurm/new-site-epilog.sh"
    assert conf.parse(restored.decode())["prolog"] == "/etc/slurm/site-prolog.sh"


def test_contain_counts_as_alloc() -> None:
    data, _, _, _ = conf.plan(CONF, b"PrologFlags=Contain\n", OURS, {}, {})
    assert conf.parse(data.decode())["prologflags"] == "Contain"


def test_a_list_or_glob_prolog_is_refused_with_the_key_named() -> None:
    with pytest.raises(ValueError, match=r"Prolog=/etc/slurm/prolog\.d/\*"):
        conf.plan(CONF, b"Prolog=/etc/slurm/prolog.d/*\n", OURS, {}, {})


MOUNTINFO = (
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "40 22 0:50 / /scratch rw,noatime - nfs4 10.0.0.5:/export rw,vers=4.2\n"
    "41 22 0:51 / /local\\040disk rw - xfs /dev/nvme0n1 rw\n"
)


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/localscratch", "ext4"),
        ("/scratch/jobs", "nfs4"),
        ("/scratch", "nfs4"),
        ("/scratchy", "ext4"),
        ("/local disk/x", "xfs"),
    ],
)
def test_fstype_of_a_path_that_may_not_exist_yet(path: str, fstype: str) -> None:
    assert filters.fstype_of(path, MOUNTINFO) == fstype
