"""The README's Install and Run commands, run as written where this machine can: each command of those
two code blocks must be one this test knows how to run (a new or changed command fails here until it
is run too). `make collection` builds the collection in the checkout as written; it is installed as
written, into a collections folder of the test's own (so this machine's stay as they are); the playbook
runs stop at --list-hosts and --syntax-check (no node to reach; the lab runs the installed collection
for real: test_site_lab.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT

ENV = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}


def _block(section: str) -> list[list[str]]:
    """The commands of the first ```sh block under the README's ``## <section>`` heading."""
    text = (REPO_ROOT / "README.md").read_text()
    part = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", part, re.S)
    assert block, f"no sh block under ## {section}"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, cwd=kwargs.pop("cwd", REPO_ROOT), env=kwargs.pop("env", ENV), capture_output=True, text=True,
        check=False, timeout=600, **kwargs,
    )  # fmt: skip


def test_the_install_and_run_sections_work_as_written(tmp_path: Path) -> None:
    install, run = _block("Install"), _block("Run")
    assert [argv[:2] for argv in install] == [
        ["make", "collection"],
        ["ansible-galaxy", "collection"],
        ["cp", "-r"],
    ]
    # 1. make collection, in the checkout as written.
    built = _run(install[0])
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    # 2. Installed as written, from the checkout, into this test's collections folder; no ansible.cfg
    # of the checkout (an admin's controller has none), no link to the checkout's collection.
    controller = tmp_path / "controller"
    controller.mkdir()
    (controller / "ansible.cfg").write_text("[defaults]\ninterpreter_python = auto_silent\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "DLTUNE_"))}
    env |= {
        "ANSIBLE_CONFIG": str(controller / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(controller / "collections"),
        "ANSIBLE_NOCOLOR": "1",
    }
    installed = _run(install[1], env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    collection = controller / "collections/ansible_collections/dltune/cluster"
    assert (collection / "roles/dltune/files/wheelhouse.tar").is_file()
    assert any(
        p.name.startswith("dltune-") for p in (collection / "roles/dltune/files/wheelhouse").glob("*.whl")
    )
    listed = _run(["ansible-galaxy", "collection", "list"], env=env, cwd=controller).stdout
    for name in ("dltune.cluster", "ansible.posix", "community.general"):
        assert f"\n{name} " in listed, (name, listed)
    # 3. The example site copied, then every playbook of the Run section on it, from the controller.
    copied = _run([*install[2][:-1], str(controller / install[2][-1])])
    assert copied.returncode == 0 and (controller / "my-site/hosts.yml").is_file(), copied.stderr
    assert [argv[:2] for argv in run] == [["ansible-playbook", "dltune.cluster.site"]] * 2 + [
        ["ansible-playbook", "dltune.cluster.audit"]
    ]
    for argv in run:
        planned = [a for a in argv if a not in ("--check", "--diff")]
        for check in (["--list-hosts"], ["--syntax-check"]):
            done = _run([*planned, *check], env=env, cwd=controller)
            assert done.returncode == 0 and "WARNING" not in done.stderr, (argv, check, done.stderr)
