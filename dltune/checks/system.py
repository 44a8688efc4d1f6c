"""Area ``system``: node-wide state: a pending reboot, the audit's own deadline, the CPUs' frequency
governor, the clock's synchronisation, host memory errors."""

from __future__ import annotations

from dltune.checks import check, counter_rises
from dltune.model import FailureClass, Result, Status
from dltune.snapshot import UNATTRIBUTED_MEMORY, Snapshot


@check("system.reboot_required")
def reboot_required(snap: Snapshot) -> Result:
    if not snap.reboot.required:
        return Result("system.reboot_required", Status.PASS, "no reboot pending")
    named = ", ".join(snap.reboot.packages) or "nothing named in /run/reboot-required.pkgs"
    return Result(
        "system.reboot_required",
        Status.WARN,
        f"a reboot is pending for: {named}",
        evidence={"reboot_required": True, "requested_by": list(snap.reboot.packages)},
        remedy="reboot the node (drain it first on a Slurm cluster) so the pending settings take effect",
    )


# One probe late once (a busy NFS server, a slow NVML call) is not a broken node: transient.
@check("system.audit_timeout", failure=FailureClass.TRANSIENT)
def audit_timeout(snap: Snapshot) -> Result:
    """The audit's own deadline (--timeout): what it could not finish is named, never silently left out."""
    if not snap.missed:
        return Result("system.audit_timeout", Status.PASS, "every probe finished within the audit's time")
    return Result(
        "system.audit_timeout",
        Status.FAIL,
        f"the audit ran out of time; not finished: {'; '.join(snap.missed.values())}",
        evidence={"not_finished": dict(snap.missed)},
        remedy="something on the node does not answer (see the failing checks); find it with "
        "`dltune audit --only <area> --verbose` and drain the node if it is the driver or a mount",
        critical=True,
    )


# A CPU that feeds GPUs must not clock down between bursts: the performance governor, or powersave
# with the energy preference "performance" (intel_pstate/amd-pstate active mode: the same request).
FAST = ("performance", "powersave:performance")
GOVERNOR_REMEDY = (
    "set the performance governor on every CPU (cpupower frequency-set -g performance, or tuned's "
    "throughput-performance profile; some BIOSes also need their performance power profile)"
)


@check("system.cpu_governor")
def cpu_governor(snap: Snapshot) -> Result:
    freq = snap.cpu_frequency
    if freq is None:
        return Result(
            "system.cpu_governor",
            Status.SKIP,
            "no cpufreq on this node (a VM or container without it, or the firmware sets the frequency)",
        )
    total = sum(freq.settings.values())
    if not total:
        return Result("system.cpu_governor", Status.SKIP, "cpufreq lists no CPU with a governor")
    slow = {
        f"{governor}" + (f" (energy preference {preference})" if preference else ""): count
        for (governor, preference), count in sorted(freq.settings.items())
        if governor != "performance" and f"{governor}:{preference}" not in FAST
    }
    evidence = {
        "driver": freq.driver,
        "governors": dict(freq.governors),
        "settings": {f"{g}:{p}" if p else g: n for (g, p), n in sorted(freq.settings.items())},
    }
    if slow:
        described = ", ".join(f"{n} on {setting}" for setting, n in slow.items())
        return Result(
            "system.cpu_governor",
            Status.WARN,
            f"{sum(slow.values())} of {total} CPUs may clock down between bursts: {described}",
            evidence=evidence,
            remedy=GOVERNOR_REMEDY,
        )
    return Result(
        "system.cpu_governor",
        Status.PASS,
        ("the one CPU runs" if total == 1 else f"all {total} CPUs run")
        + f" for performance ({', '.join(sorted(freq.governors))})",
        evidence=evidence,
    )


@check("system.time_sync")
def time_sync(snap: Snapshot) -> Result:
    """Distributed training and Slurm (munge credentials) break on clock skew between nodes."""
    sync = snap.time_sync
    if sync.container is not None:
        return Result(
            "system.time_sync",
            Status.SKIP,
            f"a {sync.container} container: its clock is the host's, judge the host",
        )
    if sync.synchronized is None:
        return Result("system.time_sync", Status.SKIP, f"cannot tell: {sync.error}")
    if not sync.synchronized:
        return Result(
            "system.time_sync",
            Status.FAIL,
            "the system clock is not synchronised: nodes drift apart (Slurm's munge credentials and "
            "distributed training break on skew)",
            evidence={"source": sync.source},
            remedy="run an NTP client (systemd-timesyncd or chrony) against the site's time servers",
            shared_dependency="time source (NTP servers)",
        )
    return Result(
        "system.time_sync", Status.PASS, "the system clock is synchronised", evidence={"source": sync.source}
    )


MEMORY_FAIL_REMEDY = (
    "drain the node and replace the DIMM the controller's errors point to (`edac-util -v`, "
    "`ras-mc-ctl --errors`, the BMC's SEL); uncorrected memory errors can corrupt a job's data"
)
MACHINE_CHECK_REMEDY = (
    "decode the bank (`mcelog --client`, `ras-mc-ctl --errors`, the BMC's SEL): a memory bank's error needs "
    "the DIMM replaced, another bank's the CPU or device looked at"
)
MEMORY_WARN_REMEDY = (
    "watch the rate (`--previous`: a rise between audits); a DIMM logging corrected errors steadily "
    "is failing: schedule its replacement (`edac-util -v` names it)"
)


# long: one verdict per memory controller, from counters, log lines and the previous audit
@check("system.memory_errors")
def memory_errors(snap: Snapshot) -> list[Result]:
    """Corrected and uncorrected host memory errors per memory controller (EDAC counters since boot,
    the kernel log's EDAC and machine-check lines); corrected ones judged by their rise since the
    previous audit where there is one."""
    found = snap.memory_errors
    if not found.controllers:
        if found.edac:
            return [Result("system.memory_errors", Status.PASS, "EDAC reports no memory controller errors")]
        if not found.kernel_log_read:
            return [
                Result(
                    "system.memory_errors",
                    Status.SKIP,
                    "no EDAC driver loaded and the kernel log not readable: memory errors not visible",
                )
            ]
        return [
            Result(
                "system.memory_errors",
                Status.SKIP,
                "no EDAC driver loaded (no /sys/devices/system/edac/mc/mcN); none in the kernel log",
            )
        ]
    results = []
    for mc in found.controllers:
        counters = {"corrected": mc.corrected or 0, "uncorrected": mc.uncorrected or 0}
        rose = counter_rises(snap, "system.memory_errors", mc.name, counters, reset_is_new=True)
        evidence: dict[str, object] = {"counters": counters, "source": mc.source}
        if mc.driver:
            evidence["controller"] = mc.driver
        metrics = {k: float(v) for k, v in counters.items()}
        key = f"system.memory_errors|{mc.name}"
        where = (
            "machine checks no controller claims"
            if mc.name == UNATTRIBUTED_MEMORY
            else f"memory controller {mc.name}"
        )
        if counters["uncorrected"] and mc.name == UNATTRIBUTED_MEMORY and not mc.fatal:
            # A bank's status alone: maybe a cache or PCIe bank, or a leftover the firmware reports at
            # every boot; never a reason to drain by itself.
            status, remedy = Status.WARN, MACHINE_CHECK_REMEDY
            summary = f"{counters['uncorrected']} uncorrected machine check(s) no memory controller claims"
        elif counters["uncorrected"]:
            status, remedy = Status.FAIL, MEMORY_FAIL_REMEDY
            summary = f"{counters['uncorrected']} uncorrected memory error(s) on {where} since boot"
        elif counters["corrected"] and (key not in snap.previous or rose):
            status, remedy = Status.WARN, MEMORY_WARN_REMEDY
            since = f", {rose['corrected']} since the previous audit" if rose else " since boot"
            summary = f"{counters['corrected']} corrected memory error(s) on {where}{since}"
        else:
            status, remedy = Status.PASS, None
            summary = f"{where}: no memory error" + (
                f" since the previous audit ({counters['corrected']} corrected since boot)"
                if counters["corrected"]
                else ""
            )
        results.append(
            Result(
                "system.memory_errors",
                status,
                summary,
                subject=mc.name,
                evidence=evidence,
                metrics=metrics,
                critical=status is Status.FAIL,
                remedy=remedy,
            )
        )
    return results


@check("system.tuning_ledger")
def tuning_ledger(snap: Snapshot) -> list[Result]:
    """What each role changed on this node, as `dltune ledger` measured it before and after the role
    (dltune.cluster.site with dltune_ledger): reported, not judged (a change within the noise says so);
    a ledger file that cannot be used is a warning naming it."""
    from dltune.costs.ledger import said

    results = [
        Result(
            "system.tuning_ledger",
            Status.PASS,
            f"{entry['role']}: "
            + "; ".join(
                [said(c) for c in entry["changes"]]
                + [
                    f"{what}: not measured: {why}"
                    for what, why in sorted((entry.get("not_measured") or {}).items())
                ]
            ),
            subject=str(entry["role"]),
            evidence={
                "after_time": entry["after_time"],
                "before_time": entry.get("before_time"),
                "changes": [
                    {k: v for k, v in c.items() if k not in ("before", "after")} for c in entry["changes"]
                ],
                "not_measured": dict(entry.get("not_measured") or {}),
            },
        )
        for entry in snap.ledger
    ]
    results += [
        Result(
            "system.tuning_ledger",
            Status.WARN,
            problem,
            subject=where,
            remedy="run the site again with dltune_ledger: true (dltune ledger rewrites it)",
        )
        for where, problem in sorted(snap.ledger_problems.items())
    ]
    return results or [
        Result(
            "system.tuning_ledger", Status.SKIP, "no tuning ledger (dltune.cluster.site with dltune_ledger)"
        )
    ]
