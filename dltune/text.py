"""The one escaping rule for text that came from the host or any input (mount points, device names,
fstab lines, driver messages, Slurm's node reasons, node report files and their names, paths given on
the command line), applied where such text becomes output: ``Result.to_dict`` (which every renderer
uses: JSON, the human table, Prometheus, Ansible facts, and through them the HTML report), a node
report as ``dltune report`` reads it (dltune.fleet.cluster), and the line writers of dltune.commands
(``error_line``, ``output_line``: every one-line message, ``stage --plan``'s advice).

- A byte that was not UTF-8 (read with ``surrogateescape``) is shown as ``\\xNN``; an ASCII control
  character as ``\\xNN`` too; a C1 control, a lone surrogate and a format character (Unicode category
  Cf: the bidirectional controls U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069, zero-width
  characters, tags) as ``\\uNNNN`` (``\\UNNNNNNNN`` above U+FFFF); a backslash as ``\\\\``. So every
  output is valid UTF-8, nothing in it moves a terminal's cursor, sets its title, clears it or
  reorders the text around it, nothing is dropped, the original bytes can be recovered
  (``unescape``), and two different paths never print as the same text.
- No text is ever read as markup: renderers pass it as plain text (rich ``Text``, ``html.escape``).
- What reaches a terminal passes a last guard at the sink, whatever a caller forgot: every rich
  console dltune makes (dltune.outputs.human.console) writes its text through ``terminal_safe``, which
  escapes the same characters (not the newlines dltune lays out, not backslashes, so text ``visible``
  escaped passes unchanged).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

_SURROGATE_BYTES = range(0xDC80, 0xDD00)  # what surrogateescape makes of bytes 0x80-0xff
_ESCAPED = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U00(?:0[0-9a-f]|10)[0-9a-f]{4})")


def _escaped(ch: str) -> bool:
    """Whether the rule escapes ``ch`` (the backslash aside): controls, surrogates, format characters."""
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code <= 0xDFFF:
        return True
    return code > 0xA0 and unicodedata.category(ch) == "Cf"  # ASCII needs no look-up


def _escape(ch: str) -> str:
    """The escape of a character the rule escapes."""
    code = ord(ch)
    if code in _SURROGATE_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    # \u for C1 controls, so \x80 stays the undecodable byte 0x80; surrogates; format characters
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with undecodable bytes, control and format characters and backslashes escaped (see the
    module)."""
    # Every character the rule escapes is one str.isprintable() refuses: most text takes this path.
    if text.isprintable() and "\\" not in text:
        return text
    return "".join("\\\\" if ch == "\\" else _escape(ch) if _escaped(ch) else ch for ch in text)


def terminal_safe(text: str) -> str:
    """The sink's guard (see the module): ``text`` with every character ``visible`` escapes escaped but
    the newline and the backslash. Idempotent, and it leaves ``visible``'s output as it is."""
    if text.isprintable():
        return text
    return "".join(_escape(ch) if ch != "\n" and _escaped(ch) else ch for ch in text)


def unescape(shown: str) -> bytes:
    """The bytes ``visible`` was given (as the host's file system encodes them): its inverse."""
    out = bytearray()
    position = 0
    for match in _ESCAPED.finditer(shown):
        out += shown[position : match.start()].encode("utf-8")
        escape = match.group(1)
        if escape == "\\":
            out += b"\\"
        elif escape.startswith("x"):
            value = int(escape[1:], 16)
            out += bytes([value]) if value >= 0x80 else chr(value).encode()
        else:  # \uNNNN or \UNNNNNNNN: a code point
            out += chr(int(escape[1:], 16)).encode("utf-8", "surrogatepass")
        position = match.end()
    out += shown[position:].encode("utf-8")
    return bytes(out)


def visible_data(value: Any) -> Any:
    """``visible`` through JSON-shaped data (evidence): every string, keys included."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, Mapping):
        return {visible(str(k)): visible_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [visible_data(v) for v in value]
    return value


# More digits than any counter of the kernel or a tool (2**64 has 20): not a number from there, and
# int() refuses more than 4300 digits with a ValueError.
MAX_DECIMAL_DIGITS = 40


def decimal(text: str | None) -> int | None:
    """A non-negative decimal number of ASCII digits (at most ``MAX_DECIMAL_DIGITS``), else None (also
    for no text: a file that could not be read): str.isdigit() accepts "²", which int() refuses, and
    int() accepts "٣", " 7" and "1_0", which no kernel file means. Every digit test on host text goes
    through here."""
    if text is not None and 0 < len(text) <= MAX_DECIMAL_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None
