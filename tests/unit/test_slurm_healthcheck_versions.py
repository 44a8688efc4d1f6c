"""Slurm's newer health check options (issue 43 part 6): which Slurm version `slurmd -V` and
`slurmctld -V` print (published outputs in tests/fixtures/real/slurm_version/), the lowest of a play's
hosts, which inputs of role slurm_healthcheck need a newer Slurm than the one found
(plugins/filter/slurm_version.py), and `dltune healthcheck --slurm-timeout`, the bound the audit's
--timeout must leave room under. The role's own refusals run through ansible-playbook in
tests/unit/test_slurm_healthcheck_role.py.

Sources (SchedMD/slurm at the tags named): print_slurm_version() prints "PACKAGE_NAME VERSION"
(src/common/proc_args.c, 20.11 to 26.05); a release candidate's version ends "-0rc1" (auxdir/slurm.m4);
HealthCheckTimeout is first in slurm-26-05-0-0rc1 (commit 74979c20b5), HealthCheckNodeState=START_ONLY
in 25.11 (ca30073e98, CHANGELOG/slurm-25.11.md), REBOOT_ONLY in 26.05 (16eed7fb09,
CHANGELOG/slurm-26.05.md), NONDRAINED_IDLE in 23.02 (c097adf7b2, NEWS)."""

from __future__ import annotations

import pytest
import yaml

from dltune import cli
from dltune.commands import healthcheck as healthcheck_command
from tests.conftest import REPO_ROOT, load_role_module
from tests.real_corpus import Sample, samples

versions = load_role_module("plugins/filter/slurm_version.py")


@pytest.mark.parametrize("sample", samples("slurm_version"), ids=str)
def test_published_version_outputs_read_as_major_minor(sample: Sample) -> None:
    assert versions.slurm_version(sample.body) == sample.expect


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("slurm 26.05.0-0rc1\n", "26.05"),  # a release candidate: auxdir/slurm.m4 appends -RELEASE
        ("slurm-wlm 25.11.0-0rc2", "25.11"),
        ("slurm 23.2.1", "23.02"),  # read as numbers: written as Slurm writes its releases
        ("  slurm 24.05.5  \n", ""),  # the version line starts the line, as print_slurm_version writes it
        ("slurm 21.08", ""),  # the micro part is always printed
        ("slurmd 21.08.5", ""),
        ("slurm-llnl 21.08.5", ""),
        ("slurm 21.08.5 extra", ""),
        ("", ""),
        (None, ""),
        # scontrol -V reads slurm.conf first: on a slurm.conf it refuses, this is all it prints.
        (
            "scontrol: error: _parse_next_key: Parsing error at unrecognized key: HealthCheckTimeout\n"
            "scontrol: fatal: Unable to process configuration file\n",
            "",
        ),
        ("slurmd: error: Couldn't find the specified plugin name\nslurm 24.11.1\n", "24.11"),
        # As an admin gives it (slurm_healthcheck_slurm_version).
        ("25.11", "25.11"),
        ("25.11.3", "25.11"),
        (" 26.05 ", "26.05"),
        ("25", ""),
        ("25.11.x", ""),
        ("v25.11", ""),
    ],
)
def test_the_version_line_and_a_given_version(text: str | None, expected: str) -> None:
    assert versions.slurm_version(text) == expected


def test_the_lowest_version_is_compared_as_numbers_and_unread_hosts_are_left_out() -> None:
    found = [
        {"host": "n1", "version": "26.05", "said": "slurmd -V gave 'slurm 26.05.1'"},
        {"host": "n2", "version": "", "said": "slurmd -V gave 'Error executing command. (rc 2)'"},
        {
            "host": "ctl",
            "version": "9.10",
            "said": "slurmctld -V gave 'slurm 9.10.0'",
        },  # "9.10" > "26.05" as text
        {"host": "n3", "version": "25.11", "said": "slurmd -V gave 'slurm 25.11.2'"},
    ]
    assert versions.slurm_version_lowest(found)["host"] == "ctl"
    assert versions.slurm_version_lowest(found[:2] + found[3:]) == found[3]
    # Equal versions: the first host is named.
    assert versions.slurm_version_lowest([found[3], {**found[3], "host": "n4"}])["host"] == "n3"
    assert versions.slurm_version_lowest([found[1]]) == {}
    assert versions.slurm_version_lowest([]) == {}


def test_since_matches_slurms_releases() -> None:
    assert versions.SINCE == {
        "HealthCheckTimeout": (26, 5),
        "NONDRAINED_IDLE": (23, 2),
        "START_ONLY": (25, 11),
        "REBOOT_ONLY": (26, 5),
    }


@pytest.mark.parametrize(
    ("timeout", "node_state", "features"),
    [
        (0, "ANY,CYCLE", []),
        ("0", "ANY", []),
        ("", "ANY", []),
        ("x", "ANY", []),  # refused by the role's own check first; never a need of its own
        (90, "ANY,CYCLE", ["HealthCheckTimeout 26.05"]),
        ("90", "start_only", ["HealthCheckTimeout 26.05", "HealthCheckNodeState=START_ONLY 25.11"]),
        (0, "REBOOT_ONLY", ["HealthCheckNodeState=REBOOT_ONLY 26.05"]),
        (0, "ANY,NONDRAINED_IDLE,nondrained_idle", ["HealthCheckNodeState=NONDRAINED_IDLE 23.02"]),
        (0, "ANY, START_ONLY", ["HealthCheckNodeState=START_ONLY 25.11"]),
    ],
)
def test_what_the_inputs_need(timeout: object, node_state: str, features: list[str]) -> None:
    needs = versions.slurm_healthcheck_needs(timeout, node_state)
    assert [f"{need['feature']} {need['since']}" for need in needs] == features


def test_a_need_names_the_variable_and_its_value() -> None:
    timeout, state = versions.slurm_healthcheck_needs(90, "START_ONLY")
    assert timeout["text"] == "slurm_healthcheck_timeout=90 needs Slurm >= 26.05 (HealthCheckTimeout)"
    assert state["text"] == (
        "slurm_healthcheck_node_state=START_ONLY needs Slurm >= 25.11 (HealthCheckNodeState=START_ONLY)"
    )
    assert (timeout["variable"], state["variable"]) == (
        "slurm_healthcheck_timeout",
        "slurm_healthcheck_node_state",
    )


@pytest.mark.parametrize(
    ("version", "unmet"),
    [
        ("21.08", ["HealthCheckTimeout", "START_ONLY", "REBOOT_ONLY", "NONDRAINED_IDLE"]),
        ("23.02", ["HealthCheckTimeout", "START_ONLY", "REBOOT_ONLY"]),
        ("25.05", ["HealthCheckTimeout", "START_ONLY", "REBOOT_ONLY"]),
        ("25.11", ["HealthCheckTimeout", "REBOOT_ONLY"]),
        ("26.05", []),
        ("27.02", []),
        (
            "",
            ["HealthCheckTimeout", "START_ONLY", "REBOOT_ONLY", "NONDRAINED_IDLE"],
        ),  # unknown: nothing passes
    ],
)
def test_what_a_slurm_version_lacks(version: str, unmet: list[str]) -> None:
    needs = [
        *versions.slurm_healthcheck_needs(90, "START_ONLY"),
        *versions.slurm_healthcheck_needs(0, "REBOOT_ONLY"),
        *versions.slurm_healthcheck_needs(0, "ANY,NONDRAINED_IDLE"),
    ]
    lacked = versions.slurm_version_unmet(needs, version)
    assert [need["feature"].rpartition("=")[2] for need in lacked] == unmet


# dltune healthcheck: --timeout leaves room under slurmd's limit, --slurm-timeout -----------------------


@pytest.mark.parametrize(
    ("slurm_timeout", "default", "largest"),
    [(60.0, 25.0, 30.0), (90.0, 55.0, 60.0), (40.0, 5.0, 10.0), (65_535.0, 65_500.0, 65_505.0)],
)
def test_the_audit_takes_slurmds_limit_less_the_scontrol_reserve(
    slurm_timeout: float, default: float, largest: float
) -> None:
    assert healthcheck_command.audit_seconds(None, slurm_timeout) == default
    assert healthcheck_command.audit_seconds(largest, slurm_timeout) == largest
    with pytest.raises(Exception, match="--slurm-timeout") as refused:
        healthcheck_command.audit_seconds(largest + 0.001, slurm_timeout)
    assert type(refused.value).__name__ == "BadParameter"


def test_the_role_gives_the_audit_what_dltune_leaves_it_by_default() -> None:
    """The wrapper's --timeout is slurm_healthcheck_timeout less the role's kept seconds, which are
    dltune's reserve and margin: the same share dltune takes by default under --slurm-timeout alone
    (25 s of 60, 85 s of 120). The role's run checks the pair with the real dltune
    (test_slurm_healthcheck_role.py)."""
    role_vars = yaml.safe_load((REPO_ROOT / "roles/slurm_healthcheck/vars/main.yml").read_text())
    kept = role_vars["slurm_healthcheck__kept_seconds"]
    assert kept == healthcheck_command.SCONTROL_RESERVE_S + healthcheck_command.AUDIT_MARGIN_S
    assert healthcheck_command.audit_seconds(None, 90.0) == 90 - kept


def test_the_defaults_are_todays_25_of_60_seconds() -> None:
    assert healthcheck_command.AUDIT_SECONDS == 25.0
    assert healthcheck_command.SLURM_TIMEOUT_S == 60.0
    assert healthcheck_command.MIN_SLURM_TIMEOUT_S == 40.0
    assert healthcheck_command.MAX_SLURM_TIMEOUT_S == 65_535.0  # HealthCheckTimeout is a uint16


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--timeout", "30"], 0),
        (["--timeout", "31"], 2),
        (["--slurm-timeout", "90", "--timeout", "60"], 0),
        (["--slurm-timeout", "90", "--timeout", "61"], 2),
        (["--slurm-timeout", "90"], 0),
        (["--slurm-timeout", "39"], 2),
        (["--slurm-timeout", "65536"], 2),
    ],
)
def test_healthcheck_refuses_a_timeout_that_leaves_no_room_naming_both_options(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    done = cli.run(["healthcheck", "--check-options", *argv])
    _out, err = capsys.readouterr()
    assert done == code, err
    if code and "--timeout" in argv:
        [line] = err.splitlines()
        assert "--timeout" in line and "--slurm-timeout" in line, line
