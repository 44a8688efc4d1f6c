#!/usr/bin/python3 -I
"""dltune's Slurm hooks for the per-job node-local directory $SLURM_TMPDIR (role slurm_tmpdir).

One program, installed as prolog, epilog and task_prolog (the name it is called by selects the part):
- prolog (root, at allocation): <base>/<user>.<jobid>, a fresh directory owned by the job user, 0700;
- task_prolog (the job user, before each task): `export` lines for SLURM_TMPDIR (TMPDIR if asked) and
  every NAME=value of the job-env file (role dl_env; a value with %u is the user's own directory);
- epilog (root, at job end, also for a killed job): removes the job's directory.
Root never follows a path the user controls: every step below the root-owned base works on open
directory descriptors with O_NOFOLLOW, removal stays on the base's filesystem, and a name that
already exists at a new job's path (a stale directory, a link) is removed, never reused.
Then the site's own hook of the same kind, recorded by the role when it took over slurm.conf's
line, runs with the same environment; its exit status is ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys

CONFIG = "/etc/slurm/dltune/hooks.json"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def log(message: str) -> None:
    print(f"dltune slurm_tmpdir: {message}", file=sys.stderr)


def job_identity() -> tuple[str, str]:
    user, job = os.environ.get("SLURM_JOB_USER", ""), os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit() or not user or "/" in user or user.startswith("."):
        raise SystemExit(f"dltune slurm_tmpdir: bad SLURM_JOB_USER={user!r} / SLURM_JOB_ID={job!r}")
    return user, job


def open_base(base: str) -> int:
    """The base directory, refused unless it is a real, root-owned directory users cannot write."""
    fd = os.open(base, DIR_FLAGS)
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise SystemExit(f"dltune slurm_tmpdir: {base} must be root-owned and not group/other-writable")
    return fd


def remove_entry(parent_fd: int, name: str, device: int) -> bool:
    """Remove parent/name without following links and without leaving the filesystem; True if gone."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return True
    if st.st_dev != device:
        log(f"left {name}: another filesystem is mounted there")
        return False
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        complete = all([remove_entry(fd, entry.name, device) for entry in os.scandir(fd)])
    finally:
        os.close(fd)
    if complete:
        os.rmdir(name, dir_fd=parent_fd)
    return complete


def prolog(config: dict) -> None:
    user, job = job_identity()
    uid = int(os.environ.get("SLURM_JOB_UID") or pwd.getpwnam(user).pw_uid)
    gid = int(os.environ.get("SLURM_JOB_GID") or pwd.getpwuid(uid).pw_gid)
    base_fd = open_base(config["base"])
    name = f"{user}.{job}"
    try:
        if not remove_entry(base_fd, name, os.fstat(base_fd).st_dev):
            raise SystemExit(f"dltune slurm_tmpdir: cannot clear a stale {config['base']}/{name}")
        os.mkdir(name, 0o700, dir_fd=base_fd)
        fd = os.open(name, DIR_FLAGS, dir_fd=base_fd)
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    finally:
        os.close(base_fd)


def epilog(config: dict) -> None:
    user, job = job_identity()
    base_fd = open_base(config["base"])
    try:
        remove_entry(base_fd, f"{user}.{job}", os.fstat(base_fd).st_dev)
    except OSError as exc:  # a user's race must not drain the node: say so in slurmd's log
        log(f"cleanup of {config['base']}/{user}.{job} incomplete: {exc}")
    finally:
        os.close(base_fd)


def owned_directory(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def task_prolog(config: dict) -> None:
    user = os.environ.get("SLURM_JOB_USER") or pwd.getpwuid(os.getuid()).pw_name
    job = os.environ.get("SLURM_JOB_ID", "")
    exports: dict[str, str] = {}
    directory = f"{config['base']}/{user}.{job}"
    if owned_directory(directory):
        exports["SLURM_TMPDIR"] = directory
        if config.get("set_tmpdir"):
            exports["TMPDIR"] = directory
    else:
        print(f"print dltune: no job directory {directory}: SLURM_TMPDIR not set")
    try:
        with open(config.get("job_env", "/etc/dltune/job-env")) as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        name, sep, value = line.strip().partition("=")
        if not sep or line.lstrip().startswith("#") or not NAME.match(name):
            continue
        if "%u" in value:
            # A per-user directory (a cache): used only when it really is this user's.
            value = value.replace("%u", user)
            if not os.path.lexists(value):
                with contextlib.suppress(OSError):
                    os.mkdir(value, 0o700)
            if not owned_directory(value):
                continue
        exports[name] = value
    for name, value in exports.items():
        print(f"export {name}={value}")
    sys.stdout.flush()


def run_site_hook(config: dict, kind: str) -> int:
    site = config.get("site_hooks", {}).get(kind)
    if not site:
        return 0
    return subprocess.run([site], check=False).returncode


def main() -> int:
    kind = os.path.basename(sys.argv[0])
    with open(CONFIG) as handle:
        config = json.load(handle)
    {"prolog": prolog, "epilog": epilog, "task_prolog": task_prolog}[kind](config)
    return run_site_hook(config, kind)


if __name__ == "__main__":
    sys.exit(main())
