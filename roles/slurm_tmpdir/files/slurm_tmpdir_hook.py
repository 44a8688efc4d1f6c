#!/usr/bin/python3 -I
"""dltune's Slurm hooks for the per-job node-local directory $SLURM_TMPDIR (role slurm_tmpdir).

One program, installed as prolog, epilog and task_prolog (the name it is called by selects the part):
- prolog (root, at allocation): <base>/<user>.<jobid>, a fresh directory owned by the job user, 0700;
- task_prolog (the job user, before each task): `export` lines for SLURM_TMPDIR (TMPDIR if asked) and
  every NAME=value of the job-env file (role dl_env; a value with %u is the user's own directory);
- epilog (root, at job end, also for a killed job): removes the job's directory.
Then the site's own hook of the same kind, recorded by the role when it took over slurm.conf's
line, runs with the same environment; its exit status is ours.

Root never follows a path the user controls. The epilog first renames <base>/<user>.<jobid> to
<base>/.dltune-trash.<jobid> (atomic: the job's path is free at once), makes that directory root's
and 0700 (no user reaches anything below it by path any more), then empties it without recursion:
each subdirectory is opened with O_NOFOLLOW relative to its parent's descriptor, its files and links
are unlinked (a link is never followed) and its subdirectories are renamed up into the trash
directory, so any depth takes a constant number of descriptors. Removal stays on the base's
filesystem (a mount below is left); what cannot be removed (an immutable file, a mount, a busy
entry) and what did not fit the time budget stays in the trash, "scheduled for removal": the prolog
and epilog of later jobs sweep leftover trash within a time budget. A name already at a new job's
path (a stale directory, a link) is moved to the trash the same way, never reused.

Exit status, which decides whether Slurm drains the node (a failing Prolog or Epilog drains it):
- non-zero, the node is broken and needs an admin: the configuration is unreadable or malformed;
  the base directory is missing, a link, not a directory, not root-owned or writable by others; a
  SLURM_JOB_USER, SLURM_JOB_ID, SLURM_JOB_UID or SLURM_JOB_GID that is missing or malformed (slurmd
  sets them from its own records, not from the user: a bad value means slurmd or the node is wrong,
  and the prolog cannot create a directory it cannot name or give to its owner); the prolog cannot
  create or hand over the job's directory, or cannot clear a stale entry at its path; an unexpected
  error outside the job's tree. Each part checks the values it uses before it creates anything.
- zero with one line in slurmd's log, the job user's doing: anything inside the job's tree (depth,
  names, modes, links, immutable or busy files, a filesystem mounted below) and the sweep of older
  trash. Such a leftover never drains the node; it waits in the trash for the next sweep.
Every failure is one line on stderr (slurmd's log); no traceback ever reaches slurmd.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

CONFIG = "/etc/slurm/dltune/hooks.json"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# POSIX portable user names (letters, digits, . _ -), at most 32 characters; never a leading '-' or
# '.', so a job directory can never be '.', '..' or a trash name.
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,31}", re.ASCII)
# Canonical decimals only: no sign, no leading zero, no non-ASCII digits such as '²' (str.isdigit
# admits those), and short enough for int() to be cheap.
UID_TEXT = re.compile(r"0|[1-9][0-9]{0,9}", re.ASCII)
JOB_ID_TEXT = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)
# uid_t/gid_t are 32-bit and (uid_t)-1 means "leave unchanged" to chown: never an owner.
ID_MAX = 2**32 - 2
JOB_ID_MAX = 2**32 - 1
TRASH_PREFIX = ".dltune-trash."
# The epilog holds the node in COMPLETING while it runs, the prolog holds the job's start: what does
# not fit stays in the trash for the next hook.
EPILOG_BUDGET_S = 120.0
PROLOG_SWEEP_BUDGET_S = 2.0
NODE_BROKEN = 1


class Refusal(Exception):
    """A condition that ends this hook with one log line and `status` as its exit status."""

    def __init__(self, message: str, status: int = NODE_BROKEN) -> None:
        super().__init__(message)
        self.status = status


def one_line(text: str) -> str:
    """Text from users or the filesystem (newlines, control or undecodable characters) as one ASCII line."""
    return "".join(c if " " <= c < "\x7f" else ascii(c)[1:-1] for c in text)


def log(message: str) -> None:
    print(f"dltune slurm_tmpdir: {one_line(message)}", file=sys.stderr, flush=True)


def env_number(name: str, pattern: re.Pattern[str], maximum: int) -> int:
    value = os.environ.get(name)
    if value is None or not pattern.fullmatch(value) or int(value) > maximum:
        lowest = 1 if pattern is JOB_ID_TEXT else 0
        raise Refusal(f"refused: {name}={value!a} is not a decimal number in {lowest}..{maximum}")
    return int(value)


def job_user(fallback: str | None = None) -> str:
    """SLURM_JOB_USER, refused unless a portable user name: it names a path under the base."""
    user = os.environ.get("SLURM_JOB_USER", fallback)
    if user is None or not USER_NAME.fullmatch(user):
        raise Refusal(f"refused: SLURM_JOB_USER={user!a} is not a portable user name")
    return user


def job_identity() -> tuple[str, str]:
    return job_user(), str(env_number("SLURM_JOB_ID", JOB_ID_TEXT, JOB_ID_MAX))


def load_config() -> dict[str, Any]:
    try:
        with open(CONFIG) as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        raise Refusal(f"cannot read {CONFIG}: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("base"), str):
        raise Refusal(f"{CONFIG} has no base directory")
    if not config["base"].startswith("/"):
        raise Refusal(f"{CONFIG}: base {config['base']!a} is not an absolute path")
    return config


def open_base(base: str) -> int:
    """The base directory, refused unless it is a real, root-owned directory users cannot write."""
    try:
        fd = os.open(base, DIR_FLAGS)
    except OSError as exc:
        raise Refusal(f"base directory {base}: {exc.strerror} (not a real directory?)") from None
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise Refusal(f"base directory {base} must be root-owned and not group/other-writable")
    return fd


def lexists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def move_aside(base_fd: int, name: str, job: str) -> str | None:
    """Rename base/name to a free .dltune-trash.<job>[.<n>] name; None if nothing was there."""
    if not lexists(name, base_fd):
        return None
    for attempt in range(1000):
        trash = f"{TRASH_PREFIX}{job}" + (f".{attempt}" if attempt else "")
        if not lexists(trash, base_fd):
            # Only root writes to the base, so the free name stays free until this rename.
            os.rename(name, trash, src_dir_fd=base_fd, dst_dir_fd=base_fd)
            return trash
    raise OSError(errno.EEXIST, f"no free trash name for job {job}")


class Sweep:
    """One hook run's removal: its deadline, what it removed and the first few things it left."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        self.removed = 0
        self.left = 0
        self.examples: list[str] = []
        self.out_of_time = False

    def expired(self) -> bool:
        self.out_of_time = self.out_of_time or time.monotonic() > self.deadline
        return self.out_of_time

    def leave(self, name: str, reason: str | OSError) -> None:
        self.left += 1
        if len(self.examples) < 3:
            why = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
            self.examples.append(f"{name!a}: {why}")

    def report(self, base: str) -> None:
        """One line in slurmd's log when anything stays behind, none when all went."""
        if not self.left and not self.out_of_time:
            return
        left = f"could not remove {self.left} ({'; '.join(self.examples)}); " if self.left else ""
        budget = "out of time; " if self.out_of_time else ""
        log(
            f"removed {self.removed} entries; {left}{budget}what is left of {base}/{TRASH_PREFIX}* is"
            " scheduled for removal by a later prolog or epilog"
        )


def free_name(top_fd: int, counter: Iterator[int]) -> str:
    while True:
        name = f".dltune-{os.getpid()}-{next(counter)}"
        if not lexists(name, top_fd):
            return name


def empty_directory(
    top_fd: int, name: str, device: int, sweep: Sweep, hoisted: deque[str], counter: Iterator[int]
) -> None:
    """Unlink everything in top/name but its subdirectories, which are renamed up into top (queued in
    `hoisted`), then remove top/name: one descriptor at a time, whatever the depth."""
    fd = os.open(name, DIR_FLAGS, dir_fd=top_fd)
    try:
        if os.fstat(fd).st_dev != device:
            sweep.leave(name, "another filesystem is mounted there")
            return
        for child in os.listdir(fd):
            if sweep.expired():
                return
            try:
                st = os.stat(child, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(child, dir_fd=fd)  # a link goes as a link: never followed
                    sweep.removed += 1
                elif st.st_dev != device:
                    sweep.leave(child, "another filesystem is mounted there")
                else:
                    target = free_name(top_fd, counter)
                    os.rename(child, target, src_dir_fd=fd, dst_dir_fd=top_fd)
                    hoisted.append(target)
            except OSError as exc:
                sweep.leave(child, exc)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=top_fd)
    sweep.removed += 1


def empty_trash(top_fd: int, device: int, sweep: Sweep) -> None:
    """Remove everything inside the root-only trash directory `top_fd` (no recursion, no link followed)."""
    pending = deque(os.listdir(top_fd))
    counter = itertools.count()
    while pending and not sweep.expired():
        name = pending.popleft()
        try:
            st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=top_fd)
                sweep.removed += 1
            elif st.st_dev != device:
                sweep.leave(name, "another filesystem is mounted there")
            else:
                empty_directory(top_fd, name, device, sweep, pending, counter)
        except OSError as exc:
            if not sweep.out_of_time:
                sweep.leave(name, exc)


def remove_file(dir_fd: int, name: str, sweep: Sweep) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
        sweep.removed += 1
    except OSError as exc:
        sweep.leave(name, exc)


def remove_trash(base_fd: int, name: str, device: int, sweep: Sweep) -> None:
    """Empty and remove base/name, one trash entry, unless another hook is at it already."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=base_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link or file that was moved aside
            remove_file(base_fd, name, sweep)
        elif exc.errno != errno.ENOENT:
            sweep.leave(name, exc)
        return
    try:
        if os.fstat(fd).st_dev != device:
            sweep.leave(name, "another filesystem is mounted there")
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # root-only: no user can hold it
        except BlockingIOError:
            return
        # From now on no user reaches anything below by path; only root writes in this directory.
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o700)
        empty_trash(fd, device, sweep)
        if not sweep.out_of_time:
            os.rmdir(name, dir_fd=base_fd)
            sweep.removed += 1
    except OSError as exc:
        sweep.leave(name, exc)
    finally:
        os.close(fd)


def sweep_trash(base_fd: int, base: str, sweep: Sweep, first: str | None = None) -> None:
    """Remove `first` and then every older trash entry under the base, within the sweep's budget.
    Nothing here fails the hook: it is the users' trees, and what stays is logged and retried."""
    try:
        device = os.fstat(base_fd).st_dev
        older = sorted(n for n in os.listdir(base_fd) if n.startswith(TRASH_PREFIX) and n != first)
        for name in [first, *older] if first else older:
            if sweep.expired():
                break
            remove_trash(base_fd, name, device, sweep)
    except Exception as exc:  # a user's tree must never fail the hook: log it, keep the rest for later
        sweep.leave("(sweep)", f"{type(exc).__name__}: {exc}")
    sweep.report(base)


def create_job_directory(base_fd: int, name: str, uid: int, gid: int) -> None:
    os.mkdir(name, 0o700, dir_fd=base_fd)
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=base_fd)
        try:
            os.fchown(fd, uid, gid)
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    except OSError:
        os.rmdir(name, dir_fd=base_fd)  # a root-owned directory would look usable to nobody
        raise


def prolog(config: dict[str, Any]) -> None:
    user, job = job_identity()
    uid = env_number("SLURM_JOB_UID", UID_TEXT, ID_MAX)
    gid = env_number("SLURM_JOB_GID", UID_TEXT, ID_MAX)
    base = config["base"]
    base_fd = open_base(base)
    name = f"{user}.{job}"
    try:
        try:
            stale = move_aside(base_fd, name, job)
        except OSError as exc:
            raise Refusal(f"cannot move a stale {base}/{name} aside: {exc.strerror}") from None
        try:
            create_job_directory(base_fd, name, uid, gid)
        except OSError as exc:
            raise Refusal(f"cannot create {base}/{name} for uid {uid}: {exc.strerror}") from None
        sweep_trash(base_fd, base, Sweep(PROLOG_SWEEP_BUDGET_S), first=stale)
    finally:
        os.close(base_fd)


def epilog(config: dict[str, Any]) -> None:
    user, job = job_identity()
    base = config["base"]
    base_fd = open_base(base)
    name = f"{user}.{job}"
    try:
        try:
            trash = move_aside(base_fd, name, job)
        except OSError as exc:  # e.g. the user mounted a FUSE filesystem on it: theirs, not the node's
            log(f"left {base}/{name}: cannot move it aside: {exc.strerror}")
            trash = None
        sweep_trash(base_fd, base, Sweep(EPILOG_BUDGET_S), first=trash)
    finally:
        os.close(base_fd)


def owned_directory(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def task_prolog(config: dict[str, Any]) -> None:
    """Runs as the job's user, for the user's own task: a bad value is said in the task's output
    (Slurm's `print` line) and never fails the task."""
    try:
        user = job_user(fallback=pwd.getpwuid(os.getuid()).pw_name)
    except Refusal as refusal:
        print(f"print dltune: {one_line(str(refusal))}: SLURM_TMPDIR not set")
        user = ""
    exports = job_directory(config, user) if user else {}
    exports.update(job_environment(config, user))
    for name, value in exports.items():
        print(f"export {name}={value}")
    sys.stdout.flush()


def job_directory(config: dict[str, Any], user: str) -> dict[str, str]:
    """SLURM_TMPDIR (and TMPDIR if asked) when the job's directory is there and the user's."""
    try:
        job = env_number("SLURM_JOB_ID", JOB_ID_TEXT, JOB_ID_MAX)
    except Refusal as refusal:
        print(f"print dltune: {one_line(str(refusal))}: SLURM_TMPDIR not set")
        return {}
    directory = f"{config['base']}/{user}.{job}"
    if not owned_directory(directory):
        print(f"print dltune: no job directory {directory}: SLURM_TMPDIR not set")
        return {}
    return {"SLURM_TMPDIR": directory, **({"TMPDIR": directory} if config.get("set_tmpdir") else {})}


def job_environment(config: dict[str, Any], user: str) -> dict[str, str]:
    """NAME=value lines of the job-env file; a value with %u only when it is this user's directory."""
    try:
        with open(config.get("job_env", "/etc/dltune/job-env")) as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    exports: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.strip().partition("=")
        if not sep or line.lstrip().startswith("#") or not NAME.match(name):
            continue
        if "%u" in value:
            if not user:
                continue
            # A per-user directory (a cache): used only when it really is this user's.
            value = value.replace("%u", user)
            if not os.path.lexists(value):
                with contextlib.suppress(OSError):
                    os.mkdir(value, 0o700)
            if not owned_directory(value):
                continue
        exports[name] = value
    return exports


def run_site_hook(config: dict[str, Any], kind: str) -> int:
    site = config.get("site_hooks", {}).get(kind)
    if not site:
        return 0
    return subprocess.run([site], check=False).returncode


PARTS = {"prolog": prolog, "epilog": epilog, "task_prolog": task_prolog}


def main() -> int:
    kind = os.path.basename(sys.argv[0])
    try:
        part = PARTS.get(kind)
        if part is None:
            raise Refusal(f"called as {kind!a}: install it as prolog, epilog or task_prolog")
        config = load_config()
        part(config)
        return run_site_hook(config, kind)
    except Refusal as refusal:
        log(f"{kind}: {refusal}")
        return refusal.status
    except Exception as exc:  # the one boundary: slurmd gets a line, never a traceback
        log(f"{kind}: unexpected {type(exc).__name__}: {exc}")
        return NODE_BROKEN


if __name__ == "__main__":
    sys.exit(main())
