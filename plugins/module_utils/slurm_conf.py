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


def write_atomically(path: str, content: str, like: os.stat_result | None, new_mode: int) -> None:
    """Replace ``path`` by rename: slurmd and the hooks never read a half-written file. The old file's
    owner and mode (``like``, special bits too) are kept; a new file gets ``new_mode``. On any failure
    the old file stays and no temporary is left."""
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
