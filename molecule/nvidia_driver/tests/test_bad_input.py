"""Bad input to nvidia_driver fails clearly, names the variable, and installs nothing.

Runs the role again through bad_input.yml with wrong variables and reads Ansible's JSON output.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SCENARIO, gpgpu_offer, run_playbook

from tests.molecule_support import only_on

STATE = (
    "dpkg-query -W -f '${Package} ${db:Status-Abbrev} ${Version}\\n' | sha256sum;"
    " sha256sum /etc/dltune/expected.d/nvidia_driver.json /etc/modprobe.d/dltune-blacklist-nouveau.conf"
)


# Each refusal is a whole role run (about a minute here); make test keeps one of each kind (a value
# the role rejects itself, a combination, what the node lacks, what ubuntu-drivers does not offer),
# make test-slow runs them all.
SLOW = pytest.mark.slow


def refused(host: Any, extra_vars: dict[str, Any], named: str) -> None:
    before = host.check_output(STATE)
    run = run_playbook(host, SCENARIO / "bad_input.yml", extra_vars)
    assert run.rc != 0
    assert len(run.failures) == 1 and named in run.failures[0], run.failures
    assert run.changed == 0
    assert host.check_output(STATE) == before


@pytest.mark.parametrize(
    ("extra_vars", "named"),
    [
        # A branch nobody offers: the class of test_a_branch_this_gpu_does_not_support_is_refused below.
        pytest.param({"nvidia_driver_branch": "999"}, "nvidia_driver_branch=999 is not offered", marks=SLOW),
        ({"nvidia_driver_branch": "580-server"}, "nvidia_driver_branch=580-server is invalid"),
        pytest.param({"nvidia_driver_open": "maybe"}, "nvidia_driver_open=maybe", marks=SLOW),
        pytest.param({"nvidia_driver_reboot_timeout": 0}, "nvidia_driver_reboot_timeout=0", marks=SLOW),
        (
            {"nvidia_driver_reboot_allowed": True, "nvidia_driver_slurm_reboot": True},
            "nvidia_driver_reboot_allowed and nvidia_driver_slurm_reboot are both true",
        ),
        # No Slurm on this node: a Slurm reboot cannot be asked for.
        ({"nvidia_driver_slurm_reboot": True}, "nvidia_driver_slurm_reboot=true, but scontrol cannot reach"),
    ],
)
def test_bad_values_are_refused_before_any_change(host: Any, extra_vars: dict[str, Any], named: str) -> None:
    only_on(host, group="driver_auto", why="run once, against the A100 node")
    refused(host, extra_vars, named)


def test_a_branch_this_gpu_does_not_support_is_refused(host: Any) -> None:
    """The K80's newest branch is not offered for an A100: a failure that lists the offer, not a guess."""
    only_on(host, group="driver_auto", why="run once, against the A100 node")
    k80_only = "390"
    assert all(not p.startswith(f"nvidia-driver-{k80_only}") for p in gpgpu_offer(host))
    refused(host, {"nvidia_driver_branch": k80_only}, f"nvidia_driver_branch={k80_only} is not offered")


def test_nvswitch_system_without_a_matching_fabric_manager_is_refused(host: Any) -> None:
    only_on(host, group="driver_auto", why="run once, against the A100 node")
    refused(host, {"nvidia_driver_sys_dir": "/srv/fake-nvswitch-sys"}, "nvidia_driver_fabricmanager")
