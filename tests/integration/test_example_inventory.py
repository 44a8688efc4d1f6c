"""examples/inventory/, the site a new admin copies, read by the real ansible-playbook and
ansible-inventory: every play of site.yml finds its hosts without a warning, every playbook passes
--syntax-check, and every variable each host ends up with (group_vars and host_vars merged by Ansible)
is one its role declares and passes that role's argument_specs, so a typo or a wrong type in the
example fails here instead of on someone's fleet."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "inventory"
ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
ROLES = sorted(
    p.name for p in (REPO_ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists()
)


def _ansible(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, check=False, timeout=300
    )


@pytest.fixture(scope="module")
def hostvars() -> dict[str, dict[str, Any]]:
    listed = _ansible("ansible-inventory", "-i", str(EXAMPLE), "--list")
    assert listed.returncode == 0 and "WARNING" not in listed.stderr, listed.stderr
    return dict(json.loads(listed.stdout)["_meta"]["hostvars"])


def test_every_play_of_site_yml_finds_its_hosts_without_a_warning() -> None:
    done = _ansible("ansible-playbook", "site.yml", "-i", str(EXAMPLE), "--list-hosts")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    plays = re.findall(r"play #\d+ \(([^)]*)\).*\n.*\n\s+hosts \((\d+)\)", done.stdout)
    counts = dict(plays)
    assert len(plays) == 9 and all(int(n) > 0 for _, n in plays), done.stdout  # with the ledger's two
    # The vendor-managed A100 nodes stay out of the driver play only; the controller is in slurm's.
    assert counts["gpu_nodes:!nvidia_driver_excluded"] == "32" and counts["gpu_nodes"] == "36"
    assert counts["slurm"] == "37"


def test_every_playbook_passes_syntax_check_against_the_example() -> None:
    playbooks = [
        "site.yml",
        *sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "playbooks").glob("*.yml")),
    ]
    done = _ansible("ansible-playbook", "-i", str(EXAMPLE), "--syntax-check", *playbooks)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr


def _spec(role: str) -> dict[str, Any]:
    specs = yaml.safe_load((REPO_ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return dict(specs["argument_specs"]["main"]["options"])


# The fleet playbooks' own variables (dltune_report_executable, dltune_hosts, ...): a name the
# playbooks read is declared by them; a misspelt one is read by none and fails as before.
PLAYBOOK_VARIABLES = {
    name
    for path in (REPO_ROOT / "playbooks").rglob("*.yml")
    for name in re.findall(r"\b(dltune_[a-z_]+)\b", path.read_text())
}


def problems_of(hostvars: dict[str, Any]) -> list[str]:
    problems = []
    for host, variables in sorted(hostvars.items()):
        for name in variables:
            role = next((r for r in ROLES if name.startswith(f"{r}_")), None)
            declared = name in PLAYBOOK_VARIABLES or (role is not None and name in _spec(role))
            if not name.startswith("ansible_") and not declared:
                problems.append(f"{host}: {name} is no role's variable")
        for role in ROLES:
            given = {k: v for k, v in variables.items() if k.startswith(f"{role}_") and k in _spec(role)}
            if given:
                result = ArgumentSpecValidator(_spec(role)).validate(given)
                problems += [f"{host}: {role}: {message}" for message in result.error_messages]
    return problems


def test_every_variable_of_every_host_is_declared_by_its_role_and_valid(hostvars: dict[str, Any]) -> None:
    assert problems_of(hostvars) == []
    # The host_vars file wins over its group's list for that host only.
    mounts = {
        host: [disk["mount_point"] for disk in variables["data_disks_devices"]]
        for host, variables in hostvars.items()
        if "data_disks_devices" in variables
    }
    assert mounts["gpu001.cluster.example.org"] == ["/localscratch", "/scratch"]
    assert mounts["gpu002.cluster.example.org"] == ["/localscratch"]


def test_the_rule_reports_a_typo_and_a_value_the_role_refuses() -> None:
    broken = {"gpu009": {"ansible_user": "admin", "tmpfs_tmp_sise": "10%", "tmpfs_tmp_live_mount": "always"}}
    assert problems_of(broken) == [
        "gpu009: tmpfs_tmp_sise is no role's variable",
        "gpu009: tmpfs_tmp: value of tmpfs_tmp_live_mount must be one of: auto, never, got: always",
    ]
