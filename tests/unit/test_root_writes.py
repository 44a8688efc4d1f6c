"""Root never writes through a link it did not make. Each file dltune writes as root (the textfile for
node_exporter, Ansible's facts, the health check's history, `dltune report`'s outputs) meets an
ordinary user's (uid 65534) plant where it writes: a link to a root-only file, a FIFO, a directory of
the user's, a link on the way. Each is refused with one line naming it, the root-only file is never
touched and nothing blocks. The controls: root's own link is followed (the file it names replaced, the
link kept), as before. Runs as root (CI does); skipped otherwise, since only root can plant another
user's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dltune.fleet.slurm_health import History, load_history, save_history
from tests.unit.test_hostile_inputs import FIXTURES, envelope, one_line, result, run_child

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")
USER = 65534
AUDIT_ROOT = str(FIXTURES / "tmp_tmpfs_ok")
PLANTS = ["link to a root-only file", "FIFO", "user's directory", "user's link on the way", "open dir"]


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    secret = tmp_path / "root-only" / "secret"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("root's own\n")
    return secret


def users_dir(path: Path) -> Path:
    path.mkdir(mode=0o755)
    os.chown(path, USER, USER)
    return path


def users_link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    os.lchown(link, USER, USER)
    return link


def users_fifo(path: Path) -> Path:
    os.mkfifo(path)
    os.chown(path, USER, USER)
    return path


def writers(out: Path) -> list[tuple[list[str], str]]:
    """(argv writing ``out``, the option that names it)."""
    report_input = out.parent.parent / "node.json"
    if not report_input.exists():
        report_input.write_text(json.dumps(envelope([result()])))
    return [
        (["audit", "--root", AUDIT_ROOT, "--textfile-dir", str(out.parent)], "--textfile-dir"),
        (["audit", "--root", AUDIT_ROOT, "--facts-file", str(out)], "--facts-file"),
        (["report", str(report_input), "--json", str(out)], "--json"),
        (["report", str(report_input), "--html", str(out)], "--html"),
    ]


def planted_cases(tmp_path: Path, victim: Path) -> dict[str, Path]:
    """Where each writer is sent: the output file's path in a tree an ordinary user planted."""
    cases: dict[str, Path] = {}
    for plant in (
        "link to a root-only file",
        "FIFO",
        "user's directory",
        "user's link on the way",
        "open dir",
    ):
        base = tmp_path / plant.replace(" ", "-").replace("'", "")
        base.mkdir()
        if plant == "link to a root-only file":
            users_link(base / "dltune.prom", victim)
        elif plant == "FIFO":
            users_fifo(base / "dltune.prom")
        elif plant == "user's directory":
            base = users_dir(base / "mine")
        elif plant == "user's link on the way":
            base = users_link(base / "to-root-only", victim.parent)
        else:
            base = base / "anyone"
            base.mkdir()
            base.chmod(0o777)  # not sticky: any user could swap the file between check and rename
        cases[plant] = base / "dltune.prom"
    return cases


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize("writer", range(4), ids=["textfile", "facts", "report-json", "report-html"])
def test_root_refuses_to_write_into_a_plant_naming_it(
    plant: str, writer: int, tmp_path: Path, victim: Path
) -> None:
    out = planted_cases(tmp_path, victim)[plant]
    argv, option = writers(out)[writer]
    before = {p: p.lstat() for p in tmp_path.rglob("*")}
    done = run_child(*argv)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert option in line and ("uid 65534" in line or "FIFO" in line or "writable by anyone" in line), line
    assert victim.read_text() == "root's own\n" and sorted(victim.parent.iterdir()) == [victim]
    after = {p: p.lstat() for p in tmp_path.rglob("*")}
    assert after.keys() == before.keys()


def test_roots_own_link_is_followed_and_kept(tmp_path: Path) -> None:
    target = tmp_path / "real" / "dltune.prom"
    target.parent.mkdir()
    target.write_text("")
    (tmp_path / "textfile").symlink_to(target.parent)
    done = run_child("audit", "--root", AUDIT_ROOT, "--textfile-dir", str(tmp_path / "textfile"))
    assert done.returncode in (0, 1), done.stderr
    assert (tmp_path / "textfile").is_symlink() and "dltune_check_status" in target.read_text()


def test_the_history_of_another_user_is_not_trusted_nor_written_through(tmp_path: Path, victim: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    history = state / "history.json"
    history.write_text(json.dumps({"schema_version": 1, "resumes": [1.0], "drained_reason": "x"}))
    os.chown(history, USER, USER)
    loaded, note = load_history(str(history))
    assert loaded == History() and "not used" in note
    history.unlink()
    users_link(history, victim)
    with pytest.raises(OSError, match=r"uid 65534"):
        save_history(str(history), History(resumes=(2.0,)))
    assert victim.read_text() == "root's own\n"


def test_a_history_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o1777)
    with pytest.raises(Exception, match=r"only it may write"):
        save_history(str(state / "history.json"), History(resumes=(2.0,)))
    assert list(state.iterdir()) == []


def test_roots_directory_below_another_users_is_written(tmp_path: Path) -> None:
    """Debian's node-exporter layout: /var/lib/prometheus is the prometheus user's, the textfile
    directory below it root's. The walk passes the user's directory; what the user could put in place
    of root's directory (a link or a directory of theirs) is refused, as in the cases above."""
    theirs = users_dir(tmp_path / "prometheus")
    textfile = theirs / "node-exporter"
    textfile.mkdir()
    done = run_child("audit", "--root", AUDIT_ROOT, "--textfile-dir", str(textfile))
    assert done.returncode in (0, 1), done.stderr
    assert "dltune_check_status" in (textfile / "dltune.prom").read_text()
