"""slurm.conf as Slurm reads it, edited as bytes (plugins/module_utils/slurm_conf.py, also
dltune/probes/slurm_conf_model.py). Two halves:

- the reading follows Slurm's own parser (src/common/parse_config.c: _get_next_line strips comments
  at an unescaped '#', joins a line ending in an odd run of backslashes, drops escapes; the key=value
  regex; _parse_include_directive), on lines chosen where a simpler reader goes wrong;
- every real slurm.conf of tests/fixtures/real/slurm_conf, and variants generated from each (CRLF, no
  final newline, a Latin-1 comment, a continued value, several settings on a line, an Include), comes
  back byte for byte through both modules' present then absent, in either order, and a second present
  changes nothing. tests/integration/test_slurm_conf_accepted.py feeds the written files to real Slurm.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import load_role_module
from tests.real_corpus import samples

keys_module = load_role_module("plugins/modules/slurm_conf_keys.py")
tmpdir_module = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
# The model as the modules import it (by the collection's name), so that its errors are theirs.
model = sys.modules[keys_module.load.__module__]

HEALTHCHECK = {
    "HealthCheckProgram": "/usr/local/sbin/dltune-healthcheck",
    "HealthCheckInterval": "300",
    "HealthCheckNodeState": "ANY,CYCLE",
}
HOOKS = {
    "prolog": "/etc/slurm/dltune/prolog",
    "epilog": "/etc/slurm/dltune/epilog",
    "task_prolog": "/etc/slurm/dltune/task_prolog",
}
CONF = "/etc/slurm/slurm.conf"


def values(data: bytes, read: Callable[[str], bytes] | None = None) -> dict[str, str]:
    return model.load(CONF, data, read=read or model.read_file).values()


# --- reading as Slurm reads ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Slurm cuts the comment first, then joins: the backslash before '#' continues the line.
        (b"Prolog=/a \\# not a comment\n", {"prolog": "/a"}),
        (b"Prolog=/a\\#b\n", {"prolog": "/a#b"}),  # an escaped '#' is part of the value
        (b"HealthCheckInterval=6\\\n0\n", {"healthcheckinterval": "60"}),  # joined mid-value
        (b"NodeName=n1 \\\n  CPUs=4\nEpilog=/e\n", {"nodename": "n1", "epilog": "/e"}),
        (b"Epilog=/e # note \\\nProlog=/p\n", {"epilog": "/e", "prolog": "/p"}),  # '\\' in a comment
        (b"Prolog=/a\\\\\nEpilog=/e\n", {"prolog": "/a\\", "epilog": "/e"}),  # an even run: no join
        (b"Prolog=/a\r\nEpilog=/e\r\n", {"prolog": "/a", "epilog": "/e"}),
        (b'Prolog="/opt/site hooks/p" Epilog=/e\n', {"prolog": "/opt/site hooks/p", "epilog": "/e"}),
        (b"HealthCheckInterval=60 HealthCheckNodeState=IDLE\n", {"healthcheckinterval": "60",
                                                                "healthchecknodestate": "IDLE"}),
        (b"PartitionName=p Nodes=n1 Default=YES\n", {"partitionname": "p"}),  # a record owns its pairs
        (b"prolog=/a\nPROLOG=/b\n", {"prolog": "/b"}),  # any case, the last wins
        (b"  Prolog = /a\n", {"prolog": "/a"}),
        (b"# Prolog=/a\n", {}),
        (b"Prolog=/caf\xe9\n", {"prolog": "/caf\udce9"}),  # not UTF-8: kept, never a traceback
        (b"Prolog=/a\\\n", {"prolog": "/a"}),  # a continuation at the end of the file
    ],
)  # fmt: skip
def test_values_are_read_as_slurms_parser_reads_them(text: bytes, expected: dict[str, str]) -> None:
    assert values(text) == expected


def test_an_include_is_read_in_place_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "hooks.conf").write_bytes(b"Prolog=/site/prolog\n")
    (tmp_path / "lab.conf").write_bytes(b"Epilog=/from/cluster/file\n")
    conf = tmp_path / "slurm.conf"
    conf.write_bytes(b"ClusterName=LAB\nProlog=/early\ninclude hooks.conf\nINCLUDE %c.conf\nEpilog=/late\n")
    loaded = model.load(str(conf))
    assert loaded.values() == {"clustername": "LAB", "prolog": "/site/prolog", "epilog": "/late"}
    setting = loaded.last("prolog")
    assert (setting.path, setting.lineno) == (str(tmp_path / "hooks.conf"), 1)
    assert [s.value for s in loaded.settings if s.lkey == "epilog"] == ["/from/cluster/file", "/late"]


def test_a_line_that_only_starts_with_include_is_a_setting() -> None:
    # Slurm's directive is the word at the very start of the line followed by a blank.
    assert values(b"IncludeFoo=1\n include x\n") == {"includefoo": "1"}


# --- byte-for-byte round trips ------------------------------------------------------------------


def healthcheck_present(path: str, data: bytes, record: dict) -> tuple[bytes, dict]:
    return keys_module.plan(data, path, HEALTHCHECK, record, "present")


def healthcheck_absent(path: str, data: bytes, record: dict) -> bytes:
    return keys_module.plan(data, path, HEALTHCHECK, record, "absent")[0]


def hooks_present(path: str, data: bytes, record: dict) -> tuple[bytes, dict]:
    after, _site_hooks, _notes, new_record = tmpdir_module.plan(path, data, HOOKS, {}, record)
    return after, new_record


def hooks_absent(path: str, data: bytes, record: dict) -> bytes:
    return tmpdir_module.restore(path, data, record)[0]


EDITORS = {
    "healthcheck": (healthcheck_present, healthcheck_absent),
    "slurm_tmpdir": (hooks_present, hooks_absent),
}


def round_trip(path: str, site: bytes, order: list[str]) -> None:
    """present of each editor in ``order``, a second present of each (nothing changes), then absent
    in the reverse order: the site's bytes again."""
    data, records = site, {}
    for name in order:
        data, records[name] = EDITORS[name][0](path, data, {})
    for name in order:
        again, record = EDITORS[name][0](path, data, records[name])
        assert again == data, f"a second {name} present changed the file"
        assert record == records[name], f"a second {name} present changed its record"
    for name in reversed(order):
        data = EDITORS[name][1](path, data, records[name])
    assert data == site


def variants(body: bytes) -> dict[str, bytes]:
    """The site's file and what real sites also do to it."""
    return {
        "as published": body,
        "CRLF": body.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"),
        "no final newline": body.rstrip(b"\n"),
        "Latin-1 comment": b"# r\xe9seau du laboratoire\n" + body,
        "continued site values": body
        + b"Prolog=/etc/slurm/site\\\n-prolog.sh\nHealthCheckProgram=/usr/sbin/\\\r\nnhc\n",
        "several settings on a line": body + b"HealthCheckInterval=60 HealthCheckNodeState=IDLE\n",
        "quoted site values": body + b'Epilog="/opt/site/epilog"  # quoted\nHealthCheckInterval = "30"\n',
        "an escaped hash": body + b"TaskProlog=/opt/a\\#b\n",
    }


REAL = [s for s in samples("slurm_conf")]
ORDERS = [["healthcheck", "slurm_tmpdir"], ["slurm_tmpdir", "healthcheck"]]


def refused(data: bytes) -> str | None:
    """Why slurm_tmpdir refuses this file (a list or glob of the site's hooks), or None."""
    try:
        hooks_present(CONF, data, {})
    except model.ConfError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("order", ORDERS, ids="-then-".join)
@pytest.mark.parametrize("variant", list(variants(b"")))
@pytest.mark.parametrize("sample", REAL, ids=str)
def test_every_real_slurm_conf_comes_back_byte_for_byte(
    sample, variant: str, order: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files the published ones Include were not published: here they are empty.
    monkeypatch.setattr(model, "read_file", lambda path: b"")
    site = variants(sample.body.encode())[variant]
    reason = refused(site)
    if reason is not None:
        # The site's hooks are a glob (run-parts): slurm_tmpdir refuses before writing; the health
        # check's keys still go and come back.
        assert "is a list or a glob" in reason, reason
        order = [name for name in order if name != "slurm_tmpdir"]
    round_trip(CONF, site, order)


def test_the_corpus_has_a_file_with_continuations_and_one_without_a_trailing_newline() -> None:
    bodies = [s.body.encode() for s in REAL]
    assert any(b"\\\n" in body for body in bodies)
    assert len(REAL) >= 9


def test_present_changes_only_the_bytes_of_the_values_slurm_uses() -> None:
    site = (
        b"HealthCheckProgram=/usr/sbin/nhc\r\n"
        b"  healthcheckinterval = 60\t# every minute\r\n"
        b"HealthCheckInterval=120 HealthCheckNodeState=IDLE\r\n"
        b"NodeName=n1 CPUs=2"
    )
    after, record = healthcheck_present(CONF, site, {})
    assert after == (
        b"HealthCheckProgram=/usr/local/sbin/dltune-healthcheck\r\n"
        b"  healthcheckinterval = 60\t# every minute\r\n"
        b"HealthCheckInterval=300 HealthCheckNodeState=ANY,CYCLE\r\n"
        b"NodeName=n1 CPUs=2"
    )
    assert record == {
        "HealthCheckProgram": {"site": "/usr/sbin/nhc", "ours": "/usr/local/sbin/dltune-healthcheck"},
        "HealthCheckInterval": {"site": "120", "ours": "300"},
        "HealthCheckNodeState": {"site": "IDLE", "ours": "ANY,CYCLE"},
    }
    assert healthcheck_absent(CONF, after, record) == site


def test_a_missing_key_is_appended_in_the_files_own_style_and_taken_out_again() -> None:
    for site, expected in [
        (b"A=1\r\nB=2\r\n", b"A=1\r\nB=2\r\nHealthCheckProgram=/x\r\n"),
        (b"A=1\nB=2", b"A=1\nB=2\nHealthCheckProgram=/x"),
        (b"", b"HealthCheckProgram=/x\n"),
    ]:
        after, record = keys_module.plan(site, CONF, {"HealthCheckProgram": "/x"}, {}, "present")
        assert after == expected
        assert keys_module.plan(after, CONF, {"HealthCheckProgram": "/x"}, record, "absent")[0] == site


def test_a_continued_value_is_replaced_whole_and_its_bytes_recorded() -> None:
    site = b"Prolog=/etc/slurm/site\\\n-prolog.sh # the site's\nEpilog=/e\n"
    after, record = hooks_present(CONF, site, {})
    assert after.startswith(b"Prolog=/etc/slurm/dltune/prolog # the site's\n")
    assert record["Prolog"] == {"site": "/etc/slurm/site\\\n-prolog.sh", "ours": HOOKS["prolog"]}
    assert model.load(CONF, after).values()["prolog"] == HOOKS["prolog"]
    assert hooks_absent(CONF, after, record) == site


def test_a_file_ending_inside_a_continuation_is_refused_naming_it() -> None:
    with pytest.raises(
        model.ConfError, match=r"^/etc/slurm/slurm.conf: its last line ends in a continuation"
    ):
        healthcheck_present(CONF, b"NodeName=n1 \\\n", {})


def test_a_key_set_in_an_included_file_is_refused_naming_that_file(tmp_path: Path) -> None:
    (tmp_path / "hooks.conf").write_bytes(b"# site hooks\nProlog=/site/prolog\n")
    conf = tmp_path / "slurm.conf"
    conf.write_bytes(b"ClusterName=c\nInclude hooks.conf\n")
    with pytest.raises(model.ConfError) as refusal:
        hooks_present(str(conf), conf.read_bytes(), {})
    message = str(refusal.value)
    assert f"Prolog=/site/prolog is set in {tmp_path}/hooks.conf line 2" in message and "\n" not in message


def test_an_include_that_cannot_be_read_is_refused_naming_it(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_bytes(b"Include /nonexistent/site-hooks.conf\n")
    with pytest.raises(model.ConfError, match=r"/nonexistent/site-hooks\.conf"):
        healthcheck_present(str(conf), conf.read_bytes(), {})


def test_an_include_without_our_keys_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "nodes.conf").write_bytes(b"NodeName=n[1-4] CPUs=8\n")
    conf = tmp_path / "slurm.conf"
    site = b"ClusterName=c\nInclude nodes.conf\n"
    conf.write_bytes(site)
    round_trip(str(conf), site, ["healthcheck", "slurm_tmpdir"])
    assert (tmp_path / "nodes.conf").read_bytes() == b"NodeName=n[1-4] CPUs=8\n"


def test_absent_leaves_a_value_the_site_changed_since() -> None:
    site = b"HealthCheckInterval=60\n"
    after, record = keys_module.plan(site, CONF, {"HealthCheckInterval": "300"}, {}, "present")
    changed = after.replace(b"=300", b"=900")
    assert keys_module.plan(changed, CONF, {"HealthCheckInterval": "300"}, record, "absent")[0] == changed


# --- any file ------------------------------------------------------------------------------------

LINE_PIECES = st.sampled_from(
    [
        b"ClusterName=c", b"NodeName=n[1-2] CPUs=4 \\", b"  CoresPerSocket=2", b"# Prolog=/commented",
        b"Prolog=/site/prolog", b"prolog = /site/other # late", b"PrologFlags=Contain", b"PrologFlags=x11",
        b"HealthCheckInterval=60 HealthCheckNodeState=IDLE", b'Epilog="/opt/e p"', b"TaskProlog=/t\\#1",
        b"", b"   ", b"\t# caf\xe9", b"HEALTHCHECKPROGRAM=/usr/sbin/nhc", b"SlurmctldHost=h \\\\",
    ]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(LINE_PIECES, max_size=10),
    st.sampled_from([b"\n", b"\r\n"]),
    st.booleans(),
    st.sampled_from(ORDERS),
)
def test_any_file_comes_back_byte_for_byte(
    lines: list[bytes], eol: bytes, final: bool, order: list[str]
) -> None:
    site = eol.join(lines) + (eol if final and lines else b"")
    try:
        model.load(CONF, site)
        round_trip(CONF, site, order)
    except model.ConfError as exc:
        # Refused before any write, for a reason it names: a continuation into the end of the file.
        assert "continuation" in str(exc), exc
