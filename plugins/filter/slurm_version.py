"""Which Slurm role slurm_healthcheck writes slurm.conf for: the version `slurmd -V` / `slurmctld -V`
print, the lowest of a play's hosts, and which of the role's inputs need a newer Slurm. Pure functions,
unit-tested in tests/unit/test_slurm_healthcheck_versions.py on published outputs.

Every Slurm daemon and command prints ``PACKAGE_NAME SLURM_VERSION_STRING`` (SchedMD/slurm,
src/common/proc_args.c, print_slurm_version, the same from 20.11 to 26.05): "slurm 25.05.3" upstream,
"slurm-wlm 21.08.5" from Debian's and Ubuntu's packages, "slurm 26.05.0-0rc1" for a release candidate
(auxdir/slurm.m4 appends "-RELEASE" unless RELEASE is 1). slurmd -V and slurmctld -V print it from
their command-line parser, before slurm.conf is read: a slurm.conf Slurm refuses does not hide it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

VERSION_LINE = re.compile(r"^slurm(?:-wlm)?[ \t]+([0-9]{1,3})\.([0-9]{1,2})\.[0-9]+(?:-[^\s]+)?[ \t]*$", re.M)
# As an admin gives it (slurm_healthcheck_slurm_version): "25.11" or "25.11.3".
GIVEN = re.compile(r"^([0-9]{1,3})\.([0-9]{1,2})(?:\.[0-9]+)?$")

# The release that first reads each word the role may write (SchedMD/slurm, src/common/read_config.c
# at each tag). Before it, an unknown key stops every daemon and command ("Parsing error at
# unrecognized key", then "Unable to process configuration file"), and an unknown HealthCheckNodeState
# word is only logged and read as ANY: a start-only check would run at every interval on busy nodes.
SINCE: dict[str, tuple[int, int]] = {
    "HealthCheckTimeout": (26, 5),  # commit 74979c20b5, first in slurm-26-05-0-0rc1
    "NONDRAINED_IDLE": (23, 2),  # commit c097adf7b2, NEWS of 23.02
    "START_ONLY": (25, 11),  # commit ca30073e98, CHANGELOG/slurm-25.11.md
    "REBOOT_ONLY": (26, 5),  # commit 16eed7fb09, CHANGELOG/slurm-26.05.md
}


def _pair(version: object) -> tuple[int, int] | None:
    """(major, minor) of a version as slurm_version returns it ("25.11"), or None."""
    found = GIVEN.match(str(version))
    return (int(found.group(1)), int(found.group(2))) if found else None


def _text(pair: tuple[int, int]) -> str:
    return f"{pair[0]}.{pair[1]:02d}"


def slurm_version(text: object) -> str:
    """ "25.11" (major.minor as Slurm writes it) from the first version line of `slurmd -V`'s output,
    or from a version given as "25.11" or "25.11.3"; "" where there is none."""
    text = "" if text is None else str(text)
    found = VERSION_LINE.search(text) or GIVEN.match(text.strip())
    return _text((int(found.group(1)), int(found.group(2)))) if found else ""


def slurm_version_lowest(found: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Of entries {"host", "version", ...}, the one with the lowest version (the first of equals);
    entries without a version are left out; {} when none has one."""
    lowest: dict[str, Any] = {}
    lowest_pair: tuple[int, int] | None = None
    for entry in found:
        pair = _pair(entry.get("version", ""))
        if pair is not None and (lowest_pair is None or pair < lowest_pair):
            lowest, lowest_pair = dict(entry), pair
    return lowest


def slurm_healthcheck_needs(timeout: object, node_state: object) -> list[dict[str, str]]:
    """What the role would write that not every Slurm reads, from slurm_healthcheck_timeout and
    slurm_healthcheck_node_state: {variable, value, feature, since, text} each; [] for none."""
    needs = []
    seconds = str(timeout).strip()
    if seconds.isdigit() and int(seconds) > 0:
        needs.append(
            ("slurm_healthcheck_timeout", str(int(seconds)), "HealthCheckTimeout", "HealthCheckTimeout")
        )
    words = [word.strip() for word in str(node_state).upper().split(",")]
    for word in dict.fromkeys(word for word in words if word in SINCE):
        needs.append(("slurm_healthcheck_node_state", str(node_state), f"HealthCheckNodeState={word}", word))
    return [
        {
            "variable": variable,
            "value": value,
            "feature": feature,
            "since": _text(SINCE[key]),
            "text": f"{variable}={value} needs Slurm >= {_text(SINCE[key])} ({feature})",
        }
        for variable, value, feature, key in needs
    ]


def slurm_version_unmet(needs: Iterable[Mapping[str, Any]], version: object) -> list[dict[str, Any]]:
    """The needs (slurm_healthcheck_needs) that a Slurm of ``version`` lacks: all of them where the
    version is not one."""
    pair = _pair(version)
    lacked = []
    for need in needs:
        major, minor = str(need["since"]).split(".")
        if pair is None or pair < (int(major), int(minor)):
            lacked.append(dict(need))
    return lacked


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {
            "slurm_version": slurm_version,
            "slurm_version_lowest": slurm_version_lowest,
            "slurm_version_unmet": slurm_version_unmet,
            "slurm_healthcheck_needs": slurm_healthcheck_needs,
        }
