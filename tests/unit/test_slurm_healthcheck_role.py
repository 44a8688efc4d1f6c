"""Role slurm_healthcheck: its slurm.conf planner on slurm.conf's bytes (the role itself runs against the
lab's real Slurm in tests/integration/test_site_lab.py), held to the same reading of slurm.conf as
slurm_tmpdir's (case-insensitive keys, the last assignment wins, comments cut, as Slurm reads it), and
state=absent giving the site its file back byte for byte."""

from __future__ import annotations

import pytest

from tests.conftest import load_role_module

keys_module = load_role_module("plugins/modules/slurm_conf_keys.py")
tmpdir_module = load_role_module("plugins/modules/slurm_tmpdir_conf.py")

OURS = {
    "HealthCheckProgram": "/usr/local/sbin/dltune-healthcheck",
    "HealthCheckInterval": "300",
    "HealthCheckNodeState": "ANY,CYCLE",
}
SITE = (
    "ClusterName=ci\n"
    "HealthCheckProgram=/usr/sbin/nhc  # the site's NHC\n"
    "healthcheckinterval=60\n"
    "HealthCheckInterval=120\n"
    "NodeName=n1 CPUs=2\n"
)
# Each text with what Slurm reads from it: lower-cased key -> the value it uses.
TEXTS = [
    (SITE, {"clustername": "ci", "healthcheckprogram": "/usr/sbin/nhc", "healthcheckinterval": "120",
            "nodename": "n1"}),
    ("", {}),
    ("# HealthCheckProgram=/commented\nPrologFlags=Alloc\nprologflags=Contain\n", {"prologflags": "Contain"}),
    # Slurm reads the first word of `Epilog=/c d`.
    ("  Prolog = /a\nPROLOG=/b # later wins\nEpilog=/c d\n", {"prolog": "/b", "epilog": "/c"}),
]  # fmt: skip
READ_KEYS = ("ClusterName", "HealthCheckProgram", "HealthCheckInterval", "PrologFlags", "Prolog", "Epilog")


def read(data: bytes) -> dict[str, str]:
    """slurm.conf as slurm_conf_keys reads it: lower-cased key -> the value Slurm uses."""
    return keys_module.load("slurm.conf", data).values()


@pytest.mark.parametrize(("text", "values"), TEXTS)
def test_both_roles_read_slurm_conf_alike(text: str, values: dict[str, str]) -> None:
    """slurm_tmpdir_conf reads each key's value as Slurm does, and slurm_conf_keys records that same
    value as the site's when it sets the key (None where Slurm reads none)."""
    assert tmpdir_module.parse(text) == values
    for key in READ_KEYS:
        _, record = keys_module.plan(text.encode(), "slurm.conf", {key: "ours"}, {}, "present")
        assert record == {key: {"site": values.get(key.lower()), "ours": "ours"}}, key


def test_our_values_replace_the_last_assignment_and_the_site_values_are_recorded() -> None:
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    found = read(after)
    assert {k: found[k.lower()] for k in OURS} == OURS
    assert record == {
        "HealthCheckProgram": {"site": "/usr/sbin/nhc", "ours": OURS["HealthCheckProgram"]},
        "HealthCheckInterval": {"site": "120", "ours": OURS["HealthCheckInterval"]},
        "HealthCheckNodeState": {"site": None, "ours": OURS["HealthCheckNodeState"]},
    }
    assert b"\nhealthcheckinterval=60\n" in after and b"\nNodeName=n1 CPUs=2\n" in after
    # A rerun keeps the site's values, never records its own.
    again, record_again = keys_module.plan(after, "slurm.conf", OURS, record, "present")
    assert again == after and record_again == record


def test_absent_puts_back_exactly_what_the_site_had() -> None:
    """Byte for byte: the last assignment of each key gets the site's bytes back, the earlier
    `healthcheckinterval=60` was never touched, and the key the site had none of is taken out."""
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    restored, kept = keys_module.plan(after, "slurm.conf", OURS, record, "absent")
    assert restored == SITE.encode() and kept == {}


def test_absent_takes_out_only_our_setting_of_a_key_the_site_had_none_of() -> None:
    """The setting dltune appended (the one Slurm uses) goes; an earlier one the site added since stays."""
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    site_line = b"ClusterName=ci\nHealthCheckNodeState=IDLE\n"
    added = after.replace(b"ClusterName=ci\n", site_line)
    restored, _ = keys_module.plan(added, "slurm.conf", OURS, record, "absent")
    assert restored == SITE.encode().replace(b"ClusterName=ci\n", site_line)
    assert read(restored)["healthchecknodestate"] == "IDLE"


def test_absent_leaves_a_value_the_site_changed_since() -> None:
    after, record = keys_module.plan(SITE.encode(), "slurm.conf", OURS, {}, "present")
    changed = after.replace(b"HealthCheckInterval=300", b"HealthCheckInterval=900")
    restored, _ = keys_module.plan(changed, "slurm.conf", OURS, record, "absent")
    assert read(restored)["healthcheckinterval"] == "900"
    assert read(restored)["healthcheckprogram"] == "/usr/sbin/nhc"
