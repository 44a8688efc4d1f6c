"""system.cpu_governor on sysfs trees: the performance governor, or powersave with the energy
preference "performance" (intel_pstate/amd-pstate active mode), passes; anything that lets a CPU
clock down between bursts warns, counted per setting; no cpufreq at all is a skip that says why."""

from __future__ import annotations

from pathlib import Path

from dltune.checks.system import cpu_governor
from dltune.model import Status
from dltune.probes import collect_snapshot


def tree(root: Path, cpus: list[tuple[str, str | None]], driver: str = "intel_pstate") -> Path:
    for index, (governor, preference) in enumerate(cpus):
        base = root / f"sys/devices/system/cpu/cpu{index}/cpufreq"
        base.mkdir(parents=True)
        (base / "scaling_governor").write_text(governor + "\n")
        (base / "scaling_driver").write_text(driver + "\n")
        if preference is not None:
            (base / "energy_performance_preference").write_text(preference + "\n")
    (root / "sys/devices/system/cpu/cpufreq").mkdir(parents=True, exist_ok=True)  # not a CPU
    return root


def judged(root: Path) -> tuple[Status, str]:
    result = cpu_governor(collect_snapshot(root, areas=["system"]))
    return result.status, result.summary


def test_performance_everywhere_passes(tmp_path: Path) -> None:
    status, summary = judged(tree(tmp_path, [("performance", "performance")] * 4))
    assert status is Status.PASS and "all 4 CPUs" in summary


def test_powersave_with_a_performance_preference_is_fine(tmp_path: Path) -> None:
    assert judged(tree(tmp_path, [("powersave", "performance")] * 2))[0] is Status.PASS


def test_each_slow_setting_is_counted(tmp_path: Path) -> None:
    cpus = [("performance", None), ("powersave", "balance_performance"), ("powersave", "balance_performance")]
    status, summary = judged(tree(tmp_path, [*cpus, ("schedutil", None)], driver="acpi-cpufreq"))
    assert status is Status.WARN
    assert (
        summary.startswith("3 of 4 CPUs")
        and "2 on powersave (energy preference balance_performance)" in summary
    )
    assert "1 on schedutil" in summary


def test_no_cpufreq_skips_saying_why(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/cpu/cpu0").mkdir(parents=True)
    status, summary = judged(tmp_path)
    assert status is Status.SKIP and "no cpufreq" in summary
