"""Role slurm_tmpdir's Ansible module run for real, in-process (as Ansible's own unit tests run modules):
its arguments go in through ansible.module_utils.testing.patch_module_args, main() prints its JSON
result and exits, and every path points into tmp_path. What is checked is what a site sees: slurm.conf
byte for byte with its mode and owner kept, hooks.json (the chained site hooks, and conf_edits: the bytes
each edited slurm.conf value had), the changed flags, the errors naming the argument, --check changing
nothing, a rerun being a no-op and state=absent giving the site its hooks back, its slurm.conf byte for
byte. The module runs no command (no scontrol, no systemctl)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.conftest import load_role_module
from tests.real_corpus import Sample, samples

conf_module = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
filters = load_role_module("plugins/filter/slurm_tmpdir.py")

OURS = {
    "prolog": "/etc/slurm/dltune/prolog",
    "epilog": "/etc/slurm/dltune/epilog",
    "task_prolog": "/etc/slurm/dltune/task_prolog",
}
SITE_PROLOG = "/etc/slurm/site-prolog.sh"
SITE = f"ClusterName=ci\nProlog={SITE_PROLOG}\nPrologFlags=Serial\nNodeName=n1 CPUs=2\n"
APPLIED = (
    "ClusterName=ci\n"
    f"Prolog={OURS['prolog']}\n"
    "PrologFlags=Serial,Alloc\n"
    "NodeName=n1 CPUs=2\n"
    f"Epilog={OURS['epilog']}\n"
    f"TaskProlog={OURS['task_prolog']}\n"
)
# What hooks.json's conf_edits records: the bytes each key's value had (None: the site had none) and ours.
EDITS = {
    "Prolog": {"site": SITE_PROLOG, "ours": OURS["prolog"]},
    "Epilog": {"site": None, "ours": OURS["epilog"]},
    "TaskProlog": {"site": None, "ours": OURS["task_prolog"]},
    "PrologFlags": {"site": "Serial", "ours": "Serial,Alloc"},
}
# The rollback gives the site its file back byte for byte, PrologFlags too (it still holds ours).
RESTORED = SITE
APPLY_NOTES = [
    f"Prolog: {SITE_PROLOG} -> {OURS['prolog']}, chaining {SITE_PROLOG}",
    f"Epilog: (none) -> {OURS['epilog']}",
    f"TaskProlog: (none) -> {OURS['task_prolog']}",
    "PrologFlags: Serial -> Serial,Alloc",
]
# In the order of hooks.json's conf_edits (its keys sorted).
RESTORE_NOTES = [
    f"Epilog: {OURS['epilog']} -> (none)",
    f"Prolog: {OURS['prolog']} -> {SITE_PROLOG}",
    "PrologFlags: Serial,Alloc -> Serial",
    f"TaskProlog: {OURS['task_prolog']} -> (none)",
]
# Not in sorted order, so that hooks.json shows its keys are sorted.
SETTINGS = {"zone": "local", "base": "/local/scratch"}
CONF_MODE = 0o640


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """main() with these module arguments: (exit status, its JSON result without `invocation`)."""
    capsys.readouterr()
    # _ansible_no_log: no invocation line in the host's syslog/journal.
    with patch_module_args({**args, "_ansible_no_log": True}), pytest.raises(SystemExit) as exited:
        conf_module.main()
    result = json.loads(capsys.readouterr().out)
    result.pop("invocation")
    return exited.value.code, result


def hooks_json(
    settings: dict[str, Any], site_hooks: dict[str, str], conf_edits: dict[str, dict] | None = None
) -> str:
    """hooks.json as the module writes it (conf_edits only where it edited slurm.conf)."""
    config = {**settings, "site_hooks": site_hooks, **({"conf_edits": conf_edits} if conf_edits else {})}
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".dltune-*"))


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    etc = tmp_path / "etc"
    state = tmp_path / "state"
    etc.mkdir()
    state.mkdir()
    conf = etc / "slurm.conf"
    conf.write_text(SITE)
    conf.chmod(CONF_MODE)
    if os.geteuid() == 0:  # a root test run can show the owner kept
        os.chown(conf, 1234, 1235)
    return {"conf": conf, "hooks_config": state / "hooks.json"}


def args_for(paths: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {"conf": str(paths["conf"]), "hooks": OURS, "hooks_config": str(paths["hooks_config"]), **extra}


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_first_run_points_slurm_conf_at_our_hooks_and_records_the_site_hook(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    conf, hooks_config = paths["conf"], paths["hooks_config"]
    before = owner_and_mode(conf)
    rc, result = run(args_for(paths, settings=SETTINGS), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": True,
        "site_hooks": {"prolog": SITE_PROLOG},
        "notes": APPLY_NOTES,
        "diff": {"before": SITE, "after": APPLIED, "before_header": str(conf), "after_header": str(conf)},
    }
    assert conf.read_text() == APPLIED
    assert owner_and_mode(conf) == before
    assert hooks_config.read_text() == hooks_json(SETTINGS, {"prolog": SITE_PROLOG}, EDITS)
    assert stat.S_IMODE(hooks_config.stat().st_mode) == 0o644  # our hooks run as SlurmdUser and read it
    assert leftovers(conf.parent.parent) == []


def test_a_rerun_is_a_no_op_that_keeps_the_recorded_site_hook(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    conf, hooks_config = paths["conf"], paths["hooks_config"]
    run(args_for(paths, settings=SETTINGS), capsys)
    inodes = conf.stat().st_ino, hooks_config.stat().st_ino
    rc, result = run(args_for(paths, settings=SETTINGS), capsys)
    assert rc == 0
    assert result == {
        "changed": False,
        "conf_changed": False,
        "site_hooks": {"prolog": SITE_PROLOG},
        "notes": [],
        "diff": {"before": APPLIED, "after": APPLIED, "before_header": str(conf), "after_header": str(conf)},
    }
    assert (conf.stat().st_ino, hooks_config.stat().st_ino) == inodes  # neither was rewritten
    assert hooks_config.read_text() == hooks_json(SETTINGS, {"prolog": SITE_PROLOG}, EDITS)


def test_defaults_manage_slurm_conf_with_no_settings(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither settings, manage_conf nor state given: present, slurm.conf managed, hooks.json holds
    only the site hooks."""
    rc, result = run(args_for(paths), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is True
    assert paths["conf"].read_text() == APPLIED
    assert paths["hooks_config"].read_text() == hooks_json({}, {"prolog": SITE_PROLOG}, EDITS)
    rc, result = run(args_for(paths, state="present"), capsys)
    assert rc == 0 and result["changed"] is False


def test_the_documented_defaults_are_the_ones_applied(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The invocation Ansible reports (ansible-playbook -v) carries each option as the module used it."""
    capsys.readouterr()
    with patch_module_args({**args_for(paths), "_ansible_no_log": True}), pytest.raises(SystemExit):
        conf_module.main()
    invocation = json.loads(capsys.readouterr().out)["invocation"]
    assert invocation == {
        "module_args": {
            **args_for(paths),
            "settings": {},
            "manage_conf": True,
            "site_hooks": None,
            "state": "present",
        }
    }


def test_path_arguments_expand_variables(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """conf and hooks_config are of type path: `$VAR` and `~` are expanded as in any path argument."""
    monkeypatch.setenv("DLTUNE_TEST_ETC", str(paths["conf"].parent))
    monkeypatch.setenv("HOME", str(paths["hooks_config"].parent))
    rc, result = run(
        {"conf": "$DLTUNE_TEST_ETC/slurm.conf", "hooks": OURS, "hooks_config": "~/hooks.json"}, capsys
    )
    assert rc == 0 and result["diff"]["before_header"] == str(paths["conf"])
    assert paths["conf"].read_text() == APPLIED
    assert paths["hooks_config"].read_text() == hooks_json({}, {"prolog": SITE_PROLOG}, EDITS)


def test_check_mode_reports_the_change_and_writes_nothing(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = run(args_for(paths, settings=SETTINGS, _ansible_check_mode=True), capsys)
    assert rc == 0
    assert result["changed"] is True and result["conf_changed"] is True
    assert result["diff"]["after"] == APPLIED and result["notes"] == APPLY_NOTES
    assert paths["conf"].read_text() == SITE
    assert not paths["hooks_config"].exists()


def test_only_settings_changed_rewrites_hooks_json_alone(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths, settings=SETTINGS), capsys)
    conf_inode = paths["conf"].stat().st_ino
    rc, result = run(args_for(paths, settings={"base": "/nvme"}), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is False
    assert paths["hooks_config"].read_text() == hooks_json({"base": "/nvme"}, {"prolog": SITE_PROLOG}, EDITS)
    assert paths["conf"].stat().st_ino == conf_inode


def test_an_alloc_flag_the_site_dropped_is_added_again_and_recorded_as_the_sites_none(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The site took the PrologFlags line out since: Alloc is appended again, and hooks.json's record of
    PrologFlags alone changes (the site has none now), so that state=absent takes out only that line."""
    run(args_for(paths, settings=SETTINGS), capsys)
    dropped = APPLIED.replace("PrologFlags=Serial,Alloc\n", "")
    paths["conf"].write_text(dropped)
    rc, result = run(args_for(paths, settings=SETTINGS), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is True
    assert result["notes"] == ["PrologFlags: (none) -> Alloc"]
    assert paths["conf"].read_text() == dropped + "PrologFlags=Alloc\n"
    edits = {**EDITS, "PrologFlags": {"site": None, "ours": "Alloc"}}
    assert paths["hooks_config"].read_text() == hooks_json(SETTINGS, {"prolog": SITE_PROLOG}, edits)
    rc, _ = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and paths["conf"].read_text() == SITE.replace("PrologFlags=Serial\n", "")


def test_configless_node_writes_hooks_json_and_leaves_slurm_conf_alone(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """manage_conf=false: slurm.conf (here present, as on a node whose copy is not the one in use) is
    neither read nor written; hooks.json keeps what was recorded before."""
    recorded = {"epilog": "/etc/slurm/site-epilog.sh"}
    paths["hooks_config"].write_text(json.dumps({"site_hooks": recorded}))
    rc, result = run(args_for(paths, settings=SETTINGS, manage_conf=False), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": False,
        "site_hooks": recorded,
        "notes": [],
        "diff": {
            "before": "",
            "after": "",
            "before_header": str(paths["conf"]),
            "after_header": str(paths["conf"]),
        },
    }
    assert paths["conf"].read_text() == SITE
    assert paths["hooks_config"].read_text() == hooks_json(SETTINGS, recorded)


def test_configless_node_without_slurm_conf_or_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hooks_config = tmp_path / "hooks.json"
    args = {"conf": str(tmp_path / "absent.conf"), "hooks": OURS, "hooks_config": str(hooks_config)}
    rc, result = run({**args, "manage_conf": False}, capsys)
    assert rc == 0 and result["changed"] is True and result["site_hooks"] == {}
    assert hooks_config.read_text() == hooks_json({}, {})
    assert not (tmp_path / "absent.conf").exists()


def test_a_host_that_does_not_edit_the_shared_conf_chains_the_site_hooks_its_writer_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """slurm_tmpdir_conf_writer: the writer's plan found the site's Prolog; a configless node (no
    slurm.conf at all) gets it in its hooks.json from site_hooks, so its jobs still run the site's
    Prolog; a rerun changes nothing. site_hooks is ignored where the host edits slurm.conf itself."""
    hooks_config = tmp_path / "hooks.json"
    found = {"prolog": SITE_PROLOG}
    args = {"conf": str(tmp_path / "absent.conf"), "hooks": OURS, "hooks_config": str(hooks_config),
            "manage_conf": False, "site_hooks": found, "settings": SETTINGS}  # fmt: skip
    rc, result = run(args, capsys)
    assert (rc, result["changed"], result["conf_changed"], result["site_hooks"]) == (0, True, False, found)
    assert hooks_config.read_text() == hooks_json(SETTINGS, found)
    assert not (tmp_path / "absent.conf").exists()
    rc, again = run(args, capsys)
    assert (rc, again["changed"]) == (0, False)
    # The writer itself plans from slurm.conf: what it is told is not what it records.
    conf = tmp_path / "slurm.conf"
    conf.write_text(SITE)
    own = tmp_path / "own-hooks.json"
    rc, result = run({**args, "conf": str(conf), "hooks_config": str(own), "manage_conf": True,
                      "site_hooks": {"epilog": "/elsewhere"}}, capsys)  # fmt: skip
    assert (rc, result["site_hooks"]) == (0, found)
    assert conf.read_text() == APPLIED


def test_missing_slurm_conf_fails_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "slurm.conf"
    hooks_config = tmp_path / "hooks.json"
    rc, result = run({"conf": str(conf), "hooks": OURS, "hooks_config": str(hooks_config)}, capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"slurm_tmpdir_conf={conf} does not exist: is Slurm installed and configured here? "
        "Where one host edits a shared slurm.conf (configless Slurm, or one file over NFS), name it in "
        "slurm_tmpdir_conf_writer.",
    }
    assert not hooks_config.exists() and not conf.exists()


def test_a_list_prolog_fails_and_nothing_is_written(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    listed = SITE.replace(f"Prolog={SITE_PROLOG}", "Prolog=/etc/slurm/a.sh,/etc/slurm/b.sh")
    paths["conf"].write_text(listed)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"Prolog=/etc/slurm/a.sh,/etc/slurm/b.sh is a list or a glob: add {OURS['prolog']} to it "
        "yourself and set slurm_tmpdir_manage_conf: false, or make Prolog a single program",
    }
    assert paths["conf"].read_text() == listed and not paths["hooks_config"].exists()


def test_hooks_json_that_is_not_json_fails_naming_the_file(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths["hooks_config"].write_text("{site_hooks")
    try:
        json.loads("{site_hooks")
    except ValueError as exc:
        reason = str(exc)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"{paths['hooks_config']} is not JSON ({reason}): fix or remove it",
    }
    assert paths["conf"].read_text() == SITE and paths["hooks_config"].read_text() == "{site_hooks"


def test_hooks_json_without_site_hooks_records_them_now(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths["hooks_config"].write_text('{"base": "/old"}\n')
    rc, result = run(args_for(paths, settings=SETTINGS), capsys)
    assert rc == 0 and result["site_hooks"] == {"prolog": SITE_PROLOG}
    assert paths["hooks_config"].read_text() == hooks_json(SETTINGS, {"prolog": SITE_PROLOG}, EDITS)


@pytest.mark.parametrize("missing", ["conf", "hooks", "hooks_config"])
def test_required_arguments(paths: dict[str, Path], capsys: pytest.CaptureFixture[str], missing: str) -> None:
    args = args_for(paths)
    del args[missing]
    rc, result = run(args, capsys)
    assert rc == 1 and result == {"failed": True, "msg": f"missing required arguments: {missing}"}
    assert paths["conf"].read_text() == SITE and not paths["hooks_config"].exists()


def test_state_takes_present_or_absent_only(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = run(args_for(paths, state="removed"), capsys)
    assert rc == 1
    assert result == {"failed": True, "msg": "value of state must be one of: present, absent, got: removed"}
    assert paths["conf"].read_text() == SITE


def test_manage_conf_is_a_boolean(paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """`manage_conf: "no"` (a string, as from an inventory) means false."""
    rc, result = run(args_for(paths, manage_conf="no"), capsys)
    assert rc == 0 and result["conf_changed"] is False
    assert paths["conf"].read_text() == SITE


def test_absent_gives_the_site_its_hooks_back_and_removes_hooks_json(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    conf, hooks_config = paths["conf"], paths["hooks_config"]
    run(args_for(paths, settings=SETTINGS), capsys)
    before = owner_and_mode(conf)
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": True,
        "site_hooks": {"prolog": SITE_PROLOG},
        "notes": RESTORE_NOTES,
        "diff": {"before": APPLIED, "after": RESTORED, "before_header": str(conf), "after_header": str(conf)},
    }
    assert conf.read_text() == RESTORED and owner_and_mode(conf) == before
    assert not hooks_config.exists()
    assert leftovers(conf.parent.parent) == []
    # Again: nothing left to undo.
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and result["changed"] is False and result["conf_changed"] is False
    assert result["notes"] == [] and result["site_hooks"] == {}
    assert conf.read_text() == RESTORED


def test_absent_in_check_mode_changes_nothing(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths, settings=SETTINGS), capsys)
    rc, result = run(args_for(paths, state="absent", _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] is True and result["diff"]["after"] == RESTORED
    assert paths["conf"].read_text() == APPLIED
    assert paths["hooks_config"].read_text() == hooks_json(SETTINGS, {"prolog": SITE_PROLOG}, EDITS)


def test_absent_restores_every_hook_of_ours_even_after_one_the_site_changed(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The site replaced our Prolog since: it stays, and our Epilog/TaskProlog (and PrologFlags) after it
    still go back."""
    run(args_for(paths), capsys)
    edited = APPLIED.replace(f"Prolog={OURS['prolog']}", "Prolog=/etc/slurm/new-site-prolog.sh")
    paths["conf"].write_text(edited)
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0
    assert paths["conf"].read_text() == (
        "ClusterName=ci\nProlog=/etc/slurm/new-site-prolog.sh\nPrologFlags=Serial\nNodeName=n1 CPUs=2\n"
    )
    assert result["notes"] == [note for note in RESTORE_NOTES if not note.startswith("Prolog:")]


def test_absent_leaves_prolog_flags_the_site_changed_since(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """PrologFlags no longer holds what dltune wrote: it is the site's now and stays."""
    run(args_for(paths), capsys)
    paths["conf"].write_text(APPLIED.replace("PrologFlags=Serial,Alloc", "PrologFlags=Contain"))
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and paths["conf"].read_text() == SITE.replace("PrologFlags=Serial", "PrologFlags=Contain")
    assert result["notes"] == [note for note in RESTORE_NOTES if not note.startswith("PrologFlags:")]


def test_absent_on_a_configless_node_removes_only_hooks_json(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths, settings=SETTINGS), capsys)
    rc, result = run(args_for(paths, state="absent", manage_conf=False), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": False,
        "site_hooks": {"prolog": SITE_PROLOG},
        "notes": [],
        "diff": {
            "before": "",
            "after": "",
            "before_header": str(paths["conf"]),
            "after_header": str(paths["conf"]),
        },
    }
    assert paths["conf"].read_text() == APPLIED and not paths["hooks_config"].exists()


def test_absent_without_slurm_conf_removes_hooks_json(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths["hooks_config"].write_text(hooks_json({}, {}))
    paths["conf"].unlink()
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is False
    assert not paths["hooks_config"].exists() and not paths["conf"].exists()


def test_absent_with_only_slurm_conf_left_to_undo(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """hooks.json already gone (removed by hand): slurm.conf still loses our hooks."""
    run(args_for(paths), capsys)
    paths["hooks_config"].unlink()
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is True
    assert paths["conf"].read_text() == "ClusterName=ci\nPrologFlags=Serial,Alloc\nNodeName=n1 CPUs=2\n"
    assert result["notes"] == [f"{key}: {OURS[hook]} -> (none)" for hook, key in conf_module.KEYS.items()]


def test_a_failed_slurm_conf_replace_leaves_it_whole_and_no_temporary(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """hooks.json is written first (a slurm.conf naming our hooks must find the site hooks), so a
    failure replacing slurm.conf leaves the old slurm.conf and the site hooks recorded."""
    replace = os.replace

    def failing_for_conf(src: str, dst: str) -> None:
        if dst == str(paths["conf"]):
            raise OSError(5, "Input/output error")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_for_conf)
    rc, result = run(args_for(paths), capsys)
    # A failed task with one line naming the file, not a traceback.
    assert rc == 1
    assert result == {"failed": True, "msg": f"{paths['conf']}: cannot replace it (Input/output error)"}
    assert paths["conf"].read_text() == SITE
    assert paths["hooks_config"].read_text() == hooks_json({}, {"prolog": SITE_PROLOG}, EDITS)
    assert leftovers(paths["conf"].parent.parent) == []


def with_its_includes(body: str, root: Path) -> str:
    """The sample with each file it Includes there (empty, as this sample does not publish them): a
    relative one beside slurm.conf in ``root``, an absolute one under ``root`` (its Include line naming
    that copy)."""
    for name in re.findall(r"(?im)^[ \t]*include[ \t]+(\S+)", body):
        if name.startswith("/"):
            copy = root / name.lstrip("/")
            body = body.replace(f" {name}\n", f" {copy}\n")
        else:
            copy = root / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(b"")
    return body


@pytest.mark.parametrize("sample", samples("slurm_conf"), ids=str)
def test_real_slurm_conf_round_trip(
    sample: Sample, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each real slurm.conf (with the files it Includes): present, a no-op rerun, then absent gives the
    site its file back byte for byte, PrologFlags too; or, for a list/glob hook, a failure that writes
    nothing."""
    conf = tmp_path / "slurm.conf"
    site = with_its_includes(sample.body, tmp_path).encode()
    conf.write_bytes(site)
    args = {"conf": str(conf), "hooks": OURS, "hooks_config": str(tmp_path / "hooks.json")}
    rc, result = run(args, capsys)
    if rc == 1:
        assert "is a list or a glob" in result["msg"] and conf.read_bytes() == site
        return
    applied = conf.read_bytes()
    assert {
        k: v
        for k, v in conf_module.parse(applied.decode()).items()
        if k in ("prolog", "epilog", "taskprolog")
    } == {
        "prolog": OURS["prolog"],
        "epilog": OURS["epilog"],
        "taskprolog": OURS["task_prolog"],
    }
    assert conf_module.runs_at_allocation(conf_module.parse(applied.decode()).get("prologflags", ""))
    assert run(args, capsys)[1]["changed"] is False
    rc, result = run({**args, "state": "absent"}, capsys)
    assert rc == 0 and conf.read_bytes() == site


def test_an_include_that_cannot_be_read_fails_and_nothing_is_written(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A hook slurm.conf does not set may be set in the file it Includes: not guessed, refused naming it."""
    missing = paths["conf"].parent / "nodes.conf"
    text = "Include nodes.conf\nProlog=/etc/slurm/site-prolog.sh\n"
    paths["conf"].write_text(text)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1 and result["msg"].startswith(
        f"{paths['conf']}: an Include cannot be read, so Epilog may be set there: {missing} "
    )
    assert paths["conf"].read_text() == text and not paths["hooks_config"].exists()


def test_a_hook_set_in_an_included_file_fails_naming_that_file(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """dltune edits only slurm.conf itself: a hook Slurm reads from an included file is the site's to move."""
    included = paths["conf"].parent / "hooks.conf"
    included.write_text("Epilog=/etc/slurm/site-epilog.sh\n")
    text = f"ClusterName=ci\nInclude {included.name}\n"
    paths["conf"].write_text(text)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1
    assert result["msg"] == (
        f"Epilog=/etc/slurm/site-epilog.sh is set in {included} line 1, a file {paths['conf']} Includes: "
        f"dltune edits only {paths['conf']}; move Epilog there, or manage it yourself"
    )
    assert paths["conf"].read_text() == text and not paths["hooks_config"].exists()


# --- the planner's edges that the module tests above do not reach


def test_no_prolog_flags_gets_alloc() -> None:
    text, site, notes, record = conf_module.plan("slurm.conf", b"ClusterName=ci\n", OURS, {}, {})
    assert text.splitlines()[-1] == b"PrologFlags=Alloc"
    assert notes[-1] == "PrologFlags: (none) -> Alloc" and site == {}
    assert record["PrologFlags"] == {"site": None, "ours": "Alloc"}


def test_empty_items_of_prolog_flags_are_dropped() -> None:
    text, _, notes, record = conf_module.plan("slurm.conf", b"PrologFlags=Serial,\n", OURS, {}, {})
    assert conf_module.parse(text.decode())["prologflags"] == "Serial,Alloc"
    assert notes[-1] == "PrologFlags: Serial, -> Serial,Alloc"
    assert record["PrologFlags"] == {"site": "Serial,", "ours": "Serial,Alloc"}


def test_a_site_hook_with_capitals_is_chained() -> None:
    text, site, notes, _ = conf_module.plan("slurm.conf", b"Prolog=/opt/X11/prolog\n", OURS, {}, {})
    assert conf_module.parse(text.decode())["prolog"] == OURS["prolog"]
    assert site == {"prolog": "/opt/X11/prolog"}
    assert notes[0] == f"Prolog: /opt/X11/prolog -> {OURS['prolog']}, chaining /opt/X11/prolog"


def test_a_comment_holding_a_hash_is_cut_at_the_first_hash() -> None:
    assert conf_module.parse("Prolog=/etc/slurm/p.sh # see #12\n") == {"prolog": "/etc/slurm/p.sh"}


def test_a_value_slurm_reads_from_a_line_of_two_words_is_the_first() -> None:
    """`Epilog=/c d`: the value Slurm reads is the first word, /c; the module reads and chains the same,
    and edits only those bytes (` d` stays as the site wrote it)."""
    assert conf_module.parse("Epilog=/c d\n") == {"epilog": "/c"}
    text, site, _, record = conf_module.plan("slurm.conf", b"Epilog=/c d\n", OURS, {}, {})
    assert text.startswith(f"Epilog={OURS['epilog']} d\n".encode()) and site == {"epilog": "/c"}
    assert record["Epilog"] == {"site": "/c", "ours": OURS["epilog"]}


def test_a_key_appended_once_is_edited_in_place_by_the_next_plan() -> None:
    """A key appended once is found at its new line: a new value for it replaces that value's bytes,
    nothing is appended again."""
    first, _, _, record = conf_module.plan("slurm.conf", b"ClusterName=ci\nNodeName=n1\n", OURS, {}, {})
    moved = {**OURS, "epilog": "/b"}
    second, _, _, _ = conf_module.plan("slurm.conf", first, moved, {}, record)
    assert second == first.replace(f"Epilog={OURS['epilog']}\n".encode(), b"Epilog=/b\n")
    assert second.count(b"Epilog=") == 1


def test_line_ends_and_a_missing_final_newline_are_kept_and_come_back_byte_for_byte() -> None:
    """CRLF stays CRLF; the lines appended to a file without a final newline go after a line end, and
    the file still ends without one; restore gives back every byte, bytes that are not UTF-8 too."""
    site = b"ClusterName=ci\r\nProlog=/p # caf\xe9\r\nNodeName=n1"
    applied, hooks, _, record = conf_module.plan("slurm.conf", site, OURS, {}, {})
    assert applied == (
        f"ClusterName=ci\r\nProlog={OURS['prolog']} # caf".encode() + b"\xe9\r\nNodeName=n1"
        + f"\r\nEpilog={OURS['epilog']}\r\nTaskProlog={OURS['task_prolog']}\r\nPrologFlags=Alloc".encode()
    )  # fmt: skip
    assert hooks == {"prolog": "/p"}
    restored, _ = conf_module.restore("slurm.conf", applied, record)
    assert restored == site


# --- filter slurm_tmpdir_fstype_of


def test_the_filter_is_registered_under_its_name() -> None:
    assert filters.FilterModule().filters() == {"slurm_tmpdir_fstype_of": filters.fstype_of}


def test_fstype_of_skips_short_lines_and_reads_the_rest() -> None:
    mountinfo = (
        "7 1 8:1 / - tmpfs tmpfs rw\n"  # fewer than five fields before the separator: skipped
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "40 22 0:50 / /scratch - nfs4 10.0.0.5:/export rw\n"  # exactly five: read
    )
    assert filters.fstype_of("/scratch/job", mountinfo) == "nfs4"
    assert filters.fstype_of("/tmp", mountinfo) == "ext4"


def test_fstype_of_a_mount_point_ending_in_a_capital() -> None:
    mountinfo = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:50 / /dataX rw - xfs /dev/sdb rw\n"
    assert filters.fstype_of("/data/job", mountinfo) == "ext4"
    assert filters.fstype_of("/dataX/job", mountinfo) == "xfs"


@pytest.mark.parametrize("record", ["[]\n", '"text"\n', '{"site_hooks": "x"}\n', '{"site_hooks": [1]}\n'])
def test_a_record_that_is_json_but_not_this_roles_is_one_message_and_nothing_changes(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], record: str
) -> None:
    """Valid JSON of another shape ended in a traceback (AttributeError, or dict() of a string)."""
    paths["hooks_config"].parent.mkdir(parents=True, exist_ok=True)
    paths["hooks_config"].write_text(record)
    before = paths["conf"].read_text()
    status, result = run(args_for(paths), capsys)
    assert status == 1 and result["failed"]
    assert result["msg"] == (
        f"{paths['hooks_config']} is not this role's record (an object with site_hooks): fix or remove it"
    )
    assert paths["conf"].read_text() == before and paths["hooks_config"].read_text() == record


def test_the_sites_hook_lines_keep_their_spelling_and_comments_and_come_back_byte_for_byte() -> None:
    site = (
        b"PrologFlags=Alloc\n"
        b"prolog = /etc/slurm/site-prolog.sh   # the site's prolog: mounts scratch\n"
        b"Epilog=/etc/slurm/site-epilog.sh#cleans up\n"
        b"TaskProlog=/etc/slurm/task-prolog.sh\n"
    )
    applied, _, _, record = conf_module.plan("slurm.conf", site, OURS, {}, {})
    assert applied == (
        b"PrologFlags=Alloc\n"
        + f"prolog = {OURS['prolog']}   # the site's prolog: mounts scratch\n".encode()
        + f"Epilog={OURS['epilog']}#cleans up\n".encode()
        + f"TaskProlog={OURS['task_prolog']}\n".encode()
    )
    restored, _ = conf_module.restore("slurm.conf", applied, record)
    assert restored == site


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root (lchown)")
def test_a_slurm_conf_link_another_user_made_fails_before_any_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The module refuses, naming the link, before it writes hooks.json or anything else."""
    target = tmp_path / "elsewhere.conf"
    target.write_text(SITE)
    conf = tmp_path / "slurm.conf"
    conf.symlink_to(target)
    os.lchown(conf, 65534, 65534)
    hooks_config = tmp_path / "hooks.json"
    rc, result = run({"conf": str(conf), "hooks": OURS, "hooks_config": str(hooks_config)}, capsys)
    assert rc == 1 and result["msg"].startswith(f"{conf}: a link to slurm.conf: {conf} belongs to uid 65534")
    assert target.read_text() == SITE and not hooks_config.exists()
