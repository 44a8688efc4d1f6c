"""`dltune stage` against the kernel's view of its paths, as root.

Source and destination are compared as the kernel sees them: by device and inode along both real
paths, bind mounts included (a real bind mount, made in a mount namespace of the test's own with
`unshare -m`): a destination inside the source, a source inside the destination, the same directory,
each is refused with one line before anything is written, renamed or removed, whatever the spelling.

Root never writes through what another user made: an ordinary user's (uid 65534) link or FIFO planted
under each name `dltune stage` writes beside a dataset, and a link or directory of the user's on the
way to the destination, are refused with one line naming it; the root-only directory the link points
at is untouched and nothing blocks on the FIFO. Runs as root (CI does); skipped otherwise, since only
root can make bind mounts and plant another user's files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dltune import staging
from dltune.staging.copy import replacement
from tests.unit.test_stage import make_dataset, tree_state

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="bind mounts and another user's files need root")
USER = 65534
CLI = [sys.executable, "-m", "dltune.cli", "stage"]


def unshare_refusal() -> str | None:
    """Why a private mount namespace cannot be had here (None: it can)."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        return "unshare(1) or mount(8) is not installed"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode:
        return f"unshare cannot create a mount namespace here: {probe.stderr.strip()[:200]}"
    return None


def stage_with_bind(mounted: Path, at: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`dltune stage argv` in a mount namespace of its own where `mounted` is bind-mounted at `at`
    (gone with the namespace: nothing leaks into the host's mounts, even if the test fails)."""
    why_not = unshare_refusal()
    if why_not:
        pytest.skip(why_not)
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    namespace = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]
    return subprocess.run(
        [*namespace, str(mounted), str(at), *CLI, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    return lines[0]


def everything(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry below root, hidden ones included, with the root's own listing."""
    return {"": tuple(sorted(os.listdir(root))), **tree_state(root)}


# --- part 1: source and destination as the kernel sees them ------------------------------------------


def test_a_destination_bind_mounted_from_inside_the_source_is_refused_and_nothing_of_it_changes(
    tmp_path: Path,
) -> None:
    """The known failure: --to a bind mount of a directory inside the source, with --replace, moved
    the source's own `sub/ds` aside, copied into the source and deleted the moved files. `..` of a
    bind mount's root leads to where it is mounted, so the walk also goes up from the directory
    where its filesystem has it."""
    src = make_dataset(tmp_path / "shared", files=10)
    inner = src / "class1" / "imagenet-mini"  # what --replace would have taken for the old copy
    inner.mkdir()
    (inner / "precious").write_text("the shared source's own file")
    view = tmp_path / "view"
    view.mkdir()
    before = everything(src)
    for spelled in (str(view), f"{view}/.", f"{view}/../view"):
        done = stage_with_bind(src / "class1", view, str(src), "--to", spelled, "--replace")
        assert done.returncode == 1, done.stderr
        line = one_line(done.stderr)
        assert "the destination is inside the source" in line and str(src) in line, line
        assert everything(src) == before
    assert os.listdir(view) == []


def test_a_source_bind_mounted_from_inside_the_destination_is_refused_with_replace(tmp_path: Path) -> None:
    """The source is reached through a bind mount of a directory inside DIR/<name>: --replace would
    move DIR/<name> aside and remove it, the source with it."""
    scratch = tmp_path / "scratch"
    held = make_dataset(scratch / "imagenet-mini" / "sub", files=6)  # scratch/imagenet-mini/sub/imagenet-mini
    view = tmp_path / "view"
    view.mkdir()
    before = everything(scratch)
    done = stage_with_bind(held.parent, view, str(view / "imagenet-mini"), "--to", str(scratch), "--replace")
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert "the source is inside the destination" in line, line
    assert everything(scratch) == before


def test_the_same_directory_through_a_bind_mount_is_refused(tmp_path: Path) -> None:
    """DIR/<name> is the source itself, under another name."""
    src = make_dataset(tmp_path / "shared", files=6)
    view = tmp_path / "view"
    view.mkdir()
    before = everything(src.parent)
    done = stage_with_bind(src.parent, view, str(src), "--to", str(view), "--replace")
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert "inside the destination" in line or "the same" in line, line
    assert everything(src.parent) == before


def test_apart_through_a_bind_mount_stages_as_ever(tmp_path: Path) -> None:
    """The control: a bind mount of a directory beside the source is a destination like any other."""
    src = make_dataset(tmp_path / "shared", files=6)
    (tmp_path / "scratch").mkdir()
    view = tmp_path / "view"
    view.mkdir()
    done = stage_with_bind(tmp_path / "scratch", view, str(src), "--to", str(view))
    assert done.returncode == 0, done.stderr
    assert tree_state(tmp_path / "scratch" / src.name) == tree_state(src)


# --- part 2: root never writes through a link it did not make ----------------------------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory only root may enter, with a file: what a user's link would lead root to."""
    secret = tmp_path / "root-only" / "secret"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("root's own\n")
    return secret.parent


def victim_state(victim: Path) -> tuple[object, ...]:
    st = victim.stat()
    return (stat.S_IMODE(st.st_mode), st.st_uid, tuple(sorted(os.listdir(victim))), tree_state(victim))


def shared_scratch(tmp_path: Path) -> Path:
    """Root's own sticky directory anyone may write (as /tmp): root stages there, users plant there."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    scratch.chmod(0o1777)
    return scratch


def users_link(path: Path, target: Path) -> None:
    path.symlink_to(target)
    os.lchown(path, USER, USER)


def users_fifo(path: Path, _target: Path) -> None:
    os.mkfifo(path)
    os.chown(path, USER, USER)


def run_stage(*argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI, with a deadline: a FIFO opened for reading or writing would block it."""
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, check=False, timeout=120)


# Every name `dltune stage` of a directory writes beside it, then those of a single file's stage.
DIR_NAMES = [
    ".imagenet-mini.lock",
    ".imagenet-mini.dltune-source.json",
    ".imagenet-mini.dltune-source.json.tmp",
    ".imagenet-mini.partial.dltune-source.json",
    ".imagenet-mini.partial.dltune-source.json.tmp",
    ".imagenet-mini.partial",
    ".imagenet-mini.dltune-old",
    "imagenet-mini",
]
FILE_NAMES = [".shard.h5.partial", "..shard.h5.partial.dltune-tmp", ".shard.h5.lock", "shard.h5"]
PLANTS: dict[str, Callable[[Path, Path], None]] = {"link": users_link, "FIFO": users_fifo}


@pytest.mark.parametrize("plant", sorted(PLANTS))
@pytest.mark.parametrize("name", DIR_NAMES + FILE_NAMES)
def test_as_root_a_users_link_or_fifo_under_a_name_stage_writes_is_refused_naming_it(
    tmp_path: Path, victim: Path, name: str, plant: str
) -> None:
    if name in FILE_NAMES:
        src = tmp_path / "shared" / "shard.h5"
        src.parent.mkdir()
        src.write_bytes(os.urandom(100_000))
    else:
        src = make_dataset(tmp_path / "shared", files=6)
    scratch = shared_scratch(tmp_path)
    planted = scratch / name
    target = (
        victim / "secret" if plant == "link" and not name.endswith(("partial", "old", "mini")) else victim
    )
    PLANTS[plant](planted, target)
    before = victim_state(victim)
    done = run_stage(str(src), "--to", str(scratch), "--replace")
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert str(planted) in line, line
    why = ("belongs to uid 65534", "is a symbolic link", "is not a regular file", "is not a directory")
    assert any(reason in line for reason in why), line
    assert victim_state(victim) == before
    assert planted.is_symlink() if plant == "link" else stat.S_ISFIFO(planted.lstat().st_mode)
    assert planted.lstat().st_uid == USER
    assert not os.path.lexists(scratch / src.name) or name == src.name


def test_as_root_a_users_link_to_a_root_only_directory_is_not_followed(tmp_path: Path, victim: Path) -> None:
    """The known failure: `--to` through a link an ordinary user made, to a directory only root may
    write: the stage wrote its copy, lock and record there. (In a sticky directory anyone may write,
    the kernel's fs.protected_symlinks may refuse such a link too; here it stands in root's own
    directory, where nothing but dltune's walk refuses it.)"""
    src = make_dataset(tmp_path / "shared", files=6)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    link = scratch / "mine"
    users_link(link, victim)
    before = victim_state(victim)
    for spelled in (str(link), f"{link}/.", f"{scratch}/./mine", f"{victim}/../scratch/mine"):
        done = run_stage(str(src), "--to", spelled)
        assert done.returncode == 1, done.stderr
        line = one_line(done.stderr)
        assert f"{link} belongs to uid {USER}" in line and "run it as that user" in line, line
        assert victim_state(victim) == before


def test_as_root_a_users_directory_above_is_passed_but_what_it_can_put_there_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    """A root-owned destination below a directory of the user's (as Debian's /var/lib/prometheus holds
    root's node-exporter directory): the walk passes the user's directory, and what the user can put
    in place of root's (a directory or a link of theirs, to the root-only directory) is refused when
    reached, naming it."""
    src = make_dataset(tmp_path / "shared", files=6)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, USER, USER)
    below = home / "scratch"
    below.mkdir()
    done = run_stage(str(src), "--to", str(below))
    assert done.returncode == 0, done.stderr
    assert (below / src.name).is_dir()
    shutil.rmtree(below)
    below.mkdir()
    os.chown(below, USER, USER)  # the user's own directory instead of root's
    done = run_stage(str(src), "--to", str(below))
    assert done.returncode == 1 and f"{below} belongs to uid {USER}" in one_line(done.stderr)
    below.rmdir()
    users_link(below, victim)  # a link of the user's to the root-only directory
    before = victim_state(victim)
    done = run_stage(str(src), "--to", str(below))
    assert done.returncode == 1 and f"{below} belongs to uid {USER}" in one_line(done.stderr)
    assert victim_state(victim) == before


def test_as_root_roots_own_link_on_the_way_is_followed(tmp_path: Path) -> None:
    """The control: a link root made (a site's /scratch -> /local/scratch) leads where it says."""
    src = make_dataset(tmp_path / "shared", files=6)
    real = tmp_path / "local"
    real.mkdir()
    (tmp_path / "scratch").symlink_to(real)
    done = run_stage(str(src), "--to", str(tmp_path / "scratch"))
    assert done.returncode == 0, done.stderr
    assert tree_state(real / src.name) == tree_state(src)


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_files_temporary_planted_by_another_user_is_refused_not_removed(tmp_path: Path, plant: str) -> None:
    """The copy engine's own guard, below the stage's check of the names beside the dataset: the
    temporary a file is written under on a resume, when it stands as another user's entry, is
    refused naming it; it was unlinked and made again."""
    here = shared_scratch(tmp_path)
    (here / "x").write_bytes(b"complete? no")
    planted = here / ".x.dltune-tmp"
    PLANTS[plant](planted, tmp_path)
    refused = rf"{planted}.*(uid {USER}|symbolic link|not a regular)"
    with pytest.raises(staging.StageError, match=refused), replacement(str(here / "x")) as fd:
        os.write(fd, b"new")
    assert planted.lstat().st_uid == USER and (here / "x").read_bytes() == b"complete? no"
