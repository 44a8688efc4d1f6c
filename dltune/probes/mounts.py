"""Mount table (``/proc/self/mountinfo``) and ``/etc/fstab``, parsed with the kernel's octal escapes."""

from __future__ import annotations

import re

from dltune.snapshot import Fstab, FstabEntry, Mount, UnparsedLine
from dltune.text import decimal

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_BLANKS = re.compile(r"[ \t]+")

# libmount's tags (blkid_parse_tag_string): NAME=value, NAME="value" or NAME='value'.
_QUOTED_TAG = re.compile(r"^(?P<name>UUID|LABEL|PARTUUID|PARTLABEL|ID)=(?P<q>[\"'])(?P<value>.*)(?P=q)$")


def fstab_number(text: str) -> int | None:
    """Dump or pass as libmount reads them (strtol, base 10): an optional sign, then ASCII digits."""
    sign, digits = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    number = decimal(digits)
    return None if number is None else (-number if sign == "-" else number)


def unescape(field: str) -> str:
    """Undo the kernel's and fstab's octal escapes (``\\040`` space, ``\\011`` tab, ``\\134`` backslash)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def normalize_spec(spec: str) -> str:
    """An fstab source as mount(8) resolves it: a quoted tag (UUID="x") is the same as UUID=x."""
    match = _QUOTED_TAG.match(spec)
    return f"{match['name']}={match['value']}" if match else spec


def parse_options(text: str) -> tuple[str, ...]:
    return tuple(opt for opt in text.split(",") if opt)


def _unescaped(field: str) -> str:
    return unescape(field) if "\\" in field else field


def parse_mountinfo(text: str, unparsed: list[UnparsedLine] | None = None) -> tuple[Mount, ...]:
    """The mounts of a mountinfo text; lines that are not one (none from a kernel) are appended to
    `unparsed` when given, so the audit can report them instead of dropping them silently."""
    mounts = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            if unparsed is not None and line.strip():
                unparsed.append(UnparsedLine(line_no, line, "no ' - ' separator after the 6 mount fields"))
            continue
        if len(fields) < sep + 4:
            if unparsed is not None:
                unparsed.append(UnparsedLine(line_no, line, "fewer than 3 fields after ' - '"))
            continue
        # The kernel writes option lists without empty items: a plain split is exact here.
        mount_options, super_options = fields[5], fields[sep + 3]
        mounts.append(
            Mount(
                _unescaped(fields[4]),
                fields[sep + 1],
                _unescaped(fields[sep + 2]),
                tuple(mount_options.split(",")) if mount_options else (),
                tuple(super_options.split(",")) if super_options else (),
                fields[2],
            )
        )
    return tuple(mounts)


def parse_fstab(text: str) -> Fstab:
    """Entries of fstab; comments and blank lines are skipped, malformed lines are kept as unparsed."""
    entries = []
    unparsed = []
    # libmount's grammar: lines end at \n only, fields are separated by blanks (space, tab);
    # any other character, even a form feed, is part of a field.
    for line_no, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            continue
        # libmount reads six fields and ignores the rest of the line (tab_parse.c, mnt_parse_table_line:
        # nothing is parsed after the pass number), so "0 2 # data disk" is a valid line.
        fields = _BLANKS.split(stripped)[:6]
        reason = None
        if len(fields) < 3:
            reason = f"{len(fields)} field(s), at least 3 needed (spec, mount point, type)"
        elif any(fstab_number(f) is None for f in fields[4:6]):
            reason = "dump and pass must be numbers"
        if reason is not None:
            unparsed.append(UnparsedLine(line_no, line, reason))
            continue
        entries.append(
            FstabEntry(
                line_no=line_no,
                spec=normalize_spec(unescape(fields[0])),
                mount_point=unescape(fields[1]),
                fstype=fields[2],
                options=parse_options(fields[3]) if len(fields) > 3 else ("defaults",),
                freq=(fstab_number(fields[4]) or 0) if len(fields) > 4 else 0,
                passno=(fstab_number(fields[5]) or 0) if len(fields) > 5 else 0,
            )
        )
    return Fstab(tuple(entries), tuple(unparsed))
