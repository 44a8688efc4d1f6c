"""Role slurm_healthcheck's Ansible module run for real, in-process (as Ansible's own unit tests run
modules): arguments through ansible.module_utils.testing.patch_module_args, main()'s JSON result read
from stdout, every path in tmp_path. Checked is what a site sees: slurm.conf byte for byte with its mode
and owner kept, the record of the site's values (written before slurm.conf, kept across reruns), the
changed flags, the errors naming what is wrong, --check changing nothing, and state=absent putting back
exactly what the site had. The module runs no command (no scontrol, no systemctl)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.conftest import load_role_module
from tests.unit.test_slurm_healthcheck_role import OURS, SITE

keys_module = load_role_module("plugins/modules/slurm_conf_keys.py")

# SITE with our values: the last assignment of each key given our value, the rest of its line as the
# site wrote it (its trailing comment too), the missing key appended.
APPLIED = (
    "ClusterName=ci\n"
    "HealthCheckProgram=/usr/local/sbin/dltune-healthcheck  # the site's NHC\n"
    "healthcheckinterval=60\n"
    "HealthCheckInterval=300\n"
    "NodeName=n1 CPUs=2\n"
    "HealthCheckNodeState=ANY,CYCLE\n"
)
SITE_VALUES = {
    "HealthCheckProgram": "/usr/sbin/nhc",
    "HealthCheckInterval": "120",
    "HealthCheckNodeState": None,
}
# state=absent gives back exactly what the site had, byte for byte.
RESTORED = SITE
CONF_MODE = 0o644


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """main() with these module arguments: (exit status, its JSON result without `invocation`)."""
    capsys.readouterr()
    # _ansible_no_log: no invocation line in the host's syslog/journal.
    with patch_module_args({**args, "_ansible_no_log": True}), pytest.raises(SystemExit) as exited:
        keys_module.main()
    result = json.loads(capsys.readouterr().out)
    result.pop("invocation")
    return exited.value.code, result


def record_text(site: dict[str, str | None], ours: dict[str, str] = OURS) -> str:
    """The record as the module writes it: key -> the bytes the site's value had (None: it had none)
    and the value written."""
    edits = {key: {"site": value, "ours": ours[key]} for key, value in site.items()}
    return json.dumps({"edits": edits}, indent=2, sort_keys=True) + "\n"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".dltune-*"))


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


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
    return {"conf": conf, "record": state / "healthcheck.json"}


def args_for(paths: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {"conf": str(paths["conf"]), "keys": OURS, "record": str(paths["record"]), **extra}


def diff(paths: dict[str, Path], before: str, after: str) -> dict[str, str]:
    return {
        "before": before,
        "after": after,
        "before_header": str(paths["conf"]),
        "after_header": str(paths["conf"]),
    }


def test_first_run_sets_our_values_and_records_the_sites(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    conf, record = paths["conf"], paths["record"]
    before = owner_and_mode(conf)
    rc, result = run(args_for(paths), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": True,
        "site_values": SITE_VALUES,
        "diff": diff(paths, SITE, APPLIED),
    }
    assert conf.read_text() == APPLIED and owner_and_mode(conf) == before
    assert record.read_text() == record_text(SITE_VALUES)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert leftovers(conf.parent.parent) == []


def test_a_rerun_is_a_no_op_and_never_records_our_own_values(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths), capsys)
    inodes = paths["conf"].stat().st_ino, paths["record"].stat().st_ino
    rc, result = run(args_for(paths, state="present"), capsys)
    assert rc == 0
    assert result == {
        "changed": False,
        "conf_changed": False,
        "site_values": SITE_VALUES,
        "diff": diff(paths, APPLIED, APPLIED),
    }
    assert (paths["conf"].stat().st_ino, paths["record"].stat().st_ino) == inodes
    assert paths["record"].read_text() == record_text(SITE_VALUES)


def test_a_value_the_site_changed_since_is_set_back_and_the_record_kept(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths), capsys)
    paths["conf"].write_text(APPLIED.replace("HealthCheckInterval=300", "HealthCheckInterval=900"))
    record_inode = paths["record"].stat().st_ino
    rc, result = run(args_for(paths), capsys)
    assert rc == 0 and result["changed"] is True and result["conf_changed"] is True
    assert paths["conf"].read_text() == APPLIED
    assert paths["record"].stat().st_ino == record_inode
    assert paths["record"].read_text() == record_text(SITE_VALUES)


def test_a_new_key_is_added_to_the_record_and_the_old_ones_kept(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths), capsys)
    more = {**OURS, "HealthCheckNodeState": "IDLE"}
    rc, result = run(args_for(paths, keys=more), capsys)
    assert rc == 0 and result["changed"] is True and result["site_values"] == SITE_VALUES
    assert paths["conf"].read_text() == APPLIED.replace("ANY,CYCLE", "IDLE")
    assert paths["record"].read_text() == record_text(SITE_VALUES, more)


def test_values_that_are_not_strings_are_written_as_words(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = run(args_for(paths, keys={"HealthCheckInterval": 300}), capsys)
    assert rc == 0 and result["site_values"] == {"HealthCheckInterval": "120"}
    assert paths["conf"].read_text() == SITE.replace("HealthCheckInterval=120", "HealthCheckInterval=300")


def test_the_documented_default_state_is_the_one_applied(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The invocation Ansible reports (ansible-playbook -v) carries each option as the module used it."""
    capsys.readouterr()
    with patch_module_args({**args_for(paths), "_ansible_no_log": True}), pytest.raises(SystemExit):
        keys_module.main()
    invocation = json.loads(capsys.readouterr().out)["invocation"]
    assert invocation == {"module_args": {**args_for(paths), "state": "present"}}


def test_path_arguments_expand_variables(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLTUNE_TEST_ETC", str(paths["conf"].parent))
    monkeypatch.setenv("HOME", str(paths["record"].parent))
    rc, result = run(
        {"conf": "$DLTUNE_TEST_ETC/slurm.conf", "keys": OURS, "record": "~/healthcheck.json"}, capsys
    )
    assert rc == 0 and result["diff"] == diff(paths, SITE, APPLIED)
    assert paths["conf"].read_text() == APPLIED
    assert paths["record"].read_text() == record_text(SITE_VALUES)


def test_check_mode_reports_the_change_and_writes_nothing(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = run(args_for(paths, _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] is True and result["diff"]["after"] == APPLIED
    assert paths["conf"].read_text() == SITE and not paths["record"].exists()


@pytest.mark.parametrize(
    ("keys", "bad"),
    [
        ({"HealthCheckProgram": "/usr/sbin/nhc -a"}, "HealthCheckProgram=/usr/sbin/nhc -a"),
        ({"HealthCheckProgram": "/usr/sbin/nhc#x"}, "HealthCheckProgram=/usr/sbin/nhc#x"),
        ({"HealthCheckInterval": ""}, "HealthCheckInterval="),
        ({"Health-Check-Interval": "300"}, "Health-Check-Interval=300"),
        # Slurm would read an escape or a quote, not the bytes written.
        ({"HealthCheckProgram": "/usr/sbin/nhc\\x"}, "HealthCheckProgram=/usr/sbin/nhc\\x"),
        ({"HealthCheckProgram": '"/usr/sbin/nhc"'}, 'HealthCheckProgram="/usr/sbin/nhc"'),
        (
            {"HealthCheckInterval": "", "HealthCheckNodeState": "ANY", "HealthCheckProgram": "a b"},
            "HealthCheckInterval=, HealthCheckProgram=a b",
        ),
    ],
)
def test_a_value_that_is_not_one_word_fails_and_nothing_is_written(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], keys: dict[str, str], bad: str
) -> None:
    rc, result = run(args_for(paths, keys=keys), capsys)
    assert rc == 1 and result == {"failed": True, "msg": f"slurm.conf values must be single words: {bad}"}
    assert paths["conf"].read_text() == SITE and not paths["record"].exists()


def test_missing_slurm_conf_fails_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "slurm.conf"
    rc, result = run({"conf": str(conf), "keys": OURS, "record": str(tmp_path / "r.json")}, capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"slurm_healthcheck_conf={conf} does not exist: is Slurm configured here?",
    }
    assert not (tmp_path / "r.json").exists() and not conf.exists()


def test_a_record_that_is_not_json_fails_naming_the_file(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    text = "{site_values"
    paths["record"].write_text(text)
    try:
        json.loads(text)
    except ValueError as exc:
        reason = str(exc)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"{paths['record']} is not the role's JSON record ({reason}): fix or remove it",
    }
    assert paths["conf"].read_text() == SITE and paths["record"].read_text() == text


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"edits": []}',
        '{"edits": {"HealthCheckInterval": "120"}}',
        '{"edits": {"HealthCheckInterval": {"site": 120, "ours": "300"}}}',
        '{"edits": {"HealthCheckInterval": {"site": "120"}}}',
        '{"site_values": ["120"]}',
    ],
)
def test_a_record_of_another_shape_fails_naming_the_file(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], text: str
) -> None:
    paths["record"].write_text(text)
    rc, result = run(args_for(paths), capsys)
    assert rc == 1
    assert result == {
        "failed": True,
        "msg": f"{paths['record']} is not the role's record (an object with edits: key -> site, ours): "
        "fix or remove it",
    }
    assert paths["conf"].read_text() == SITE and paths["record"].read_text() == text


def test_a_record_of_the_earlier_release_is_read_as_the_same_record(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """{"site_values": {key: value}}: the site's values as recorded, ours the keys argument's; a rerun
    with nothing to change leaves it as it is, and state=absent puts the site's values back."""
    old = json.dumps({"site_values": SITE_VALUES}, indent=2, sort_keys=True) + "\n"
    paths["conf"].write_text(APPLIED)
    paths["record"].write_text(old)
    rc, result = run(args_for(paths), capsys)
    assert (rc, result["changed"], result["site_values"]) == (0, False, SITE_VALUES)
    assert paths["record"].read_text() == old and paths["conf"].read_text() == APPLIED
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and paths["conf"].read_text() == RESTORED and not paths["record"].exists()


def test_a_record_without_site_values_is_an_empty_one(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An object with neither edits nor site_values (`{}`) holds nothing yet: the site's values are
    recorded now."""
    paths["record"].write_text("{}\n")
    rc, result = run(args_for(paths), capsys)
    assert rc == 0 and result["site_values"] == SITE_VALUES
    assert paths["record"].read_text() == record_text(SITE_VALUES)


@pytest.mark.parametrize("missing", ["conf", "keys", "record"])
def test_required_arguments(paths: dict[str, Path], capsys: pytest.CaptureFixture[str], missing: str) -> None:
    args = args_for(paths)
    del args[missing]
    rc, result = run(args, capsys)
    assert rc == 1 and result == {"failed": True, "msg": f"missing required arguments: {missing}"}
    assert paths["conf"].read_text() == SITE and not paths["record"].exists()


def test_state_takes_present_or_absent_only(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, result = run(args_for(paths, state="removed"), capsys)
    assert rc == 1
    assert result == {"failed": True, "msg": "value of state must be one of: present, absent, got: removed"}
    assert paths["conf"].read_text() == SITE


def test_absent_puts_back_exactly_what_the_site_had_and_removes_the_record(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    conf, record = paths["conf"], paths["record"]
    run(args_for(paths), capsys)
    before = owner_and_mode(conf)
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": True,
        "site_values": SITE_VALUES,
        "diff": diff(paths, APPLIED, RESTORED),
    }
    assert conf.read_text() == RESTORED and owner_and_mode(conf) == before
    assert not record.exists() and leftovers(conf.parent.parent) == []
    # Again: no record, nothing to undo, slurm.conf not even read.
    conf.unlink()
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and result == {"changed": False, "msg": "no record: nothing was set by this role"}


def test_absent_without_a_record_leaves_slurm_conf_alone(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths["conf"].write_text(APPLIED)
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and result == {"changed": False, "msg": "no record: nothing was set by this role"}
    assert paths["conf"].read_text() == APPLIED


def test_absent_in_check_mode_changes_nothing(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths), capsys)
    rc, result = run(args_for(paths, state="absent", _ansible_check_mode=True), capsys)
    assert rc == 0 and result["changed"] is True and result["diff"]["after"] == RESTORED
    assert paths["conf"].read_text() == APPLIED and paths["record"].read_text() == record_text(SITE_VALUES)


def test_absent_with_a_record_but_no_slurm_conf_fails_and_keeps_the_record(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(args_for(paths), capsys)
    paths["conf"].unlink()
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert (
        rc == 1
        and result["msg"]
        == f"slurm_healthcheck_conf={paths['conf']} does not exist: is Slurm configured here?"
    )
    assert paths["record"].read_text() == record_text(SITE_VALUES)


def test_absent_when_nothing_of_ours_is_left_only_drops_the_record(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The site took every key back (one line even deleted): slurm.conf stays as the site has it."""
    run(args_for(paths), capsys)
    site_now = SITE.replace("HealthCheckInterval=120\n", "")
    paths["conf"].write_text(site_now)
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0
    assert result == {
        "changed": True,
        "conf_changed": False,
        "site_values": SITE_VALUES,
        "diff": diff(paths, site_now, site_now),
    }
    assert paths["conf"].read_text() == site_now and not paths["record"].exists()


def test_absent_removes_our_appended_line_even_reformatted(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A key the site never had goes, also after someone put blanks around its `=`."""
    run(args_for(paths), capsys)
    paths["conf"].write_text(
        APPLIED.replace("HealthCheckNodeState=ANY,CYCLE", "HealthCheckNodeState = ANY,CYCLE")
    )
    rc, _ = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and paths["conf"].read_text() == RESTORED


def test_a_failed_slurm_conf_replace_on_absent_keeps_the_record(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is the only way back to the site's values: an absent run that cannot replace
    slurm.conf leaves it as it was, for the next try."""
    run(args_for(paths), capsys)
    replace = os.replace

    def failing_for_conf(src: str, dst: str) -> None:
        if dst == str(paths["conf"]):
            raise OSError(5, "Input/output error")
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_for_conf)
    rc, result = run(args_for(paths, state="absent"), capsys)
    # A failed task with one line naming the file, not a traceback.
    assert rc == 1
    assert result == {"failed": True, "msg": f"{paths['conf']}: cannot replace it (Input/output error)"}
    assert paths["conf"].read_text() == APPLIED
    assert paths["record"].read_text() == record_text(SITE_VALUES)
    assert leftovers(paths["conf"].parent.parent) == []


# --- the reader's edge


def test_a_comment_holding_a_hash_is_cut_at_the_first_hash() -> None:
    applied, record = keys_module.plan(
        b"HealthCheckInterval=60 # was #30\n", "slurm.conf", {"HealthCheckInterval": "300"}, {}, "present"
    )
    assert applied == b"HealthCheckInterval=300 # was #30\n"
    assert record == {"HealthCheckInterval": {"site": "60", "ours": "300"}}


@pytest.mark.parametrize(
    "line",
    [
        "  healthcheckinterval = 120\t# every two minutes, agreed with NHC's authors",
        "HealthCheckInterval=120#no blank before the comment",
        "HEALTHCHECKINTERVAL=120   ",
    ],
)
def test_a_site_line_keeps_its_spelling_blanks_and_comment_and_comes_back_byte_for_byte(line: str) -> None:
    site = f"ClusterName=ci\n{line}\n".encode()
    ours = {"HealthCheckInterval": "300"}
    applied, record = keys_module.plan(site, "slurm.conf", ours, {}, "present")
    assert applied == site.replace(b"120", b"300", 1)
    restored, _ = keys_module.plan(applied, "slurm.conf", ours, record, "absent")
    assert restored == site


@pytest.mark.parametrize(("eol", "final"), [("\r\n", True), ("\r\n", False), ("\n", False)])
def test_line_ends_a_missing_final_newline_and_bytes_not_utf8_are_kept(
    paths: dict[str, Path], capsys: pytest.CaptureFixture[str], eol: str, final: bool
) -> None:
    """slurm.conf is edited as bytes: only the values' bytes change; the missing key is appended with
    the file's own line end (before it, where the file has no final newline, which it still lacks);
    the diff shows the file's text; state=absent gives the site its file back byte for byte."""
    site = SITE.replace("\n", eol).encode().replace(b"the site's NHC", b"Ma\xefs's NHC")
    site = site if final else site.removesuffix(eol.encode())
    paths["conf"].write_bytes(site)
    applied = site.replace(b"=/usr/sbin/nhc", b"=/usr/local/sbin/dltune-healthcheck").replace(
        b"HealthCheckInterval=120", b"HealthCheckInterval=300"
    )
    added = b"HealthCheckNodeState=ANY,CYCLE"
    applied += added + eol.encode() if final else eol.encode() + added
    rc, result = run(args_for(paths), capsys)
    assert rc == 0 and result["site_values"] == SITE_VALUES
    assert result["diff"] == diff(paths, site.decode("utf-8", "replace"), applied.decode("utf-8", "replace"))
    assert paths["conf"].read_bytes() == applied
    rc, result = run(args_for(paths, state="absent"), capsys)
    assert rc == 0 and paths["conf"].read_bytes() == site
