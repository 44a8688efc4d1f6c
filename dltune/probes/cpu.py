"""The CPUs' frequency scaling (cpufreq in sysfs): the governor and energy preference of each CPU."""

from __future__ import annotations

import re
from collections import Counter

from dltune.probes.hostfs import HostFS
from dltune.snapshot import CpuFrequency

CPUFREQ = "/sys/devices/system/cpu"
_CPU_DIR = re.compile(r"cpu[0-9]+")


def read_cpu_frequency(fs: HostFS) -> CpuFrequency | None:
    """Each CPU's cpufreq governor and energy-performance preference; None where no CPU has cpufreq
    (a VM or container without it, or frequency left to the firmware)."""
    try:
        cpus = sorted(p.name for p in fs.path(CPUFREQ).iterdir() if _CPU_DIR.fullmatch(p.name))
    except OSError:
        return None
    settings: Counter[tuple[str, str]] = Counter()
    driver = None
    for cpu in cpus:
        base = f"{CPUFREQ}/{cpu}/cpufreq"
        governor = fs.read_stripped(f"{base}/scaling_governor") or ""
        if not governor:
            continue
        settings[(governor, fs.read_stripped(f"{base}/energy_performance_preference") or "")] += 1
        driver = driver or fs.read_stripped(f"{base}/scaling_driver") or None
    if not settings:
        return None
    governors: Counter[str] = Counter()
    for (governor, _preference), count in settings.items():
        governors[governor] += count
    return CpuFrequency(driver, dict(governors), dict(settings))
