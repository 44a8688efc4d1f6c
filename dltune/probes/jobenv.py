"""What the env and staging areas judge: the audit's own environment (inside a Slurm job), the
dl_env files, slurm.conf's hook lines, and lstat facts of the job directory and the hooks."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dltune.probes.hostfs import HostFS
from dltune.probes.runner import CommandRunner
from dltune.probes.watchdog import Deadline, statfs_many
from dltune.snapshot import Mount, PathInfo, SlurmJobs, StatFs

# statfs of a healthy filesystem answers in milliseconds; a dead NFS server never does.
STATFS_TIMEOUT_S = 5.0

# The audit's environment is judged only through these (and the dl_env manifest's names).
JOB_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_USER", "SLURM_TMPDIR", "TMPDIR", "CUBLAS_WORKSPACE_CONFIG")


def relevant_environ(environ: Mapping[str, str], extra_names: Iterable[str]) -> dict[str, str]:
    names = set(JOB_VARIABLES).union(extra_names)
    return {k: v for k, v in environ.items() if k in names}


def parse_slurm_conf(
    text: str, path: str = "slurm.conf", read: Callable[[str], bytes] | None = None
) -> dict[str, str]:
    """Lower-cased key -> the value Slurm uses (the last one read), read as Slurm reads the file:
    comments, continuations, escapes, quotes, several pairs on a line, Includes through ``read``
    (slurm_conf_model: the file the collection's modules edit with). Without ``read`` a key set only in
    an included file reads as unset, which the audit reports as the hook not applied.
    The model is imported here, not at the top: only nodes whose manifest names a slurm.conf load it
    (its dataclasses cost each audit 10 ms; it is shared with the collection's module_utils, which
    cannot use dltune's records)."""
    from dltune.probes.slurm_conf_model import load as load_slurm_conf

    return load_slurm_conf(path, text.encode("utf-8", "surrogateescape"), read=read or _unread).values()


def _unread(path: str) -> bytes:
    from dltune.probes.slurm_conf_model import ConfError

    raise ConfError(f"{path}: not read by the audit")


def fstype_at(path: str, mounts: Iterable[Mount]) -> str:
    """The type of the mount `path` lives on: the longest mount point above it, and of several mounts
    at that point the last (mountinfo lists in mount order: the last is on top, the others hidden).
    Role slurm_tmpdir's filter decides the same (tests/unit/test_mount_rules_parity.py)."""
    holding = [m for m in mounts if path == m.mount_point or path.startswith(m.mount_point.rstrip("/") + "/")]
    if not holding:
        return "unknown"
    longest = max(len(m.mount_point) for m in holding)
    return [m for m in holding if len(m.mount_point) == longest][-1].fstype


def path_info(
    fs: HostFS, host_path: str, mounts: Iterable[Mount], space: StatFs | str | None = None
) -> PathInfo:
    """lstat facts of host_path; ``space`` is its statfs (run in a child under a deadline by the
    caller, since statfs of a dead network filesystem blocks in the kernel) or why it failed."""
    local = fs.path(host_path)
    try:
        st = os.lstat(local)
    except OSError:
        return PathInfo(exists=False)
    free = space.free_bytes if isinstance(space, StatFs) and stat.S_ISDIR(st.st_mode) else None
    return PathInfo(
        exists=True,
        is_link=stat.S_ISLNK(st.st_mode),
        is_dir=stat.S_ISDIR(st.st_mode),
        is_file=stat.S_ISREG(st.st_mode),
        uid=st.st_uid,
        mode=stat.S_IMODE(st.st_mode),
        fstype=fstype_at(os.path.normpath(host_path), mounts),
        free_bytes=free,
        statfs_error=space if isinstance(space, str) and stat.S_ISDIR(st.st_mode) else None,
    )


def job_paths(
    fs: HostFS,
    environ: Mapping[str, str],
    expected: Mapping[str, Mapping[str, Any]],
    mounts: Iterable[Mount],
    deadline: Deadline | None = None,
) -> dict[str, PathInfo]:
    """lstat of $SLURM_TMPDIR (inside a job), the slurm_tmpdir base and its hook programs; statfs of
    $SLURM_TMPDIR (possibly on NFS or Lustre) in a child under a deadline."""
    mounts = tuple(mounts)
    wanted: list[str] = []
    if environ.get("SLURM_TMPDIR", "").startswith("/"):
        wanted.append(environ["SLURM_TMPDIR"])
    fragment = expected.get("slurm_tmpdir", {})
    if isinstance(fragment.get("base"), str):
        wanted.append(fragment["base"])
    wanted += [str(p) for p in dict(fragment.get("hooks", {})).values()]
    space: dict[str, StatFs | str] = {}
    job_dir = environ.get("SLURM_TMPDIR", "")
    host_dir = str(fs.path(job_dir))
    if job_dir.startswith("/") and os.path.isdir(host_dir):
        limit = deadline.limit(STATFS_TIMEOUT_S) if deadline else STATFS_TIMEOUT_S
        space = {job_dir: statfs_many([host_dir], limit)[host_dir]}
        if isinstance(space[job_dir], str) and deadline and deadline.expired():
            deadline.missed["slurm_tmpdir"] = f"statfs of $SLURM_TMPDIR ({job_dir})"
    return {path: path_info(fs, path, mounts, space.get(path)) for path in wanted}


def read_files(fs: HostFS, paths: Iterable[str]) -> dict[str, str | None]:
    texts: dict[str, str | None] = {}
    for path in paths:
        try:
            texts[path] = fs.read_text(path)
        except OSError:
            texts[path] = None
    return texts


def parse_env_file(kind: str, text: str) -> dict[str, str]:
    """NAME -> value as each file kind writes it (profile: export NAME='v'; pam/job_env: NAME=v)."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if kind == "profile":
            if not line.startswith("export "):
                continue
            line = line[len("export ") :]
        name, sep, value = line.partition("=")
        if sep:
            found[name.strip()] = value.strip().strip("'\"")
    return found


SQUEUE_TIMEOUT_S = 5.0


def slurm_jobs_on(runner: CommandRunner, node: str, timeout: float = SQUEUE_TIMEOUT_S) -> SlurmJobs:
    """The jobs Slurm runs on `node` (squeue asks slurmctld; a job's cgroups are not used: a Slurm
    with proctrack/linuxproc has none). A missing client or a controller that does not answer is
    data, not an exception."""
    done = runner.run(["squeue", "--noheader", "--nodelist", node, "--format", "%A"], timeout)
    if done.returncode == 127:
        return SlurmJobs(error="squeue is not installed", installed=False, node=node)
    if not done.ok:
        reason = (done.stderr.strip() or f"rc {done.returncode}").splitlines()[-1][:300]
        return SlurmJobs(error=f"squeue failed: {reason}", node=node)
    return SlurmJobs(tuple(line.strip() for line in done.stdout.splitlines() if line.strip()), node=node)
