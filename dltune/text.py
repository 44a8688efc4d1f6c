"""The one escaping policy for text that came from the host (mount points, device names, fstab lines,
driver messages), applied where a Result becomes output (``Result.to_dict``), which every renderer
uses: JSON, the human table, Prometheus, Ansible facts, and through them the HTML report.

- A byte that was not UTF-8 (read with ``surrogateescape``) is shown as ``\\xNN``; an ASCII control
  character as ``\\xNN`` too, a C1 control as ``\\u00NN``; a backslash as ``\\\\``. So every
  output is valid UTF-8, nothing is dropped, the original bytes can be recovered (``unescape``), and
  two different paths never print as the same text.
- No text is ever read as markup: renderers pass it as plain text (rich ``Text``, ``html.escape``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SURROGATE_BYTES = range(0xDC80, 0xDD00)  # what surrogateescape makes of bytes 0x80-0xff
_ESCAPED = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})")


def visible(text: str) -> str:
    """``text`` with undecodable bytes, control characters and backslashes escaped (see the module)."""
    if text.isprintable() and "\\" not in text:
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif code in _SURROGATE_BYTES:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0x80 <= code < 0xA0:  # C1 controls: \u, so \x80 stays the undecodable byte 0x80
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


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
        else:
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
