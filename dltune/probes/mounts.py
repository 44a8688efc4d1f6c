"""Mount table (``/proc/self/mountinfo``) and ``/etc/fstab``, parsed with the kernel's octal escapes."""

from __future__ import annotations

import re

from dltune.snapshot import Fstab, FstabEntry, Mount, UnparsedLine
from dltune.text import decimal

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")
_BLANKS = re.compile(r"[ \t]+")

# libmount's tags (blkid_parse_tag_string): NAME=value, NAME="value" or NAME='value'.
_QUOTED_TAG = re.compile(r"^(?P<name>UUID|LABEL|PARTUUID|PARTLABEL|ID)=(?P<q>[\"'])(?P<value>.*)(?P=q)$")

# The option names libmount knows (util-linux libmount/src/optmap.c: linux_flags_map and
# userspace_opts_map), and its prefixes and name=value options: what a type field holding options is
# made of. "auto" is there too, but it is also fstab(5)'s type "auto": alone it is a type. One string
# split: the names as optmap.c lists them, readable in a few lines (a literal would take 57).
MOUNT_OPTION_NAMES = frozenset(
    (  # noqa: SIM905
        "ro rw exec noexec suid nosuid dev nodev sync async dirsync remount bind rbind sub nosub silent "
        "loud mand nomand atime noatime iversion noiversion diratime nodiratime relatime norelatime "
        "strictatime nostrictatime lazytime nolazytime unbindable runbindable private rprivate slave "
        "rslave shared rshared symfollow nosymfollow move defaults auto noauto user nouser users nousers "
        "owner noowner group nogroup _netdev loop nofail"
    ).split()
)
_OPTION_PREFIXES = ("x-", "X-")
# With one of these options mount(8) never uses the type field (libmount context.c,
# mnt_context_guess_fstype: a bind or move mount's type is "none" whatever fstab says).
_TYPE_IGNORED_WITH = frozenset({"bind", "rbind", "move"})


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


def _is_option(word: str) -> bool:
    return "=" in word or word in MOUNT_OPTION_NAMES or word.startswith(_OPTION_PREFIXES)


def options_in_type(fstype: str, options: str | None) -> bool:
    """A type field that is a mount options string (``rw,nosuid,nofail``, ``defaults``): the type field
    left out, so the options took its place. libmount takes any word as the type (tab_parse.c,
    mnt_parse_table_line, and a comma-separated type is a list mount(8) tries one by one), so such a
    line parses, and mount(8) then fails with "unknown filesystem type 'defaults'". Every item must be an
    option (one real type in the list, ``ext4,noatime``, still mounts ext4), "auto" alone is the type
    auto, and a bind or move mount ignores its type field."""
    items = [item for item in fstype.split(",") if item]
    if not items or not all(_is_option(item) for item in items) or items == ["auto"] * len(items):
        return False
    return not set(parse_options(options or "")) & _TYPE_IGNORED_WITH


def _not_a_number(name: str, field: str, count: int) -> str:
    reason = f"{name} {field!r} is not a number"
    if count > 6 or field[0] not in "0123456789+-":
        # "defaults,  bind", "/mnt/My Disk", "UUID= 0263...": the blank ends the field early and what
        # follows lands in the next one; libmount then finds words where dump and pass belong.
        reason += (
            f" ({count} fields: a blank inside a field shifts the rest; write a space in a path as \\040, "
            "and none after a comma in the options)"
        )
    return reason


def parse_fstab(text: str) -> Fstab:
    """Entries of fstab; comments and blank lines are skipped, malformed lines are kept as unparsed.

    What libmount accepts (util-linux libmount/src/tab_parse.c, mnt_parse_table_line): the source, the
    target and the type are needed (a missing one is a parse error: mount(8) says "parse error at line
    N -- ignored"); the options, dump and pass may be left out (no options: the defaults; dump and
    pass 0); dump and pass are read with strtol and must end at a blank or the line's end; nothing
    after the pass number is read. A line libmount takes whose type field holds mount options is
    unparsed here too: mount(8) cannot mount it (options_in_type), and the record keeps the mount
    point it stands for."""
    entries = []
    unparsed = []
    # libmount's grammar: lines end at \n only, fields are separated by blanks (space, tab);
    # any other character, even a form feed, is part of a field.
    for line_no, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip(" \t\r")
        if not stripped or stripped.startswith("#"):
            continue
        every = _BLANKS.split(stripped)
        # libmount reads six fields and ignores the rest of the line (tab_parse.c, mnt_parse_table_line:
        # nothing is parsed after the pass number), so "0 2 # data disk" is a valid line.
        fields = every[:6]
        reason = None
        if len(fields) < 3:
            reason = f"{len(fields)} field(s), at least 3 needed (spec, mount point, type)"
        elif len(fields) > 4 and fstab_number(fields[4]) is None:
            reason = _not_a_number("dump", fields[4], len(every))
        elif len(fields) > 5 and fstab_number(fields[5]) is None:
            reason = _not_a_number("pass", fields[5], len(every))
        if reason is not None:
            unparsed.append(UnparsedLine(line_no, line, reason))
            continue
        options = fields[3] if len(fields) > 3 else None
        if options_in_type(fields[2], options):
            unparsed.append(
                UnparsedLine(
                    line_no,
                    line,
                    f"type {fields[2]!r} is mount options, not a filesystem type (the type field is "
                    'missing): mount(8) fails with "unknown filesystem type"',
                    mount_point=unescape(fields[1]),
                )
            )
            continue
        entries.append(
            FstabEntry(
                line_no=line_no,
                spec=normalize_spec(unescape(fields[0])),
                mount_point=unescape(fields[1]),
                fstype=fields[2],
                options=parse_options(options) if options is not None else ("defaults",),
                freq=(fstab_number(fields[4]) or 0) if len(fields) > 4 else 0,
                passno=(fstab_number(fields[5]) or 0) if len(fields) > 5 else 0,
            )
        )
    return Fstab(tuple(entries), tuple(unparsed))
