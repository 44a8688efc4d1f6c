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

from tests.conftest import REPO_ROOT


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


def test_the_install_and_run_sections_work_verbatim_outside_the_checkout(tmp_path: Path) -> None:
    installed = run_install_block(tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
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
    assert [argv[1] for argv in run] == [
        "dltune.cluster.site", "dltune.cluster.site", "dltune.cluster.audit", "dltune.cluster.bench",
    ]  # fmt: skip
    for argv in run:
        planned = [a for a in argv if a not in ("--check", "--diff")]
        for check in (["--list-hosts"], ["--syntax-check"]):
            done = subprocess.run([*planned, *check], cwd=site, env=env, capture_output=True, text=True,
                                  check=False, timeout=300)  # fmt: skip
            assert done.returncode == 0 and "WARNING" not in done.stderr, (argv, check, done.stderr)
            assert str(REPO_ROOT) not in done.stdout + done.stderr, (argv, check)


def test_a_missing_dependency_collection_is_named_before_any_change(tmp_path: Path) -> None:
    """Without ansible.posix (an install that skipped it), a play that uses it stops before its first
    task with one line naming the module it could not resolve."""
    installed = run_install_block(tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    collections = tmp_path / ".ansible/collections/ansible_collections"
    (collections / "ansible/posix").rename(tmp_path / "posix-moved-away")
    env = admin_env(tmp_path)
    # The pip-installed `ansible` package would still provide it: only the installed ones count here.
    env["ANSIBLE_COLLECTIONS_PATH"] = str(tmp_path / ".ansible/collections")
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    done = subprocess.run(
        ["ansible-playbook", "dltune.cluster.tmpfs_tmp", "-i", "my-site", "--syntax-check"],
        cwd=tmp_path / "dltune-site", env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ansible.posix" in done.stderr, done.stderr
