"""dpkg's package database and the kernel log, as the driver, gpu and fabric areas need them."""

from __future__ import annotations

import os
import re

from dltune.probes.aer_log import parse_aer_log
from dltune.probes.hostfs import HostFS
from dltune.probes.nvrm import parse_nvrm
from dltune.probes.runner import CommandRunner
from dltune.snapshot import KernelLog, Package

DPKG_STATUS = "/var/lib/dpkg/status"
# The packages that make up an installed NVIDIA driver (userspace, kernel modules, Fabric Manager).
DRIVER_PACKAGE = re.compile(
    r"^(nvidia-|libnvidia-|linux-modules-nvidia-|linux-objects-nvidia-|linux-signatures-nvidia-"
    r"|xserver-xorg-video-nvidia-)"
)
# A field line that may name a driver package: only the stanzas holding one are parsed (a node's status
# file has thousands of packages; splitting every one into fields cost the audit milliseconds).
_CANDIDATE_LINE = re.compile(
    r"Package:[ \t]*(?:nvidia-|libnvidia-|linux-modules-nvidia-|linux-objects-nvidia-"
    r"|linux-signatures-nvidia-|xserver-xorg-video-nvidia-)"
)


def _candidate_stanzas(text: str) -> list[str]:
    """The stanzas (separated by a blank line, as dpkg writes them) with a driver package's name line.
    Every driver package's name holds "nvidia-": only the lines holding it are tried."""
    stanzas: dict[int, str] = {}  # by where each starts: a stanza with two name lines is read once
    found = text.find("nvidia-")
    while found >= 0:
        line_start = text.rfind("\n", 0, found) + 1
        line_end = text.find("\n", found)
        line_end = len(text) if line_end < 0 else line_end
        if _CANDIDATE_LINE.match(text, line_start, line_end):
            before = text.rfind("\n\n", 0, line_start + 1)
            start = before + 2 if before >= 0 else 0
            end = text.find("\n\n", line_start)
            stanzas[start] = text[start : end if end >= 0 else len(text)]
        found = text.find("nvidia-", line_end)
    return list(stanzas.values())


def read_driver_packages(fs: HostFS) -> tuple[Package, ...] | None:
    """Installed NVIDIA driver packages from dpkg's status file; None when there is no dpkg here."""
    try:
        text = fs.read_text(DPKG_STATUS)
    except OSError:
        return None
    found = []
    for stanza in _candidate_stanzas(text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        name, status = fields.get("Package", ""), fields.get("Status", "").split()
        # Status: "<want> <error-flag> <state>", e.g. "hold ok installed", "install ok installed".
        if DRIVER_PACKAGE.match(name) and len(status) == 3 and status[2] == "installed":
            found.append(Package(name, fields.get("Version", ""), held=status[0] == "hold"))
    return tuple(sorted(found, key=lambda p: p.name))


def read_kernel_log(fs: HostFS, runner: CommandRunner, euid: int | None = None) -> KernelLog:
    """The kernel ring buffer (since boot, as far as it reaches). With kernel.dmesg_restrict=1 only root
    may read it: an ordinary user gets the reason instead, and the check says `skip`."""
    euid = os.geteuid() if euid is None else euid
    try:
        restricted = fs.read_text("/proc/sys/kernel/dmesg_restrict").strip() == "1"
    except OSError:
        restricted = False
    if restricted and euid != 0:
        return KernelLog(None, "needs root (kernel.dmesg_restrict=1)")
    done = runner.run(["dmesg", "--kernel", "--notime"])
    if not done.ok:
        return KernelLog(None, f"dmesg failed (rc={done.returncode}): {done.stderr.strip()}")
    return kernel_log_of(done.stdout)


def kernel_log_of(text: str) -> KernelLog:
    """A kernel log as read, with the NVIDIA driver's GPU events and the PCIe AER errors parsed from it."""
    return KernelLog(text, nvrm=parse_nvrm(text), aer=parse_aer_log(text))
