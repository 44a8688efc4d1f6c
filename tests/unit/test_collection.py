"""The repository root is the collection dltune.cluster (galaxy.yml): what goes into the built artifact
is an allow-list (tests/lab/collection.sh; planted files: test_collection_build.py), every role,
module and filter is called by its fully qualified name (an unqualified name works from a checkout
through roles_path and breaks only once installed), and the checkout's link resolves to the
repository itself. The build, the install and a lab run of the installed collection:
tests/integration/test_site_lab.py and test_readme_commands.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO_ROOT

GALAXY = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())
FQCN = f"{GALAXY['namespace']}.{GALAXY['name']}"
# What an installed collection carries besides galaxy.yml's own metadata: everything else at the top
# level of the repository is the project around it (dltune's sources, tests, the lab, CI).
SHIPPED = {"README.md", "LICENSE", "CHANGELOG.md", "docs", "examples", "meta", "monitoring", "playbooks",
           "plugins", "roles", "galaxy.yml"}  # fmt: skip
PROJECT_ONLY = {".ansible-lint", ".ci", ".gitignore", ".yamllint", "ARCHITECTURE.md", "CONTRIBUTING.md",
                "Makefile", "ansible.cfg", "benchmarks", "collections", "dltune", "inventory", "molecule",
                "pyproject.toml", "requirements.yml", "site.yml", "tests"}  # fmt: skip
ROLES = sorted(p.name for p in (REPO_ROOT / "roles").iterdir() if p.is_dir())
MODULES = sorted(p.stem for p in (REPO_ROOT / "plugins/modules").glob("*.py"))
ANSIBLE_YAML = [
    p
    for top in ("playbooks", "roles", "molecule", "tests/integration/playbooks")
    for p in (REPO_ROOT / top).rglob("*.yml")
    if "meta" not in p.parts and "defaults" not in p.parts and "vars" not in p.parts
]


def _filters() -> list[str]:
    names = []
    for plugin in (REPO_ROOT / "plugins/filter").glob("*.py"):
        body = plugin.read_text().split("def filters", 1)[1]
        names += re.findall(r'"([a-z0-9_]+)":\s*[a-z_]', body)
    return names


def test_every_top_level_entry_is_shipped_on_purpose_or_kept_out_of_the_build() -> None:
    """The build's allow-list (tests/lab/collection.sh's SHIPPED) is this file's SHIPPED, and every
    other top-level entry git tracks is the project around the collection, named here: a new entry is
    a decision, made in one of the two lists."""
    script = (REPO_ROOT / "tests/lab/collection.sh").read_text()
    assert set(script.split("SHIPPED=(", 1)[1].split(")", 1)[0].split()) == SHIPPED
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {path.split("/", 1)[0] for path in tracked}
    assert not (SHIPPED & PROJECT_ONLY)
    assert sorted(top - SHIPPED - PROJECT_ONLY) == [], "new top-level entries: ship them or name them here"
    # What ships is decided by the allow-list alone; a deny-list beside it would only mislead.
    assert GALAXY["build_ignore"] == []


def test_the_checkouts_link_is_the_repository_itself() -> None:
    link = REPO_ROOT / "collections/ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert link.is_symlink() and link.resolve() == REPO_ROOT
    assert "./collections" in (REPO_ROOT / "ansible.cfg").read_text().split("collections_path = ", 1)[1]


def test_roles_modules_and_filters_are_called_by_fully_qualified_names() -> None:
    bare_role = re.compile(rf"^\s*-?\s*(?:role|name):\s+({'|'.join(ROLES)})\s*$", re.M)
    bare_module = re.compile(rf"^\s*({'|'.join(MODULES)}):\s*$", re.M)
    bare_filter = re.compile(rf"\|\s*({'|'.join(_filters())})\b")
    found = []
    for path in ANSIBLE_YAML:
        text = path.read_text()
        for pattern in (bare_role, bare_module, bare_filter):
            found += [f"{path.relative_to(REPO_ROOT)}: {m.group(1)}" for m in pattern.finditer(text)]
    assert found == []
    used = {m for p in ANSIBLE_YAML for m in re.findall(rf"\b{re.escape(FQCN)}\.([a-z_]+)", p.read_text())}
    assert set(ROLES) <= used and set(MODULES) <= used, used


def test_the_collections_floor_is_the_roles_floor() -> None:
    runtime = yaml.safe_load((REPO_ROOT / "meta/runtime.yml").read_text())
    floor = runtime["requires_ansible"].removeprefix(">=")
    for role in ROLES:
        meta = yaml.safe_load((REPO_ROOT / "roles" / role / "meta/main.yml").read_text())
        assert floor.startswith(str(meta["galaxy_info"]["min_ansible_version"])), (role, floor)
    assert Path(REPO_ROOT / "LICENSE").is_file() and GALAXY["license"] == ["Apache-2.0"]
