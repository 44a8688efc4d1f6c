"""How both Slurm config modules (slurm_tmpdir_conf, slurm_conf_keys) write slurm.conf: the collection's
module_utils/slurm_conf. A file is replaced by a temporary sibling renamed over it, its mode kept,
nothing left behind on failure; the modules differ only in the mode of a file they create, so both are
held to the same table. An edit (set_values) changes only the bytes of the value Slurm uses, the rest of
its line kept byte for byte, and says which bytes it replaced, so that putting them back gives the file
back; a line that assigns nothing is never edited."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import load_role_module

TMPDIR_CONF = load_role_module("plugins/modules/slurm_tmpdir_conf.py")
CONF_KEYS = load_role_module("plugins/modules/slurm_conf_keys.py")
# A new file: hooks.json is read by the hooks as SlurmdUser; the keys record is root's alone.
MODULES = [
    pytest.param(TMPDIR_CONF, 0o644, id="slurm_tmpdir_conf"),
    pytest.param(CONF_KEYS, 0o600, id="slurm_conf_keys"),
]


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob(".dltune-*"))


@pytest.mark.parametrize(("module", "new_mode"), MODULES)
@pytest.mark.parametrize("mode", [0o640, 0o600])
def test_a_sibling_temporary_is_renamed_over_the_file_keeping_its_mode(
    module: ModuleType, new_mode: int, mode: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("old\n")
    target.chmod(mode)
    renamed: list[tuple[str, str]] = []
    replace = os.replace

    def recording(src: str, dst: str) -> None:
        renamed.append((src, dst))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", recording)
    module._write_atomically(str(target), b"new\n", target.stat())
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == mode
    [(src, dst)] = renamed
    assert dst == str(target) and os.path.dirname(src) == str(tmp_path)
    assert os.path.basename(src).startswith(".dltune-")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("module", "new_mode"), MODULES)
def test_a_new_file_gets_the_modules_own_mode(module: ModuleType, new_mode: int, tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    module._write_atomically(str(target), b"{}\n", None)
    assert target.read_text() == "{}\n" and stat.S_IMODE(target.stat().st_mode) == new_mode


@pytest.mark.parametrize(("module", "new_mode"), MODULES)
@pytest.mark.parametrize("special", [0o2640, 0o1750])
def test_special_mode_bits_are_kept(module: ModuleType, new_mode: int, special: int, tmp_path: Path) -> None:
    target = tmp_path / "prolog"
    target.write_text("#!/bin/sh\n")
    target.chmod(special)
    module._write_atomically(str(target), b"#!/bin/sh\nexit 0\n", target.stat())
    assert stat.S_IMODE(target.stat().st_mode) == special


@pytest.mark.parametrize(("module", "new_mode"), MODULES)
def test_a_failed_rename_keeps_the_file_and_leaves_no_temporary(
    module: ModuleType, new_mode: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("old\n")

    def failing(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing)
    # One line naming the file (the module fails the task with it), never an OSError's traceback.
    with pytest.raises(module.ConfError) as failed:
        module._write_atomically(str(target), b"new\n", target.stat())
    assert str(failed.value) == f"{target}: cannot replace it (No space left on device)"
    assert target.read_text() == "old\n" and leftovers(tmp_path) == []


SLURM_CONF = load_role_module("plugins/module_utils/slurm_conf.py")


def set_prolog(data: bytes) -> tuple[bytes, dict[str, str | None]]:
    """slurm.conf ``data`` with Prolog=/b (set_values), and the bytes it replaced."""
    return SLURM_CONF.set_values(SLURM_CONF.load("slurm.conf", data), {"Prolog": "/b"})


@pytest.mark.parametrize(
    ("line", "assigned", "replaced"),
    [
        (b"Prolog=/a", b"Prolog=/b", "/a"),
        (
            b"  prolog =\t/a  # the site's, mounts scratch",
            b"  prolog =\t/b  # the site's, mounts scratch",
            "/a",
        ),
        (b"PROLOG=/a#x=1", b"PROLOG=/b#x=1", "/a"),
        (b'Prolog="/a"', b"Prolog=/b", '"/a"'),
        (b"Epilog=/e prolog=/a  ", b"Epilog=/e prolog=/b  ", "/a"),
        (b"Prolog=/a # caf\xe9", b"Prolog=/b # caf\xe9", "/a"),
        (b"Prolog=\\\n/a", b"Prolog=\\\n/b", "/a"),
    ],
)
@pytest.mark.parametrize("end", [b"\n", b"\r\n", b""])
def test_an_edit_changes_only_the_value_bytes_and_keeps_the_rest_of_its_line(
    line: bytes, assigned: bytes, replaced: str, end: bytes
) -> None:
    """Spelling, blanks, a comment (bytes that are not UTF-8 too), other pairs on the line, a continuation,
    the line end and a missing final newline stay as the site wrote them; what the value's bytes were
    (its quotes too) is returned, and putting it back gives the file back byte for byte."""
    site = b"ClusterName=ci" + (b"\r\n" if end == b"\r\n" else b"\n") + line + end
    after, was = set_prolog(site)
    assert after == site.replace(line, assigned) and was == {"Prolog": replaced}
    back = SLURM_CONF.restore_values(SLURM_CONF.load("slurm.conf", after), {"Prolog": "/b"}, was)
    assert back == site


@pytest.mark.parametrize(
    "line",
    [b"# Prolog=/a", b"NodeName n1", b"", b"Prolog=", b"NodeName=n1 Prolog=/a", b"include prolog.conf"],
)
def test_a_line_that_assigns_nothing_is_never_edited(line: bytes) -> None:
    """A comment, a line with no key=value, an empty value (Slurm reads no value there), a pair that a
    record line (NodeName=...) owns, or an Include line: kept byte for byte, the key appended after it."""
    data = line + b"\n"
    conf = SLURM_CONF.load("slurm.conf", data, read=lambda path: b"")
    after, was = SLURM_CONF.set_values(conf, {"Prolog": "/b"})
    assert after == data + b"Prolog=/b\n" and was == {"Prolog": None}


@pytest.mark.parametrize(("module", "new_mode"), MODULES)
def test_a_linked_slurm_conf_is_edited_at_its_target_and_stays_a_link(
    module: ModuleType, new_mode: int, tmp_path: Path
) -> None:
    """One slurm.conf shared by every host (here /etc/slurm/slurm.conf -> ../../shared/slurm.conf, as
    a link to an NFS copy): the shared file gets the edit, the link stays a link to it, and the
    temporary lives beside the shared file (the rename is atomic there, not across filesystems)."""
    shared = tmp_path / "shared"
    etc = tmp_path / "etc/slurm"
    shared.mkdir()
    etc.mkdir(parents=True)
    (shared / "slurm.conf").write_text("old\n")
    (shared / "slurm.conf").chmod(0o644)
    link = etc / "slurm.conf"
    link.symlink_to("../../shared/slurm.conf")
    module._write_atomically(str(link), b"new\n", os.stat(link))
    assert link.is_symlink() and os.readlink(link) == "../../shared/slurm.conf"
    assert (shared / "slurm.conf").read_text() == "new\n"
    assert stat.S_IMODE((shared / "slurm.conf").stat().st_mode) == 0o644
    assert leftovers(tmp_path) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root (lchown)")
@pytest.mark.parametrize("planted", ["link", "target_dir", "writable_dir"])
def test_a_link_someone_else_could_have_made_is_never_followed(planted: str, tmp_path: Path) -> None:
    """Root writes through a link only when the link, its directory and the target's directory are the
    admin's: another user's link, a target in another user's directory, or a link in a directory others
    can write is refused before anything is written, naming the path."""
    slurm_conf = load_role_module("plugins/module_utils/slurm_conf.py")
    victim, etc = tmp_path / "victim", tmp_path / "etc"
    victim.mkdir()
    etc.mkdir()
    (victim / "root-only").write_text("secret\n")
    link = etc / "slurm.conf"
    link.symlink_to(victim / "root-only")
    if planted == "link":
        os.lchown(link, 65534, 65534)
    elif planted == "target_dir":
        os.chown(victim, 65534, 65534)
    else:
        etc.chmod(0o777)
    with pytest.raises(slurm_conf.UntrustedLink, match="not followed"):
        slurm_conf.write_atomically(str(link), b"HealthCheckProgram=/tmp/evil\n", None, 0o600)
    assert (victim / "root-only").read_text() == "secret\n" and link.is_symlink()
    assert leftovers(tmp_path) == []
