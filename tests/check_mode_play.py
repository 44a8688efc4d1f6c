"""One play run with ansible's JSON callback, as the role tests run a role on this machine in check mode
(tests/unit/test_slurm_healthcheck_role.py, tests/integration/test_roles_refuse_unsafe_inputs.py): the
ansible.cfg, inventory and play written into ``workdir``, ansible's own temporary directories kept
there, and the parsed report returned (an AssertionError with ansible's stderr when it printed none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_json_play(
    workdir: Path, inventory: dict[str, Any], play: str, options: list[str], config: str = ""
) -> dict[str, Any]:
    """ansible-playbook on ``play`` with ``options`` (--check, --tags, -e ...); ``config``: more
    ansible.cfg lines (forks, pipelining) after the common [defaults]."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {REPO_ROOT / 'collections'}\n"
        "gathering = explicit\nretry_files_enabled = false\n"
        f"local_tmp = {workdir / 'ansible-tmp'}\ninterpreter_python = auto_silent\n" + config
    )
    (workdir / "inventory.json").write_text(json.dumps(inventory))
    (workdir / "play.yml").write_text(play)
    argv = [str(ANSIBLE_PLAYBOOK), "-i", str(workdir / "inventory.json"), str(workdir / "play.yml"), *options]
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(workdir / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_REMOTE_TEMP": str(workdir / "remote-tmp"),
    }
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(
            f"ansible-playbook gave no JSON (rc {done.returncode}): {done.stderr[-3000:]}"
        ) from None
    return report
