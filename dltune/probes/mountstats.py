"""``/proc/self/mountstats``: per NFS mount, the options the kernel uses and its RPC transport.

The transport line (``xprt: tcp <srcport> <bind> <connects> ...``) names the client's source port of
the mount's TCP connection, so two mounts that share one connection show the same port: the very
thing role nfs_multivip avoids by mounting once per VIP. Blocks start at ``device ... mounted on ...
with fstype ...``; other lines belong to the block above (including continuation lines such as a
FreeBSD server's multi-line ``impl_id``); lines before the first block are counted, not guessed at.
"""

from __future__ import annotations

import re

from dltune.probes.mounts import unescape
from dltune.records import record
from dltune.snapshot import NfsMountStats, Transport
from dltune.text import decimal

_DEVICE = re.compile(
    r"^device (?P<device>\S+) mounted on (?P<mount>\S+) with fstype (?P<fstype>\S+)"
    r"(?: statvers=(?P<statvers>\S+))?"
)


@record(frozen=True)
class Mountstats:
    nfs: tuple[NfsMountStats, ...]
    other_mounts: int
    stray_lines: int  # lines outside any device block


def _transport(words: list[str]) -> Transport | None:
    if not words:
        return None
    numbers = [decimal(w) for w in words[1:]]
    protocol = words[0]
    if protocol in ("tcp", "udp"):
        port = numbers[0] if numbers else None
        connects = numbers[2] if protocol == "tcp" and len(numbers) > 2 else None
        return Transport(protocol, port, connects)
    return Transport(protocol, None, numbers[2] if len(numbers) > 2 else None)


def parse_mountstats(text: str) -> Mountstats:
    mounts: list[NfsMountStats] = []
    other = stray = 0
    current: dict[str, object] | None = None

    def flush() -> None:
        if current is not None:
            mounts.append(NfsMountStats(**current))  # type: ignore[arg-type]

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _DEVICE.match(line)
        if match:
            flush()
            current = None
            if match["fstype"].startswith("nfs"):
                current = {
                    "device": unescape(match["device"]),
                    "mount_point": unescape(match["mount"]),
                    "fstype": match["fstype"],
                    "statvers": match["statvers"],
                    "options": {},
                    "age_seconds": None,
                    "transports": (),
                }
            else:
                other += 1
            continue
        if current is None:
            stray += 1  # before the first block, or inside a block that carries no statistics
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "opts":
            current["options"] = dict(
                (opt.partition("=")[0], opt.partition("=")[2]) for opt in value.split(",") if opt
            )
        elif key == "age" and decimal(value) is not None:
            current["age_seconds"] = decimal(value)
        elif key == "xprt":
            transport = _transport(value.split())
            if transport is not None:
                current["transports"] = (*current["transports"], transport)  # type: ignore[misc]
    flush()
    return Mountstats(tuple(mounts), other, stray)
