"""The README's Install and Run sections, run verbatim as an admin runs them: the Install block as one
bash script (its `cd` and variables carry on from line to line), from the checkout it starts in, with
a HOME of the test's own (so `~/.ansible/collections`, `~/dltune-venv` and `~/dltune-site` are fresh),
no ANSIBLE_* or DLTUNE_* variable (the installs are offline: `--offline`, `--no-index`); then every
playbook of the Run block from `~/dltune-site`, stopped at --list-hosts and --syntax-check (the
example's nodes do not exist; the lab runs the same release for real: test_site_lab.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

# The Install block runs `make release`, which rewrites build/wheelhouse (tests/run_pytest.sh).
pytestmark = pytest.mark.release


def _block(section: str) -> str:
    """The first ```sh block under the README's ``## <section>`` heading."""
    text = (REPO_ROOT / "README.md").read_text()
    part = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", part, re.S)
    assert block, f"no sh block under ## {section}"
    return block.group(1)


def admin_env(home: Path) -> dict[str, str]:
    """An admin's shell: this machine's PATH (ansible-core and the `ansible` package from the dev
    venv), a home of its own, nothing that points Ansible or dltune at the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "DLTUNE_", "PIP_"))}
    venv_bin = str(REPO_ROOT / ".venv/bin")
    env["PATH"] = os.pathsep.join([venv_bin, *[p for p in env["PATH"].split(os.pathsep) if p != venv_bin]])
    env.pop("VIRTUAL_ENV", None)
    return env | {"HOME": str(home), "ANSIBLE_NOCOLOR": "1"}


def run_install_block(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _block("Install")], cwd=REPO_ROOT, env=admin_env(home),
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


def built_at_run_time(playbook: str, warning: str) -> bool:
    """A play on a group the playbook itself fills as it runs (add_host, group_by): --list-hosts
    cannot know its hosts and says so."""
    group = re.fullmatch(r"Could not match supplied host pattern, ignoring: (\w+)", warning)
    path = REPO_ROOT / "playbooks" / f"{playbook.removeprefix('dltune.cluster.')}.yml"
    if group is None or not path.is_file():
        return False
    text = path.read_text()
    return f"'{group[1]}'" in text and (
        "ansible.builtin.add_host" in text or "ansible.builtin.group_by" in text
    )


def syntax_checks(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    """ansible-playbook ARGV as written, stopped at --list-hosts and at --syntax-check."""
    planned = [a for a in argv if a not in ("--check", "--diff")]
    for check in (["--list-hosts"], ["--syntax-check"]):
        done = subprocess.run([*planned, *check], cwd=cwd, env=env, capture_output=True, text=True,
                              check=False, timeout=300)  # fmt: skip
        warnings = [
            w for w in re.findall(r"\[WARNING\]: (.*)", done.stderr) if not built_at_run_time(argv[1], w)
        ]
        assert done.returncode == 0 and not warnings, (argv, check, done.stderr)
        assert str(REPO_ROOT) not in done.stdout + done.stderr, (argv, check)


def test_the_install_and_run_sections_work_verbatim_outside_the_checkout(admin_home: Path) -> None:
    tmp_path = admin_home
    site = tmp_path / "dltune-site"
    collections = tmp_path / ".ansible/collections/ansible_collections"
    # The three collections, installed from the release and nowhere else (no Galaxy here).
    for name in ("dltune/cluster", "ansible/posix", "community/general"):
        assert (collections / name / "MANIFEST.json").is_file(), name
    wheelhouse = collections / "dltune/cluster/build/wheelhouse"
    assert (wheelhouse.parent / "wheelhouse.tar").is_file()
    assert any(p.name.startswith("dltune-") for p in wheelhouse.glob("*.whl"))
    # The controller's dltune, and the example site with its ansible.cfg beside it.
    version = subprocess.run(
        [str(tmp_path / "dltune-venv/bin/dltune"), "--version"], capture_output=True, text=True, check=False
    )
    assert version.returncode == 0 and "0.1.0" in version.stdout, version
    assert (site / "my-site/hosts.yml").is_file() and (site / "ansible.cfg").is_file()
    env = admin_env(tmp_path)
    listed = subprocess.run(["ansible-galaxy", "collection", "list"], cwd=site, env=env,
                            capture_output=True, text=True, check=False).stdout  # fmt: skip
    for name in ("dltune.cluster", "ansible.posix", "community.general"):
        assert f"\n{name} " in listed, (name, listed)
    # Every Run command, from the admin's directory, with its ansible.cfg and nothing of the checkout's.
    run = [shlex.split(line, comments=True) for line in _block("Run").splitlines() if line.strip()]
    # An environment assignment before a command (ANSIBLE_DISPLAY_OK_HOSTS=false ...) is the shell's.
    assigned = [dict(a.split("=", 1) for a in argv if re.fullmatch(r"[A-Z_]+=\S*", a)) for argv in run]
    run = [[a for a in argv if not re.fullmatch(r"[A-Z_]+=\S*", a)] for argv in run]
    assert [argv[1] for argv in run] == [
        "dltune.cluster.site", "dltune.cluster.site", "dltune.cluster.audit", "dltune.cluster.bench",
    ]  # fmt: skip
    for argv, extra in zip(run, assigned, strict=True):
        syntax_checks(argv, env | extra, site)


# Where an admin reads commands; docs/development.md and CONTRIBUTING.md are the developers' (checkout).
USER_DOCS = [
    p
    for pattern in ("README.md", "docs/*.md", "roles/*/README.md", "examples/*.md")
    for p in sorted(REPO_ROOT.glob(pattern))
    if p.name != "development.md"
]
PLAYBOOKS = {p.stem for p in (REPO_ROOT / "playbooks").glob("*.yml")}


def documented_playbook_runs() -> list[tuple[str, list[str]]]:
    """Every `ansible-playbook ...` an admin's documentation shows, in a code block or a code span."""
    found = []
    for doc in USER_DOCS:
        text = doc.read_text()
        for command in re.findall(r"^(ansible-playbook [^\n`#]*)", text, re.M) + re.findall(
            r"`(ansible-playbook [^`]*)`", text
        ):
            found.append((doc.relative_to(REPO_ROOT).as_posix(), shlex.split(command.strip())))
    return found


def test_every_documented_playbook_run_names_the_installed_collection_and_parses(admin_home: Path) -> None:
    """What the docs tell an admin to run works with the installed collection: each playbook is named
    dltune.cluster.<playbook> (a checkout path such as playbooks/audit.yml or site.yml exists only in a
    checkout), and parses from the admin's directory with the copied example inventory."""
    runs = documented_playbook_runs()
    assert len(runs) >= 8, runs
    env, site = admin_env(admin_home), admin_home / "dltune-site"
    for where, argv in runs:
        playbook = argv[1]
        assert playbook.startswith("dltune.cluster.") and playbook.split(".", 2)[2] in PLAYBOOKS, (
            where,
            argv,
        )
        # The docs' placeholders for the inventory: the admin's copy of the example.
        argv = ["my-site" if a in ("...", "path/to/your/inventory") else a for a in argv]
        if "-i" not in argv:
            argv += ["-i", "my-site"]
        while "-l" in argv:  # a placeholder node: the example inventory's names are not the doc's
            del argv[argv.index("-l") : argv.index("-l") + 2]
        syntax_checks(argv, env, site)


def test_the_role_readmes_example_plays_parse_with_the_installed_collection(admin_home: Path) -> None:
    """Each role README's example play (a YAML block with hosts:) runs as written against the installed
    collection: its roles by their fully qualified names."""
    env, site = admin_env(admin_home), admin_home / "dltune-site"
    plays = []
    for readme in sorted((REPO_ROOT / "roles").glob("*/README.md")):
        for block in re.findall(r"```yaml\n(.*?)```", readme.read_text(), re.S):
            loaded = yaml.safe_load(block)
            if isinstance(loaded, list) and loaded and isinstance(loaded[0], dict) and "hosts" in loaded[0]:
                plays.append((readme.parent.name, block))
    assert {role for role, _ in plays} >= {"data_disks", "tmpfs_tmp", "slurm_healthcheck"}, plays
    for role, block in plays:
        playbook = site / f"readme-{role}.yml"
        playbook.write_text(block)
        syntax_checks(["ansible-playbook", playbook.name, "-i", "my-site"], env, site)


def test_a_missing_dependency_collection_is_named_before_any_change(admin_home: Path) -> None:
    """Without ansible.posix (an install that skipped it), a play that uses it stops before its first
    task with one line naming the module it could not resolve."""
    tmp_path = admin_home
    collections = tmp_path / ".ansible/collections/ansible_collections"
    (collections / "ansible/posix").rename(tmp_path / "posix-moved-away")
    env = admin_env(tmp_path)
    # The pip-installed `ansible` package would still provide it: only the installed ones count here.
    env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path / ".ansible/collections")
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    try:
        done = subprocess.run(
            ["ansible-playbook", "dltune.cluster.tmpfs_tmp", "-i", "my-site", "--syntax-check"],
            cwd=tmp_path / "dltune-site", env=env, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
    finally:
        (tmp_path / "posix-moved-away").rename(collections / "ansible/posix")
    assert done.returncode != 0
    assert "ansible.posix" in done.stderr, done.stderr
