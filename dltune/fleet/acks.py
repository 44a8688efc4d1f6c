"""Operators' acknowledgements: a finding that is known and accepted for a while (a GPU kept in service
while its RMA is pending, a power cap lowered by policy). While an acknowledgement lasts, the matching
result is shown as acknowledged (``Result.acknowledged``), a fail reads as ``warn`` and is no longer
critical: it does not drain the node, the critical-failure alert does not fire, and every output
(audit, report, metrics) says who accepted it, why and until when. It ends by itself at its ``until``;
there is no acknowledgement without an end (at most ``MAX_DAYS`` ahead).

The file is the node's own (``/etc/dltune/acks.json``, written by `dltune ack` as root, 0644 so that the
audit of an ordinary user reads it too). A file of another user, a link, or one that others may write
is not used: a user must not be able to silence a finding. An acknowledgement names one check, and
optionally one subject (a GPU "2:GPU-...", a port "mlx5_0/1", a mount point); without a subject it
covers every subject of that check on this node."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from dltune.model import InputError, Result, Status
from dltune.records import record, replace

DEFAULT_ACK_FILE = "/etc/dltune/acks.json"
MAX_DAYS = 90  # an acknowledgement is a decision for a while, not forever: renew it to keep it
MAX_ACKS = 500  # more is not one node's list of accepted findings
MAX_TEXT = 300  # who / why: one line each
_DURATION = re.compile(r"([0-9]{1,5})([mhdw])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@record(frozen=True)
class Ack:
    check: str
    subject: str | None  # None: every subject of the check
    by: str
    why: str
    since: float  # epoch seconds
    until: float

    def covers(self, result: Result) -> bool:
        return result.id == self.check and (self.subject is None or result.subject == self.subject)

    def in_force(self, now: float) -> bool:
        return self.since - 60 <= now < self.until

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "subject": self.subject,
            "by": self.by,
            "why": self.why,
            "since": self.since,
            "until": self.until,
        }

    @classmethod
    def from_json(cls, data: Any) -> Ack:
        if not isinstance(data, dict):
            raise ValueError("an acknowledgement is not a JSON object")
        check, subject, by, why = (data.get(k) for k in ("check", "subject", "by", "why"))
        since, until = data.get("since"), data.get("until")
        if not (isinstance(check, str) and isinstance(by, str) and isinstance(why, str)):
            raise ValueError("check, by and why must be text")
        if subject is not None and not isinstance(subject, str):
            raise ValueError("subject must be text or null")
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in (since, until)):
            raise ValueError("since and until must be times (epoch seconds)")
        return cls(check, subject, by, why, float(since), float(until))  # type: ignore[arg-type]

    def shown(self) -> dict[str, Any]:
        """What a result carries as ``acknowledged`` (with the status it had, added by ``apply``)."""
        return {
            "by": self.by,
            "why": self.why,
            "since": iso(self.since),
            "until": iso(self.until),
            "until_timestamp": self.until,
        }


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_until(text: str, now: float, hint: str = "--until") -> float:
    """When an acknowledgement ends: a duration from now ("12h", "7d", "2w", "90m") or a UTC date or
    time ("2026-12-24", "2026-12-24T18:00"); in the future and at most MAX_DAYS ahead (InputError
    naming ``hint`` otherwise)."""
    given = text.strip()
    found = _DURATION.fullmatch(given)
    if found:
        until = now + int(found.group(1)) * _UNIT_S[found.group(2)]
    else:
        try:
            parsed = datetime.fromisoformat(given.removesuffix("Z"))
        except ValueError:
            raise InputError(
                f"{hint}={text!a}: give a duration (90m, 12h, 7d, 2w) or a UTC date (2026-12-24 or "
                "2026-12-24T18:00)"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        until = parsed.timestamp()
    if until <= now:
        raise InputError(f"{hint}={text!a} is not in the future")
    if until > now + MAX_DAYS * 86400:
        raise InputError(
            f"{hint}={text!a} is more than {MAX_DAYS} days ahead: acknowledge for less, renew later"
        )
    return until


def one_line(value: str, name: str) -> str:
    """``value`` as one line of at most MAX_TEXT characters; InputError naming ``name`` otherwise."""
    if not value.strip():
        raise InputError(f"{name} is empty: say who accepted the finding and why")
    if len(value) > MAX_TEXT or any(ch in value for ch in "\n\r\x00"):
        raise InputError(f"{name}: one line of at most {MAX_TEXT} characters")
    return value.strip()


def load(path: str) -> tuple[list[Ack], str]:
    """The acknowledgements in ``path`` and a note when the file was not used ("" when used or absent).
    Used only when it is a regular file of root's (or of this user's: a fixture tree) that no one else
    may write, in a directory no one else may write: otherwise a user could silence a finding."""
    from dltune.files import safeio

    trusted = {0, os.geteuid()}
    try:
        parent = os.lstat(os.path.dirname(os.path.abspath(path)))
        st = os.lstat(path)
    except FileNotFoundError:
        return [], ""
    except OSError as exc:
        return [], f"acknowledgements {path} not used: {exc.strerror}"
    if parent.st_uid not in trusted or parent.st_mode & 0o022 or not stat.S_ISDIR(parent.st_mode):
        return [], f"acknowledgements {path} not used: its directory may be written by others"
    if not stat.S_ISREG(st.st_mode) or st.st_uid not in trusted or st.st_mode & 0o022:
        return [], f"acknowledgements {path} not used: not a regular file of root's that only root may write"
    try:
        data = safeio.load_file(path, max_bytes=1 << 20)
        if not isinstance(data, dict) or not isinstance(data.get("acks"), list):
            raise ValueError("not an object with a list 'acks'")
        return [Ack.from_json(item) for item in data["acks"][:MAX_ACKS]], ""
    except (OSError, ValueError) as exc:
        return [], f"acknowledgements {path} not used: {exc}"


def save(path: str, acks: Sequence[Ack]) -> None:
    """Written by rename (root-safe, dltune.files.dirfd.write_atomically), 0644 in a 0755 directory."""
    import json

    from dltune.files.dirfd import write_atomically

    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
    document = {"schema_version": 1, "acks": [ack.to_json() for ack in acks]}
    write_atomically(path, json.dumps(document, indent=1) + "\n", mode=0o644)


def added(acks: Sequence[Ack], new: Ack, now: float) -> list[Ack]:
    """``acks`` without those that ended and without the one ``new`` replaces (same check and subject),
    then ``new``; at most MAX_ACKS."""
    kept = [a for a in acks if a.until > now and (a.check, a.subject) != (new.check, new.subject)]
    if len(kept) >= MAX_ACKS:
        raise InputError(f"{MAX_ACKS} acknowledgements in force on this node already: clear some first")
    return [*kept, new]


def removed(acks: Sequence[Ack], check: str, subject: str | None, now: float) -> tuple[list[Ack], int]:
    """``acks`` without the ones for ``check`` (and ``subject``, when given) and without those that
    ended; how many in force were removed."""
    gone = [a for a in acks if a.check == check and (subject is None or a.subject == subject)]
    kept = [a for a in acks if a not in gone and a.until > now]
    return kept, sum(1 for a in gone if a.until > now)


def apply(results: Sequence[Result], acks: Sequence[Ack], now: float | None = None) -> list[Result]:
    """``results`` with each fail or warn that an acknowledgement in force covers marked so: a fail
    becomes a warn that is not critical (no drain, no alert), its summary says who accepted it and
    until when. Passes, errors and skips are never changed: an acknowledgement accepts a finding, it
    does not hide a check that cannot judge."""
    now = time.time() if now is None else now
    live = [a for a in acks if a.in_force(now)]
    if not live:
        return list(results)
    marked = []
    for result in results:
        ack = next((a for a in live if a.covers(result)), None)
        if ack is None or result.status not in (Status.FAIL, Status.WARN):
            marked.append(result)
            continue
        marked.append(
            replace(
                result,
                status=Status.WARN,
                critical=False,
                summary=f"acknowledged by {ack.by} until {iso(ack.until)} ({ack.why}): {result.summary}",
                acknowledged={**ack.shown(), "was": result.status.value, "was_critical": result.critical},
            )
        )
    return marked
