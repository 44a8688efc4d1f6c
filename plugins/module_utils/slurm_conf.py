"""slurm.conf line syntax shared by the collection's Slurm modules (slurm_conf_keys, slurm_tmpdir_conf)."""

from __future__ import annotations

import os
import re
import tempfile

# An assignment with its comment cut off: indentation, key, value (trailing blanks outside it).
LINE = re.compile(r"^(\s*)([A-Za-z]+)\s*=\s*(.*?)\s*$")


def reassign(line: str, value: str) -> str:
    """``line``, an assignment, with ``value`` in place of its value and nothing else changed: the key
    as the site spelled it, the blanks, and the site's trailing comment stay, so that putting the old
    value back gives the site's line byte for byte."""
    code, hash_, comment = line.partition("#")
    found = LINE.match(code)
    if found is None:
        raise ValueError(f"not a slurm.conf assignment: {line!r}")
    return code[: found.start(3)] + value + code[found.end(3) :] + hash_ + comment


class UntrustedLink(ValueError):
    """A link on the way to a file root would write, that someone other than root could have made."""


def _trusted(path: str, what: str) -> None:
    """``path`` (not followed) and the directory holding it are root's (or this user's) and no one
    else can write that directory: what a site's admin made, not a user's plant."""
    for checked in (path, os.path.dirname(path) or "."):
        st = os.lstat(checked)
        if st.st_uid not in (0, os.geteuid()):
            raise UntrustedLink(f"{what}: {checked} belongs to uid {st.st_uid}, not root: not followed")
        if checked != path and st.st_mode & 0o022:
            raise UntrustedLink(f"{what}: {checked} is writable by others than its owner: not followed")


def edit_target(path: str) -> str:
    """The file an edit of ``path`` must replace: ``path`` itself, or, where it is a link (one
    slurm.conf shared by every host, say on NFS), the file it leads to, so that the link stays a link.
    Each link on the way, and the directory of the file at its end, must be the site admin's
    (UntrustedLink otherwise)."""
    hops = 0
    while os.path.islink(path):
        _trusted(path, "a link to slurm.conf")
        target = os.readlink(path)
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
        hops += 1
        if hops > 8:
            raise UntrustedLink(f"{path}: more than 8 links: not followed")
    if hops:
        _trusted(path, "the file a link to slurm.conf leads to")
    return path


def write_atomically(path: str, content: str, like: os.stat_result | None, new_mode: int) -> None:
    """Replace ``path`` by rename: slurmd and the hooks never read a half-written file. The old file's
    owner and mode (``like``, special bits too) are kept; a new file gets ``new_mode``. A link is kept:
    the file it leads to is replaced (edit_target). On any failure the old file stays and no temporary
    is left."""
    path = edit_target(path)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".dltune-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(content)
        os.chmod(temporary, like.st_mode & 0o7777 if like else new_mode)
        if like:
            os.chown(temporary, like.st_uid, like.st_gid)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
