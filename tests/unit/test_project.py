"""Project-wide contracts: one version everywhere, role specs that match their defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
import yaml

from tests.conftest import REPO_ROOT

ROLES = sorted(p.name for p in (REPO_ROOT / "roles").iterdir() if p.is_dir())


def test_roles_write_the_project_version() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    role_vars = yaml.safe_load((REPO_ROOT / "roles/dltune/vars/main.yml").read_text())
    assert role_vars["dltune__project_version"] == project


def test_the_package_galaxy_and_pyproject_say_one_version() -> None:
    """dltune.__version__ is a literal (no importlib.metadata at start-up): it must follow pyproject."""
    import dltune

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]
    assert dltune.__version__ == project == galaxy


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_document_every_default_with_the_same_value(role: str) -> None:
    defaults_file = REPO_ROOT / "roles" / role / "defaults/main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) or {}
    spec = yaml.safe_load((REPO_ROOT / "roles" / role / "meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options), f"{role}: defaults and argument_specs list different variables"
    for name, value in defaults.items():
        assert name.startswith(f"{role}_"), f"{name} is not prefixed with the role name"
        documented = options[name].get("default")
        if isinstance(value, str) and "{{" in value:
            continue  # computed defaults are described in words in the spec
        assert documented == value, f"{role}: {name} default {value!r} but argument_specs says {documented!r}"


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_readme_and_a_scenario_or_a_reason(role: str) -> None:
    assert (REPO_ROOT / "roles" / role / "README.md").is_file()
    scenario = REPO_ROOT / "molecule" / role / "molecule.yml"
    # dltune is installed and used by every scenario that audits; nfs_multivip needs network
    # namespaces and an NFS server, which a molecule container cannot give: its tiers are tests.
    tested_elsewhere = {
        "dltune": REPO_ROOT / "molecule/tmpfs_tmp/tests/test_dltune_timer.py",
        "nfs_multivip": REPO_ROOT / "tests/integration/test_nfs_multivip_netns.py",
        "dl_env": REPO_ROOT / "molecule/slurm_tmpdir/tests/test_slurm_tmpdir.py",
        # Its end state is Slurm's own behaviour (slurmd running the program, nodes drained and
        # resumed): proven on the lab's real 3-node Slurm, which a molecule container does not have.
        "slurm_healthcheck": REPO_ROOT / "tests/integration/test_site_lab.py",
    }
    assert scenario.is_file() or tested_elsewhere[role].is_file()


# Roles with a playbook of their own that site.yml leaves out on purpose, and why.
NOT_IN_SITE = {"slurm_healthcheck": "it lets dltune drain and resume nodes: a site turns it on deliberately"}


def test_site_imports_a_playbook_per_tuning() -> None:
    """The collection's playbooks/site.yml (dltune.cluster.site), which the checkout's site.yml imports."""
    checkout_site = yaml.safe_load((REPO_ROOT / "site.yml").read_text())
    assert [play["ansible.builtin.import_playbook"] for play in checkout_site] == ["playbooks/site.yml"]
    site = yaml.safe_load((REPO_ROOT / "playbooks/site.yml").read_text())
    imported = [Path(play["ansible.builtin.import_playbook"]).stem for play in site]
    assert imported[0] == "dltune"
    for role in ROLES:
        assert (REPO_ROOT / "playbooks" / f"{role}.yml").is_file(), f"no playbooks/{role}.yml"
        assert (role in imported) is (role not in NOT_IN_SITE), f"site.yml and playbooks/{role}.yml"
