"""Whether the system clock is synchronised (systemd's timedatectl), and whether this is a container
that shares its host's clock (systemd-detect-virt)."""

from __future__ import annotations

import re

from dltune.probes.runner import CommandRunner
from dltune.snapshot import TimeSync

# `timedatectl show` (systemd 239+): NTPSynchronized=yes. `timedatectl status`, older and newer
# wordings: "NTP synchronized: yes" (up to 235), "System clock synchronized: yes" (236+).
_SHOW = re.compile(r"^NTPSynchronized=(yes|no)$", re.MULTILINE)
_STATUS = re.compile(r"^\s*(?:NTP|System clock) synchronized:\s*(yes|no)\s*$", re.MULTILINE)


def parse_timedatectl(text: str) -> bool | None:
    """Synchronised or not, from either output of timedatectl; None when it does not say."""
    match = _SHOW.search(text) or _STATUS.search(text)
    return None if match is None else match.group(1) == "yes"


def read_time_sync(runner: CommandRunner, timeout: float = 5.0) -> TimeSync:
    """The clock's synchronisation as timedatectl reports it (systemd-timedated answers over D-Bus: a
    wedged bus costs `timeout`, not the audit)."""
    virt = runner.run(["systemd-detect-virt", "--container"], timeout)
    container = virt.stdout.strip() if virt.ok and virt.stdout.strip() not in ("", "none") else None
    if container is not None:
        return TimeSync(container=container)
    for argv in (["timedatectl", "show"], ["timedatectl", "status"]):  # `show` is systemd 239+
        done = runner.run(argv, timeout)
        if done.ok and (synced := parse_timedatectl(done.stdout)) is not None:
            return TimeSync(synchronized=synced, source=" ".join(argv))
    reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"rc {done.returncode}"
    return TimeSync(error=f"timedatectl could not say ({reason[:200]})")
