"""Action plugin: write every node's report into the controller's report directory in one task.

audit.yml and bench.yml used to save each node's output with a `copy` delegated to localhost: one
module process on the controller per node, about half of the controller's time per node at fleet
scale (benchmarks/playbook_scale.py). This action runs in the controller's own worker, once.

The directory is opened once; each file is written under a name of this plugin's own making, then
renamed over `<host><suffix>` relative to the directory's descriptor. A link already at that name is
replaced, never followed, and nothing is written outside the directory whatever the host names hold.
Every name is checked before anything is written: one host that cannot name a file fails the task,
naming it, with no file changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

SUFFIXES = (".audit.json", ".bench.json", ".multinode.bench.json")
MODE = 0o644


def file_name(host: str, suffix: str) -> str:
    """``host`` + ``suffix`` as one file name in the report directory, or AnsibleActionFail naming it."""
    if not host or host in (".", "..") or "/" in host or "\0" in host:
        raise AnsibleActionFail(
            f"save_node_reports: inventory host {host!r} cannot name a file in the report directory"
        )
    return host + suffix


def write_at(directory: int, name: str, content: bytes) -> None:
    """``content`` as ``name`` in ``directory`` (a descriptor): a new file of ours, then a rename."""
    temporary = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, MODE, dir_fd=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.chmod(temporary, MODE, dir_fd=directory, follow_symlinks=False)  # whatever the umask
        os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        raise


class ActionModule(ActionBase):
    """dir: the report directory (it must exist and be a directory, not a link); suffix: one of
    SUFFIXES; problems: every host -> what kept it from reporting ('' when nothing did); outputs: host
    -> its dltune output, saved as it came for a host without a problem. A problem is saved as
    {"problem": ...}: the form dltune report reads as a node that gave no report."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        directory, suffix = args.get("dir"), args.get("suffix")
        outputs, problems = args.get("outputs") or {}, args.get("problems")
        if not isinstance(directory, str) or not directory:
            raise AnsibleActionFail("save_node_reports: dir must be the report directory's path")
        if suffix not in SUFFIXES:
            raise AnsibleActionFail(f"save_node_reports: suffix must be one of {', '.join(SUFFIXES)}")
        if not isinstance(problems, Mapping) or not isinstance(outputs, Mapping):
            raise AnsibleActionFail("save_node_reports: problems and outputs must map hosts to text")
        files = {
            file_name(str(host), suffix): (
                json.dumps({"problem": str(problem)}) if problem else str(outputs.get(host, ""))
            ).encode()
            for host, problem in problems.items()
        }
        result.update(changed=False, files=len(files), dir=directory)
        if self._task.check_mode:
            return result
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise AnsibleActionFail(f"save_node_reports: {directory}: {exc.strerror}") from None
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise AnsibleActionFail(f"save_node_reports: {directory}: not a directory")
            for name, content in sorted(files.items()):
                try:
                    write_at(fd, name, content)
                except OSError as exc:
                    raise AnsibleActionFail(
                        f"save_node_reports: {os.path.join(directory, name)}: {exc.strerror}"
                    ) from None
        finally:
            os.close(fd)
        return result
