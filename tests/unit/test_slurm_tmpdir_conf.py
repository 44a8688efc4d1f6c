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
SITE = "ClusterName=ci\nProlog=/etc/slurm/site-prolog.sh\nPrologFlags=Serial\nNodeName=n1 CPUs=2\n"


def test_site_hooks_are_chained_and_the_lines_point_at_ours() -> None:
    text, site, notes = conf.plan(SITE, OURS, {})
    parsed = conf.parse(text)
    assert parsed["prolog"][1] == OURS["prolog"]
    assert parsed["epilog"][1] == OURS["epilog"] and parsed["taskprolog"][1] == OURS["task_prolog"]
    assert parsed["prologflags"][1] == "Serial,Alloc"
    assert site == {"prolog": "/etc/slurm/site-prolog.sh"}
    assert "NodeName=n1 CPUs=2" in text and notes


def test_second_plan_is_a_no_op_and_keeps_the_recorded_site_hook() -> None:
    text, site, _ = conf.plan(SITE, OURS, {})
    again, site_again, notes = conf.plan(text, OURS, site)
    assert again == text and site_again == site and notes == []


def test_restore_gives_the_site_its_hooks_back_and_drops_ours() -> None:
    """Rollback: the site's Prolog comes back, the Epilog/TaskProlog lines the site never had go, and
    everything else (incl. the Alloc flag, which the site may rely on by now) stays."""
    applied, site, _ = conf.plan(SITE, OURS, {})
    restored, notes = conf.restore(applied, OURS, site)
    assert restored == SITE.replace("PrologFlags=Serial", "PrologFlags=Serial,Alloc")
    assert len(notes) == 3
    again, notes = conf.restore(restored, OURS, site)
    assert again == restored and notes == []


def test_restore_leaves_a_hook_the_site_changed_since() -> None:
    applied, site, _ = conf.plan(SITE, OURS, {})
    edited = applied.replace(f"Epilog={OURS['epilog']}", "Epilog=/etc/slurm/new-site-epilog.sh")
    restored, _ = conf.restore(edited, OURS, site)
    assert conf.parse(restored)["epilog"][1] == "/etc/slurm/new-site-epilog.sh"
    assert conf.parse(restored)["prolog"][1] == "/etc/slurm/site-prolog.sh"


def test_contain_counts_as_alloc() -> None:
    text, _, _ = conf.plan("PrologFlags=Contain\n", OURS, {})
    assert conf.parse(text)["prologflags"][1] == "Contain"


def test_a_list_or_glob_prolog_is_refused_with_the_key_named() -> None:
    with pytest.raises(ValueError, match=r"Prolog=/etc/slurm/prolog\.d/\*"):
        conf.plan("Prolog=/etc/slurm/prolog.d/*\n", OURS, {})


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
