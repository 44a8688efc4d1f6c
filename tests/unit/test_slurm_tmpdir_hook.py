"""Role slurm_tmpdir's hook program (prolog, epilog, task_prolog) run for real, as slurmd runs it: as
root, `python3 -I`, no PATH, only the SLURM_* variables. Each test installs a copy whose CONFIG names
a configuration and scratch base of the test's own (the installed program has no way to be pointed
elsewhere: slurmd sets its environment). Job trees are built inside the job's directory as an
ordinary user (setpriv nobody), so they are the user's, as on a node.

What must hold: whatever a job leaves (any depth, odd names, modes, links, fifos, immutable files, a
mount below), the epilog exits 0, follows no link, leaves no traceback in slurmd's log and frees the
job's path at once, keeping what it cannot remove in the trash for a later hook; a malformed SLURM_*
value or a broken node is refused with one log line and a non-zero status before anything exists."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO_ROOT
from tests.fuzzing import FUZZ_EXAMPLES

HOOK = REPO_ROOT / "roles/slurm_tmpdir/files/slurm_tmpdir_hook.py"
BUILDER = REPO_ROOT / "tests/hook_tree_builder.py"
INSTALLED_CONFIG = 'CONFIG = "/etc/slurm/dltune/hooks.json"'
PYTHON = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
LOG_PREFIX = "dltune slurm_tmpdir: "
NOBODY = pwd.getpwnam("nobody")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the prolog and epilog run as root: so must their tests"),
    pytest.mark.skipif(
        not (Path(PYTHON).exists() and shutil.which("setpriv")),
        reason="needs /usr/bin/python3 (the hook's interpreter) and setpriv (util-linux)",
    ),
]


def hexpath(*parts: bytes | str) -> list[str]:
    return [(part.encode() if isinstance(part, str) else part).hex() for part in parts]


class Node:
    """One installation of the hooks under `root` (0755, so an ordinary user reaches the base):
    root/hooks/{prolog,epilog,task_prolog}, root/hooks.json, the base root/scratch, and root/victims,
    root's files that links in job trees point at."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = root / "scratch"
        self.victims = root / "victims"

    def install(self, **constants: str) -> None:
        """The hook with CONFIG (and any constant named, e.g. a budget) set for this node."""
        text = HOOK.read_text()
        assert text.count(INSTALLED_CONFIG) == 1, "the hook's CONFIG line moved: update this test"
        text = text.replace(INSTALLED_CONFIG, f'CONFIG = "{self.root}/hooks.json"')
        for name, value in constants.items():
            line = next(line for line in text.splitlines() if line.startswith(f"{name} = "))
            text = text.replace(line, f"{name} = {value}")
        hooks = self.root / "hooks"
        hooks.mkdir(mode=0o755, exist_ok=True)
        for kind in ("prolog", "epilog", "task_prolog"):
            (hooks / kind).write_text(text)
            (hooks / kind).chmod(0o755)
        config = {"base": str(self.base), "set_tmpdir": False, "job_env": str(self.root / "job-env")}
        (self.root / "hooks.json").write_text(json.dumps(config))
        (self.root / "job-env").write_text("CUBLAS_WORKSPACE_CONFIG=:4096:8\n")
        shutil.copy(BUILDER, self.root / "builder.py")
        (self.root / "builder.py").chmod(0o644)
        (self.root / "specs").mkdir(mode=0o755, exist_ok=True)

    def make_base_and_victims(self) -> None:
        self.base.mkdir(mode=0o755)
        self.victims.mkdir(mode=0o755)
        (self.victims / "file").write_text("root's file\n")
        (self.victims / "dir").mkdir(mode=0o755)
        (self.victims / "dir" / "inside").write_text("root's other file\n")

    def victim_state(self) -> dict[str, tuple[int, int, str]]:
        """Every victim and the node's root: mode, owner, and a digest of the content or listing."""
        state = {}
        for path in [self.victims, *sorted(self.victims.rglob("*")), self.root, self.root / "hooks"]:
            st = path.lstat()
            content = path.read_bytes() if path.is_file() else "\0".join(sorted(os.listdir(path))).encode()
            state[str(path)] = (st.st_mode, st.st_uid, hashlib.sha256(content).hexdigest())
        return state

    def link_targets(self) -> list[str]:
        victims = self.victims
        return [str(victims / "file"), str(victims / "dir"), "/", "..", "../..", str(self.base), "self"]

    def run(
        self, kind: str, env: dict[str, str], as_nobody: bool = False
    ) -> subprocess.CompletedProcess[str]:
        argv = [PYTHON, "-I", str(self.root / "hooks" / kind)]
        return subprocess.run(
            [*AS_NOBODY, *argv] if as_nobody else argv,
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=300,
            check=False,
        )

    def prolog(self, job: int) -> subprocess.CompletedProcess[str]:
        return self.run("prolog", job_env(job))

    def epilog(self, job: int) -> subprocess.CompletedProcess[str]:
        return self.run("epilog", job_env(job))

    def job_dir(self, job: int) -> Path:
        return self.base / f"nobody.{job}"

    def build(self, job: int, spec: list[dict[str, Any]], as_root: bool = False) -> None:
        """Build the tree of `spec` (tests/hook_tree_builder.py) in the job's directory."""
        spec_file = self.root / "specs" / f"{job}.json"
        spec_file.write_text(json.dumps(spec))
        spec_file.chmod(0o644)
        argv = [PYTHON, "-I", str(self.root / "builder.py"), str(self.job_dir(job)), str(spec_file)]
        done = subprocess.run(argv if as_root else [*AS_NOBODY, *argv], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    def entries(self) -> list[str]:
        return sorted(os.listdir(self.base))

    def trash(self) -> list[str]:
        return [name for name in self.entries() if name.startswith(".dltune-trash.")]


def job_env(job: int | str, **overrides: str) -> dict[str, str]:
    """What slurmd gives a Prolog/Epilog (no PATH), for a job of the user nobody."""
    env = {
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_USER": "nobody",
        "SLURM_JOB_UID": str(NOBODY.pw_uid),
        "SLURM_JOB_GID": str(NOBODY.pw_gid),
    }
    env.update(overrides)
    return {name: value for name, value in env.items() if value != "<unset>"}


def log_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """stderr as slurmd logs it: only the hook's own one-line messages, never a traceback."""
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert all(line.startswith(LOG_PREFIX) for line in lines), done.stderr[-3000:]
    return lines


def unmount_below(root: Path) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mountpoint in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mountpoint], check=False)


@contextmanager
def installed_node(**constants: str) -> Iterator[Node]:
    root = Path(tempfile.mkdtemp(prefix="dltune-hook-", dir="/var/tmp"))
    try:
        root.chmod(0o755)
        node = Node(root)
        node.install(**constants)
        node.make_base_and_victims()
        yield node
    finally:
        unmount_below(root)
        subprocess.run(["chattr", "-R", "-f", "-i", str(root)], capture_output=True, check=False)
        # GNU rm walks any depth (shutil.rmtree recurses, as the old epilog did).
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


@pytest.fixture
def node() -> Iterator[Node]:
    with installed_node() as installed:
        yield installed


def finish_job(node: Node, job: int) -> subprocess.CompletedProcess[str]:
    """The epilog, which must succeed whatever the job left, and free the job's path at once."""
    done = node.epilog(job)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not os.path.lexists(node.job_dir(job)), node.entries()
    return done


# --- what a job leaves ----------------------------------------------------------------------


def test_a_5000_level_tree_with_links_at_every_depth_is_removed_and_no_link_is_followed(node: Node) -> None:
    """The old recursive epilog died with a traceback well before 1,500 levels and left the tree:
    Slurm drains a node whose epilog fails, so any job user could take nodes out of service."""
    before = node.victim_state()
    assert node.prolog(1).returncode == 0
    targets = node.link_targets()
    node.build(
        1,
        [
            {"path": hexpath("deep"), "kind": "chain", "depth": 5000, "links": targets},
            {"path": hexpath("shallow"), "kind": "chain", "depth": 3, "links": targets},
            *[{"path": hexpath(f"top{n}"), "kind": "link", "target": t} for n, t in enumerate(targets)],
        ],
    )
    started = time.monotonic()
    done = finish_job(node, 1)
    assert log_lines(done) == [], done.stderr
    assert node.entries() == [], "the tree or its trash is still there"
    assert node.victim_state() == before
    assert time.monotonic() - started < 60


ODD_NAMES = [b"n" * 255, b"new\nline", b"\xff\xfe not utf-8 \x80", b"-rf", b" ", b"*", b".dltune-0", b"..."]


@pytest.mark.parametrize("depth", [0, 2000], ids=["at the top", "2000 levels down"])
def test_odd_names_modes_fifos_and_links_go_and_no_target_is_touched(node: Node, depth: int) -> None:
    """255-byte, newline and non-UTF-8 names; directories of mode 0000, 0500 and 1777; fifos; links
    to root's files, to /, upwards and to themselves: all removed, none followed. Deep in a tree each
    entry goes through a parent directory the epilog moved up, a path of its own to test."""
    before = node.victim_state()
    assert node.prolog(2).returncode == 0
    where = [b"d"] * depth
    spec: list[dict[str, Any]] = [{"path": hexpath("d"), "kind": "chain", "depth": depth}] if depth else []
    for number, name in enumerate(ODD_NAMES):
        spec += [
            {"path": hexpath(*where, name), "kind": "dir"},
            {"path": hexpath(*where, name, name), "kind": "file", "size": 100},
            {"path": hexpath(*where, name, b"fifo"), "kind": "fifo"},
            {
                "path": hexpath(*where, name, b"link"),
                "kind": "link",
                "target": node.link_targets()[number % 7],
            },
        ]
    spec += [{"path": hexpath(*where, b"self"), "kind": "link", "target": "self"}]
    for mode, name in zip([0o000, 0o500, 0o1777, 0o000], ODD_NAMES[:4], strict=True):
        spec.append({"path": hexpath(*where, name), "kind": "chmod", "mode": mode})
    node.build(2, spec)
    done = finish_job(node, 2)
    assert log_lines(done) == [], done.stderr
    assert node.entries() == []
    assert node.victim_state() == before


@pytest.mark.parametrize("immutable", ["file", "directory"])
def test_an_immutable_entry_stays_in_the_trash_with_one_log_line_and_a_later_hook_removes_it(
    node: Node, immutable: str
) -> None:
    """chattr +i (root's doing, a user cannot set it): EPERM even for root. The epilog still exits 0,
    frees the job's path, says in one line what it left (the name has a newline) and leaves it in the
    trash; once the flag is gone, the next job's prolog sweeps it."""
    if not shutil.which("chattr"):
        pytest.skip("no chattr (e2fsprogs)")
    assert node.prolog(3).returncode == 0
    name = b"stuck\nhere"
    node.build(
        3,
        [
            {"path": hexpath("a"), "kind": "dir"},
            {"path": hexpath("a", "b"), "kind": "dir"},
            {"path": hexpath("a", "b", name), "kind": "dir" if immutable == "directory" else "file"},
            *([{"path": hexpath("a", "b", name, "f"), "kind": "file"}] if immutable == "directory" else []),
            {"path": hexpath("a", "other"), "kind": "file"},
        ],
    )
    stuck = os.fsencode(node.job_dir(3)) + b"/a/b/" + name
    flagged = subprocess.run(["chattr", "+i", stuck], capture_output=True, text=True)
    if flagged.returncode != 0:
        pytest.skip(f"chattr +i does not work on {node.root}: {flagged.stderr.strip()}")
    try:
        done = finish_job(node, 3)
        [line] = log_lines(done)
        assert "scheduled for removal" in line and "stuck\\nhere" in line, line
        assert node.trash() == [".dltune-trash.3"]
        left = [os.fsencode(p.name) for p in (node.base / ".dltune-trash.3").rglob("*") if not p.is_dir()]
        assert left == ([b"f"] if immutable == "directory" else [name]), left
    finally:
        for path in (node.base / ".dltune-trash.3").rglob("*"):
            if os.fsencode(path.name) == name:
                subprocess.run(["chattr", "-i", path], check=True)
    assert node.prolog(4).returncode == 0
    assert node.entries() == ["nobody.4"], "the next prolog did not sweep the trash"


def test_a_filesystem_mounted_below_is_left_mounted_and_untouched(node: Node) -> None:
    """Removal stays on the base's filesystem: a mount inside the tree is not entered (its file
    survives), the rest goes, one log line; after the unmount a later epilog finishes."""
    assert node.prolog(5).returncode == 0
    node.build(
        5, [{"path": hexpath(*path), "kind": "dir"} for path in (["x"], ["x", "y"], ["x", "y", "mnt"])]
    )
    mountpoint = node.job_dir(5) / "x" / "y" / "mnt"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mountpoint], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    (mountpoint / "on-another-fs").write_text("keep\n")
    done = finish_job(node, 5)
    [line] = log_lines(done)
    assert "another filesystem is mounted there" in line, line
    [kept] = [p for p in (node.base / ".dltune-trash.5").rglob("on-another-fs")]
    assert kept.read_text() == "keep\n"
    unmount_below(node.root)
    assert node.prolog(6).returncode == 0 and node.epilog(6).returncode == 0
    assert node.entries() == []


@pytest.mark.parametrize("stale", ["link to root's directory", "3000-level directory", "file"])
def test_a_stale_entry_at_a_new_jobs_path_goes_to_the_trash_and_the_job_gets_a_fresh_directory(
    node: Node, stale: str
) -> None:
    """A requeued job (same id) or a lost epilog left something at <base>/<user>.<job>: the prolog
    moves it aside, never reuses or follows it, and the job gets an empty 0700 directory of its own."""
    before = node.victim_state()
    path = node.job_dir(7)
    if stale == "file":
        path.write_text("stale\n")
    elif stale.startswith("link"):
        path.symlink_to(node.victims / "dir")
    else:
        assert node.prolog(7).returncode == 0
        node.build(7, [{"path": hexpath("d"), "kind": "chain", "depth": 3000, "links": node.link_targets()}])
    done = node.prolog(7)
    assert done.returncode == 0, done.stderr[-3000:]
    log_lines(done)
    st = path.lstat()
    assert stat.S_ISDIR(st.st_mode) and (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY.pw_uid, 0o700)
    assert os.listdir(path) == []
    finish_job(node, 7)
    assert node.entries() == []
    assert node.victim_state() == before


def test_trash_that_does_not_fit_the_budget_waits_and_a_later_hook_finishes_it() -> None:
    """With no time at all (budgets 0) the epilog still frees the job's path, exits 0 and says what
    it left; later hooks with time remove it."""
    with installed_node(EPILOG_BUDGET_S="0.0", PROLOG_SWEEP_BUDGET_S="0.0") as node:
        assert node.prolog(8).returncode == 0
        node.build(8, [{"path": hexpath("d"), "kind": "chain", "depth": 50}])
        done = finish_job(node, 8)
        [line] = log_lines(done)
        assert "out of time" in line and "scheduled for removal" in line, line
        assert node.prolog(9).returncode == 0
        assert ".dltune-trash.8" in node.entries()
        node.install()  # the real budgets
        assert node.epilog(9).returncode == 0
        assert node.entries() == []


def test_trash_another_hook_is_removing_is_left_to_it(node: Node) -> None:
    """Hooks of several jobs run at once: a trash directory another one holds (its lock) is skipped."""
    assert node.prolog(10).returncode == 0
    node.build(10, [{"path": hexpath("d"), "kind": "chain", "depth": 5}])
    os.rename(node.job_dir(10), node.base / ".dltune-trash.10")
    held = os.open(node.base / ".dltune-trash.10", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert node.prolog(11).returncode == 0 and node.epilog(11).returncode == 0
        assert node.entries() == [".dltune-trash.10"]
    finally:
        os.close(held)
    assert node.prolog(12).returncode == 0 and node.epilog(12).returncode == 0
    assert node.entries() == []


def test_epilogs_of_jobs_ending_together_clean_up_every_tree(node: Node) -> None:
    jobs = range(20, 24)
    for job in jobs:
        assert node.prolog(job).returncode == 0
        node.build(job, [{"path": hexpath("d"), "kind": "chain", "depth": 1500, "links": ["/"]}])
    argv = [PYTHON, "-I", str(node.root / "hooks" / "epilog")]
    running = [subprocess.Popen(argv, env=job_env(job), stderr=subprocess.PIPE, text=True) for job in jobs]
    for process in running:
        stderr = process.communicate(timeout=300)[1]
        assert process.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert node.entries() == []


# --- malformed values and a broken node ------------------------------------------------------------

MALFORMED_VALUES = {
    "SLURM_JOB_UID": [
        "abc",
        "²",
        "٣",
        "-1",
        "4294967295",
        "4294967296",
        "",
        " 7",
        "7\n",
        "0x10",
        "007",
        "<unset>",
    ],
    "SLURM_JOB_GID": ["abc", "²", "-1", "4294967296", "", "1e3", "<unset>"],
    "SLURM_JOB_ID": ["0", "-5", "²", "", "4294967296", "007", "12a", "<unset>"],
    "SLURM_JOB_USER": ["", "..", ".hidden", "a/b", "-rf", "x" * 33, "al\nice", "ålice", "a b", "<unset>"],
}
MALFORMED = [(variable, value) for variable, values in MALFORMED_VALUES.items() for value in values]


@pytest.mark.parametrize(("variable", "value"), MALFORMED)
def test_a_malformed_slurm_value_is_refused_before_anything_is_created(
    node: Node, variable: str, value: str
) -> None:
    """slurmd, not the user, sets these: a bad one means the node is wrong, so the prolog refuses
    (non-zero: Slurm drains the node) with one log line, and nothing exists under the base. The old
    prolog crashed with a traceback (abc, ²), created a directory root kept (-1) or left one behind
    (4294967296), and took '²', '0' or '007' as job ids."""
    done = node.run("prolog", job_env(30, **{variable: value}))
    assert done.returncode != 0
    [line] = log_lines(done)
    assert variable in line and "refused" in line, line
    assert node.entries() == []


def test_a_root_job_stays_legal(node: Node) -> None:
    """Slurm runs root's jobs: uid and gid 0 are valid values, not malformed ones (a guard for the
    checks above, which the old hook passed too)."""
    done = node.run("prolog", job_env(35, SLURM_JOB_USER="root", SLURM_JOB_UID="0", SLURM_JOB_GID="0"))
    assert done.returncode == 0 and log_lines(done) == [], done.stderr
    st = (node.base / "root.35").lstat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o700)


@pytest.mark.parametrize("variable", ["SLURM_JOB_ID", "SLURM_JOB_USER"])
def test_the_epilog_refuses_a_malformed_value_and_removes_nothing(node: Node, variable: str) -> None:
    assert node.prolog(31).returncode == 0
    done = node.run("epilog", job_env(31, **{variable: "²"}))
    assert done.returncode != 0
    [line] = log_lines(done)
    assert variable in line, line
    assert node.entries() == ["nobody.31"]


def break_config(node: Node) -> None:
    (node.root / "hooks.json").unlink()


def garble_config(node: Node) -> None:
    (node.root / "hooks.json").write_text('{"base": ')


def remove_base(node: Node) -> None:
    node.base.rmdir()


def base_as_link(node: Node) -> None:
    node.base.rmdir()
    (node.root / "real-scratch").mkdir(mode=0o755)
    node.base.symlink_to(node.root / "real-scratch")


def base_owned_by_a_user(node: Node) -> None:
    os.chown(node.base, NOBODY.pw_uid, NOBODY.pw_gid)


def base_writable_by_all(node: Node) -> None:
    node.base.chmod(0o1777)


@pytest.mark.parametrize(
    "breakage",
    [break_config, garble_config, remove_base, base_as_link, base_owned_by_a_user, base_writable_by_all],
)
@pytest.mark.parametrize("kind", ["prolog", "epilog"])
def test_a_broken_node_fails_the_hook_with_one_line_and_no_traceback(
    node: Node, breakage: Any, kind: str
) -> None:
    """The node needs an admin: a non-zero status (Slurm drains it), one line, nothing created."""
    breakage(node)
    done = node.run(kind, job_env(32))
    assert done.returncode == 1
    [line] = log_lines(done)
    assert line.startswith(f"{LOG_PREFIX}{kind}: "), line
    scratch = node.root / "real-scratch" if node.base.is_symlink() else node.base
    assert not scratch.is_dir() or os.listdir(scratch) == []


def test_a_hook_called_by_an_unknown_name_says_so(node: Node) -> None:
    os.link(node.root / "hooks" / "prolog", node.root / "hooks" / "prologue")
    done = node.run("prologue", job_env(33))
    assert done.returncode == 1
    [line] = log_lines(done)
    assert "'prologue'" in line and node.entries() == []


def test_task_prolog_exports_only_the_jobs_own_directory(node: Node) -> None:
    """The task prolog runs as the user with the user's environment: a SLURM_JOB_USER that climbs
    out of the base names no SLURM_TMPDIR (the old one exported <base>/../outside.34); the job's
    own directory is exported, and the job-env lines always are."""
    assert node.prolog(34).returncode == 0
    outside = node.root / "outside.34"
    outside.mkdir()
    os.chown(outside, NOBODY.pw_uid, NOBODY.pw_gid)
    climbing = node.run("task_prolog", job_env(34, SLURM_JOB_USER="../outside"), as_nobody=True)
    assert climbing.returncode == 0, climbing.stderr
    assert "SLURM_TMPDIR" not in climbing.stdout.replace("SLURM_TMPDIR not set", "")
    assert "print dltune: refused: SLURM_JOB_USER='../outside'" in climbing.stdout, climbing.stdout
    assert "export CUBLAS_WORKSPACE_CONFIG=:4096:8" in climbing.stdout
    own = node.run("task_prolog", job_env(34), as_nobody=True)
    assert own.returncode == 0 and f"export SLURM_TMPDIR={node.job_dir(34)}\n" in own.stdout, own


# --- any tree -------------------------------------------------------------------------------------

# Any byte but NUL and '/', up to NAME_MAX.
NAME_BYTES = st.lists(st.integers(1, 255).filter(lambda b: b != ord("/")), min_size=1, max_size=255).map(
    bytes
)
NAMES = st.one_of(NAME_BYTES, st.sampled_from(ODD_NAMES)).filter(lambda b: b not in (b".", b".."))


@st.composite
def job_trees(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A random tree: directories, files, fifos, links (index into Node.link_targets), a chain of
    some depth, and modes set last, deepest first (so setting one never blocks the builder)."""
    spec: list[dict[str, Any]] = []
    directories: list[tuple[bytes, ...]] = [()]
    with_modes: list[tuple[bytes, ...]] = [()]
    taken: set[tuple[bytes, ...]] = set()
    for _ in range(draw(st.integers(0, 30))):
        path = (*draw(st.sampled_from(directories)), draw(NAMES))
        if path in taken:
            continue
        taken.add(path)
        kind = draw(st.sampled_from(["dir", "file", "fifo", "link", "chain"]))
        op: dict[str, Any] = {"path": hexpath(*path), "kind": kind}
        if kind == "link":
            op["target"] = draw(st.integers(0, 6))
        if kind == "chain":
            op["depth"] = draw(st.integers(1, 700))
            op["links"] = draw(st.lists(st.integers(0, 6), max_size=3))
        if kind == "dir":  # a chain's inside is its own (name/name/...): nothing else goes there
            directories.append(path)
        if kind in ("dir", "chain"):
            with_modes.append(path)
        spec.append(op)
    modes = draw(st.lists(st.tuples(st.sampled_from(with_modes), st.sampled_from([0, 0o500, 0o1777]))))
    for path, mode in sorted({p: m for p, m in modes if p}.items(), key=lambda item: -len(item[0])):
        spec.append({"path": hexpath(*path), "kind": "chmod", "mode": mode})
    return spec


# Each example runs three programs and builds a tree (about 2.5 s on 2 cores): 12 in `make test`
# (FUZZ_EXAMPLES 500), 250 in `make fuzz` (20,000).
@pytest.mark.fuzz
@settings(
    max_examples=max(12, FUZZ_EXAMPLES // 80), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(tree=job_trees(), builder=st.sampled_from(["nobody", "root"]))
def test_any_tree_a_job_leaves_is_removed_without_following_a_link(
    tree: list[dict[str, Any]], builder: str
) -> None:
    """Built by the job's user (the usual case) or by root (an admin's leftovers), any tree goes:
    exit 0, nothing logged, nothing left, every link target intact."""
    with installed_node() as node:
        targets = node.link_targets()
        resolved = [
            {**op, "target": targets[op["target"]]} if op["kind"] == "link"
            else {**op, "links": [targets[n] for n in op["links"]]} if op["kind"] == "chain"
            else op
            for op in tree
        ]  # fmt: skip
        before = node.victim_state()
        assert node.prolog(40).returncode == 0
        node.build(40, resolved, as_root=builder == "root")
        done = finish_job(node, 40)
        assert log_lines(done) == [], done.stderr
        assert node.entries() == []
        assert node.victim_state() == before
