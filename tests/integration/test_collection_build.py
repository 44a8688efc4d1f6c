"""The built collection is an allow-list (tests/lab/collection.sh): what an admin leaves in a checkout
(the README's `cp -r examples/inventory my-site` with a become password added, an .env, an SSH key, a
vault file inside the examples, notes beside a module) never ships; exactly the files git tracks under
the collection's entries and the nodes' wheelhouse do. Run on a clone of this checkout (planted files
never touch the checkout itself), with the working tree's build scripts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml

from tests.conftest import REPO_ROOT

SECRET = "hunter2-planted-secret"  # noqa: S105 - planted, to be found missing
PLANTED = {
    "my-site/group_vars/all/secrets.yml": f"ansible_become_password: {SECRET}\n",
    ".env": f"TOKEN={SECRET}\n",
    "id_ed25519": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n",
    "roles/dltune/files/.env": f"TOKEN={SECRET}\n",
    "examples/inventory/group_vars/all/vault.yml": f"vault_password: {SECRET}\n",
    "plugins/modules/notes.txt": f"{SECRET}\n",
    "build/wheelhouse-notes/id_rsa": f"{SECRET}\n",
}


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, [*argv, done.stdout[-2000:], done.stderr[-2000:]]
    return done.stdout


def test_nothing_planted_in_a_checkout_ships_and_every_tracked_part_does(tmp_path: Path) -> None:
    _run(["make", "-s", "wheelhouse"], REPO_ROOT)
    clone = tmp_path / "checkout"
    _run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], tmp_path)
    for built_by in ("galaxy.yml", "tests/lab/lib.sh", "tests/lab/collection.sh"):
        shutil.copy2(REPO_ROOT / built_by, clone / built_by)
    shutil.copytree(REPO_ROOT / "examples/inventory", clone / "my-site", dirs_exist_ok=True)
    for name, text in PLANTED.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text(text)
    env = {**os.environ, "DLTUNE_WHEELHOUSE": str(REPO_ROOT / "build/wheelhouse")}
    _run(["bash", "tests/lab/collection.sh"], clone, env)
    version = yaml.safe_load((clone / "galaxy.yml").read_text())["version"]
    with tarfile.open(clone / f"build/dltune-cluster-{version}.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        shipped_text = b"".join(
            tar.extractfile(m).read()
            for m in members.values()
            if m.isfile()  # type: ignore[union-attr]
        )
    files = {name for name, m in members.items() if not m.isdir()}
    assert SECRET.encode() not in shipped_text
    assert not any(name.startswith("my-site") for name in members)
    tracked = set(_run(["git", "ls-files", "--", *COLLECTION_ENTRIES], clone).split()) - {"galaxy.yml"}
    wheels = {f"build/wheelhouse/{p.name}" for p in (REPO_ROOT / "build/wheelhouse").iterdir()}
    assert files == tracked | wheels | {"build/wheelhouse.tar", "MANIFEST.json", "FILES.json"}


# The build's allow-list, as tests/lab/collection.sh names it.
COLLECTION_ENTRIES = (
    (REPO_ROOT / "tests/lab/collection.sh").read_text().split("SHIPPED=(", 1)[1].split(")")[0].split()
)
