"""Role slurm_healthcheck: its slurm.conf planner on text (the role itself runs against the lab's real
Slurm in tests/integration/test_site_lab.py), held to the same reading of slurm.conf as slurm_tmpdir's
(case-insensitive keys, the last assignment wins, comments ignored), and its wrapper rendered."""

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
TEXTS = [
    SITE,
    "",
    "# HealthCheckProgram=/commented\nPrologFlags=Alloc\nprologflags=Contain\n",
    "  Prolog = /a\nPROLOG=/b # later wins\nEpilog=/c d\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_both_roles_read_slurm_conf_alike(text: str) -> None:
    assert keys_module.assignments(text) == tmpdir_module.parse(text)


def test_our_values_replace_the_last_assignment_and_the_site_values_are_recorded() -> None:
    after, record = keys_module.plan(SITE, OURS, {}, "present")
    found = keys_module.assignments(after)
    assert {k: found[k.lower()][1] for k in OURS} == OURS
    assert record == {
        "HealthCheckProgram": "/usr/sbin/nhc",
        "HealthCheckInterval": "120",
        "HealthCheckNodeState": None,
    }
    assert "healthcheckinterval=60" in after and "NodeName=n1 CPUs=2" in after
    # A rerun keeps the site's values, never records its own.
    again, record_again = keys_module.plan(after, OURS, record, "present")
    assert again == after and record_again == record


def test_absent_puts_back_exactly_what_the_site_had() -> None:
    after, record = keys_module.plan(SITE, OURS, {}, "present")
    restored, kept = keys_module.plan(after, OURS, record, "absent")
    found = keys_module.assignments(restored)
    assert found["healthcheckprogram"][1] == "/usr/sbin/nhc" and found["healthcheckinterval"][1] == "120"
    assert "healthchecknodestate" not in found and kept == {}


def test_absent_leaves_a_value_the_site_changed_since() -> None:
    after, record = keys_module.plan(SITE, OURS, {}, "present")
    changed = after.replace("HealthCheckInterval=300", "HealthCheckInterval=900")
    restored, _ = keys_module.plan(changed, OURS, record, "absent")
    assert keys_module.assignments(restored)["healthcheckinterval"][1] == "900"
    assert keys_module.assignments(restored)["healthcheckprogram"][1] == "/usr/sbin/nhc"
