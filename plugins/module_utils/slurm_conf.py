"""slurm.conf as Slurm reads it, edited as bytes: the one model of the file that the collection's Slurm
modules (slurm_conf_keys, slurm_tmpdir_conf) edit and that dltune's audit reads (dltune/probes/
slurm_conf_model.py is a link to this file, so the wheel carries the same code).

Slurm's reader (src/common/parse_config.c, s_p_parse_file) works on physical lines ended by "\\n": on
each it cuts a comment at the first "#" that an even number of backslashes precedes, then joins the
next line where an odd number of backslashes ends what is left (blanks after them ignored), drops one
backslash of each escape, and reads from the start of that logical line: "Include FILE" (the word
in any case, then a blank; FILE relative to the including file's directory, "%c" the cluster name in
lower case), or key=value pairs (keys in any case; a value quoted "with blanks", or a word). A line
whose first key is a record (NodeName=, PartitionName=, ...) owns the rest of the line. The last value
of a key wins, wherever it is.

An edit replaces only the bytes of one value and says what it replaced, so that putting those bytes
back gives the site its file byte for byte: line ends, a missing final newline, bytes that are not
UTF-8, comments and blanks are never rewritten.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

# Keys whose line is one record: the pairs after the first belong to it, not to the global settings.
RECORD_KEYS = frozenset(
    ["nodename", "partitionname", "downnodes", "frontendname", "nodeset", "switchname", "name"]
)
_BLANK = b" \t\n\v\f\r"
_PAIR = re.compile(
    rb"[ \t\n\v\f\r]*([A-Za-z0-9_.]+)[ \t\n\v\f\r]*([-*+/]?)=[ \t\n\v\f\r]*"
    rb'(("([^"]*)")|([^ \t\n\v\f\r]+))(?=[ \t\n\v\f\r]|\Z)'
)
MAX_INCLUDE_DEPTH = 8


class ConfError(ValueError):
    """slurm.conf cannot be read or edited as asked; the message is one line naming the file."""


class UntrustedLink(ValueError):
    """A link on the way to a file root would write, that someone other than root could have made."""


@dataclass
class Setting:
    """One key=value as Slurm reads it, with where its bytes are."""

    key: str  # as the site spelled it
    value: str  # as Slurm sees it: quotes and escapes gone (bytes that are not UTF-8 kept as surrogates)
    path: str  # the file holding it (slurm.conf or a file it Includes)
    lineno: int  # the physical line its key is on, from 1
    value_span: tuple[int, int]  # bytes of the value in that file, quotes and continuations included
    token_span: tuple[int, int]  # from the key to the end of the value
    line_span: tuple[int, int]  # the physical lines of its logical line, line ends included
    removal_span: tuple[int, int]  # what taking this pair out of its line removes

    @property
    def lkey(self) -> str:
        return self.key.lower()


@dataclass
class ConfFile:
    path: str
    data: bytes
    eol: bytes  # the file's own line end: "\r\n" where its first line ends so
    dangling: bool  # it ends inside a continuation: a line appended would join it


@dataclass
class SlurmConf:
    """slurm.conf and the files it includes, read in Slurm's order."""

    path: str
    files: dict[str, ConfFile] = field(default_factory=dict)
    settings: list[Setting] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # Includes that could not be read: "file (why)"

    @property
    def main(self) -> ConfFile:
        return self.files[self.path]

    def last(self, key: str) -> Setting | None:
        """The assignment of ``key`` that Slurm uses: the last one read."""
        found = None
        for setting in self.settings:
            if setting.lkey == key.lower():
                found = setting
        return found

    def values(self) -> dict[str, str]:
        """Lower-cased key -> the value Slurm uses."""
        return {s.lkey: s.value for s in self.settings}


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _logical_lines(data: bytes) -> Iterator[tuple[int, int, int, list[tuple[int, int]], bool]]:
    """(first byte, end byte, first physical line number, [(byte, offset)] after comments, joins and
    escapes, ended inside a continuation) for each logical line of ``data``."""
    pos, lineno, size = 0, 1, len(data)
    while pos < size:
        first, first_lineno, continued = pos, lineno, False
        chars: list[tuple[int, int]] = []
        while pos < size:
            newline = data.find(b"\n", pos)
            end = size if newline < 0 else newline + 1
            physical = data[pos:end]
            cut, backslashes = len(physical), 0
            for index, byte in enumerate(physical):
                if byte == 0x23 and backslashes % 2 == 0:
                    cut = index
                    break
                backslashes = backslashes + 1 if byte == 0x5C else 0
            body = physical[:cut]
            index, run = len(body) - 1, 0
            while index >= 0:
                if body[index] == 0x5C:
                    run += 1
                elif not (body[index] in _BLANK and run == 0):
                    break
                index -= 1
            continued = run % 2 == 1
            keep = index + run if continued else len(body)  # the last backslash of an odd run goes
            chars.extend((body[k], pos + k) for k in range(keep))
            pos, lineno = end, lineno + 1
            if not continued:
                break
        unescaped: list[tuple[int, int]] = []
        k = 0
        while k < len(chars):
            if chars[k][0] == 0x5C:
                k += 1
                if k == len(chars):
                    break
            unescaped.append(chars[k])
            k += 1
        yield first, pos, first_lineno, unescaped, continued and pos >= size


def _eol(data: bytes) -> bytes:
    newline = data.find(b"\n")
    return b"\r\n" if newline > 0 and data[newline - 1 : newline] == b"\r" else b"\n"


def read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def load(path: str, data: bytes | None = None, read: Callable[[str], bytes] | None = None) -> SlurmConf:
    """slurm.conf at ``path`` (``data`` its bytes, if already read) with its Includes, as Slurm reads
    it. An Include that cannot be read is listed in ``missing`` (an editor refuses to guess)."""
    read = read or read_file
    conf = SlurmConf(path=path)
    _parse_into(conf, path, read(path) if data is None else data, read, depth=0)
    return conf


def _parse_into(conf: SlurmConf, path: str, data: bytes, read: Callable[[str], bytes], depth: int) -> None:
    lines = list(_logical_lines(data))
    conf.files[path] = ConfFile(path, data, _eol(data), bool(lines) and lines[-1][4])
    for first, end, lineno, chars, _dangling in lines:
        logical = bytes(byte for byte, _ in chars)
        offsets = [offset for _, offset in chars]
        if logical[:7].lower() == b"include" and logical[7:8] and logical[7:8] in _BLANK:
            _include(conf, path, logical[7:], lineno, read, depth)
            continue
        pairs = []
        at = 0
        while True:
            match = _PAIR.match(logical, at)
            if match is None:
                break
            pairs.append(match)
            at = match.end()
            if len(pairs) == 1 and match.group(1).lower().decode() in RECORD_KEYS:
                break
        for number, match in enumerate(pairs):
            value = match.group(5) if match.group(5) is not None else match.group(6)
            token = (offsets[match.start(1)], offsets[match.end(3) - 1] + 1)
            if len(pairs) == 1:
                removal = (first, end)
            elif number + 1 < len(pairs):
                removal = (token[0], offsets[pairs[number + 1].start(1)])
            else:
                removal = (offsets[pairs[number - 1].end(3) - 1] + 1, token[1])
            conf.settings.append(
                Setting(
                    key=match.group(1).decode(),
                    value=_decode(value),
                    path=path,
                    lineno=lineno + data.count(b"\n", first, token[0]),
                    value_span=(offsets[match.start(3)], token[1]),
                    token_span=token,
                    line_span=(first, end),
                    removal_span=removal,
                )
            )


def _include(
    conf: SlurmConf, path: str, rest: bytes, lineno: int, read: Callable[[str], bytes], depth: int
) -> None:
    name = _decode(rest.strip(_BLANK).split()[0]) if rest.strip(_BLANK) else ""
    if "%c" in name:
        cluster = conf.last("ClusterName")
        name = name.replace("%c", cluster.value.lower()) if cluster else name
    target = name if name.startswith("/") else os.path.join(os.path.dirname(path), name)
    if depth >= MAX_INCLUDE_DEPTH or target in conf.files:
        conf.missing.append(f"{target} (Include at {path} line {lineno}: included again or too deep)")
        return
    try:
        _parse_into(conf, target, read(target), read, depth + 1)
    except ConfError as exc:
        conf.missing.append(f"{target} (Include at {path} line {lineno}: {exc})")


def apply(data: bytes, changes: list[tuple[int, int, bytes]]) -> bytes:
    """``data`` with each (start, end, bytes) change made; overlapping removals merge."""
    merged: list[list[Any]] = []
    for start, end, new in sorted(changes):
        if merged and start < merged[-1][1]:
            if new or merged[-1][2]:
                raise ConfError("two edits of slurm.conf overlap: refusing to guess")
            merged[-1][1] = max(merged[-1][1], end)
            continue
        merged.append([start, end, new])
    out, at = [], 0
    for start, end, new in merged:
        out += [data[at:start], new]
        at = end
    out.append(data[at:])
    return b"".join(out)


def owned(conf: SlurmConf, key: str) -> Setting | None:
    """The setting of ``key`` an edit of slurm.conf may change: the one Slurm uses, which must be in
    slurm.conf itself (ConfError naming the file where an Include holds it, or may hold it)."""
    setting = conf.last(key)
    if setting is not None and setting.path != conf.path:
        raise ConfError(
            f"{setting.key}={setting.value} is set in {setting.path} line {setting.lineno}, a file "
            f"{conf.path} "
            f"Includes: dltune edits only {conf.path}; move {setting.key} there, or manage it yourself"
        )
    if setting is None and conf.missing:
        raise ConfError(
            f"{conf.path}: an Include cannot be read, so {key} may be set there: {conf.missing[0]}"
        )
    return setting


def set_values(conf: SlurmConf, wanted: dict[str, str]) -> tuple[bytes, dict[str, str | None]]:
    """slurm.conf's bytes with each key of ``wanted`` holding its value (appended where Slurm reads
    none), and, for each key changed, the bytes its value had (None: appended)."""
    main = conf.main
    changes: list[tuple[int, int, bytes]] = []
    replaced: dict[str, str | None] = {}
    appended: list[bytes] = []
    for key, value in wanted.items():
        setting = owned(conf, key)
        if setting is None:
            appended.append(encode(f"{key}={value}"))
            replaced[key] = None
        elif setting.value != value:
            start, end = setting.value_span
            changes.append((start, end, encode(value)))
            replaced[key] = _decode(main.data[start:end])
    data = apply(main.data, changes)
    if appended:
        if main.dangling:
            raise ConfError(
                f"{conf.path}: its last line ends in a continuation (\\): a line added would join it"
            )
        if not data or data.endswith(b"\n"):
            data += b"".join(line + main.eol for line in appended)
        else:  # no final newline: none after ours either
            data += main.eol + main.eol.join(appended)
    return data, replaced


def restore_values(conf: SlurmConf, ours: dict[str, str], site: dict[str, str | None]) -> bytes:
    """slurm.conf's bytes with each key that still holds our value given back the bytes ``site``
    recorded (taken out where the site had none). A key whose value changed since is the site's."""
    main = conf.main
    changes: list[tuple[int, int, bytes]] = []
    removals: list[tuple[int, int]] = []
    for key, raw in site.items():
        setting = conf.last(key)
        if setting is None or setting.path != conf.path or setting.value != ours.get(key):
            continue
        if raw is not None:
            changes.append((*setting.value_span, encode(raw)))
        else:
            removals.append(setting.removal_span)
    merged: list[list[int]] = []
    for start, end in sorted(removals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    data = main.data
    if merged and merged[-1][1] == len(data) and not data.endswith(b"\n") and merged[-1][0] > 0:
        # The lines taken out end the file, which has no final newline: the line end before them
        # goes too (it was added with them), so the file ends as the site's did.
        start = merged[-1][0]
        merged[-1][0] = start - (2 if data[start - 2 : start] == b"\r\n" else 1)
    return apply(data, changes + [(start, end, b"") for start, end in merged])


def read_json(path: str, what: str) -> Any:
    """The JSON document a module keeps at ``path`` (None where there is none); ConfError naming the
    file where it is not JSON or cannot be read."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8", "surrogateescape"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfError(f"{path} is not {what} ({exc}): fix or remove it") from None


def edits_shaped(edits: Any) -> bool:
    """A record of slurm.conf's edits: key -> {site: the bytes its value had, or None; ours: str}."""
    if not isinstance(edits, dict):
        return False
    return all(
        isinstance(edit, dict)
        and isinstance(edit.get("site"), (str, type(None)))
        and isinstance(edit.get("ours"), str)
        for edit in edits.values()
    )


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


def write_atomically(path: str, content: bytes, like: os.stat_result | None, new_mode: int) -> None:
    """Replace ``path`` by rename: slurmd and the hooks never read a half-written file. The old file's
    owner and mode (``like``, special bits too) are kept; a new file gets ``new_mode``. A link is kept:
    the file it leads to is replaced (edit_target). On any failure the old file stays, no temporary
    is left, and ConfError says why in one line naming the file."""
    path = edit_target(path)
    if like is not None and not stat.S_ISREG(like.st_mode):
        raise ConfError(f"{path}: not a regular file: not replaced")
    import tempfile  # only a writer needs it: the audit reads slurm.conf on every run

    try:
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".dltune-")
    except OSError as exc:
        raise ConfError(f"{path}: cannot write beside it ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.chmod(temporary, like.st_mode & 0o7777 if like else new_mode)
        if like:
            os.chown(temporary, like.st_uid, like.st_gid)
        os.replace(temporary, path)
    except OSError as exc:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise ConfError(f"{path}: cannot replace it ({exc.strerror or exc})") from None
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
