"""The tuning ledger: what each role bought on this node, measured before and after it ran
(`dltune ledger`, run by dltune.cluster.site with `dltune_ledger: true`). Plain data and the one
comparison rule; the measurements are dltune.bench.io_cost's, the files live beside the manifests
(``<manifest dir>/ledger/<role>.before.json`` while a site run is between its two phases, then
``<role>.json``), the audit reports them (system.tuning_ledger) and `dltune report` adds them up.

Each phase measures, round by round, the node as it is and beside it a reference the role cannot
change (the same reads with O_NOATIME; the same scratch work in a tmpfs): what is compared between
the phases is the share of the two, so that the machine's own speed, which moves between phases
minutes apart (a shared host, another job, the CPU's clock), is no part of a role's change. A change
is a gain or a loss only beyond the measurement's noise: NOISE_STANDARD_ERRORS standard errors of the
difference of the two phases' medians (each from its rounds' median absolute deviation and their
number), and at least NOISE_FLOOR of the value before; within it, the entry says "within noise",
never a gain. Where a phase has no reference (no tmpfs at /dev/shm, a
GPU's TFLOPS, an entry of an older dltune) the rates themselves are compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dltune.schema import of, optional

LEDGER_SUBDIR = "ledger"
# The least change that counts: an untuned lab node measured -1% between two phases whose rounds
# deviated by 0.5%; two healthy H200 machines measured 3% apart on the same bench (cluster.py).
NOISE_FLOOR = 0.03
# How many standard errors of the difference of the phases' medians a change must pass. Measured here
# on an unchanged ext4 disk (relatime), 15 rounds a phase, 30-40 pairs of phases each: reads moved
# beyond three in 5 of 40 (up to 3.5, 4.8%), scratch work with its writeback on the disk in 3 of 30
# (up to 3.3, 22%); beyond four in none. A lab node's strictatime -> noatime moved its share by ~18%,
# ten and more of them.
NOISE_STANDARD_ERRORS = 4
# A median's standard error from the rounds' median absolute deviation: MAD x 1.4826 estimates the
# standard deviation of normal rounds, and a median of n of them varies by 1.2533 sd / sqrt(n).
MEDIAN_ERROR_PER_MAD = 1.4826 * 1.2533
LEDGER_SCHEMA_VERSION = 1
GAIN, LOSS, WITHIN_NOISE, NOT_BEFORE = "gain", "loss", "within noise", "not measured before"
# What each role's change is measured by (dltune ledger --role).
ROLE_MEASURES = {
    "data_disks": "small-file reads",  # each data disk: files/s of small-file reads as mounted
    "tmpfs_tmp": "scratch files in /tmp",  # files/s of create, write, read back, remove in /tmp
    "nvidia_driver": "GPU matmul",  # the GPU smoke: TFLOPS of the first GPU's matmul burst (PyTorch)
}
ENTRY_SCHEMA = of(
    dict,
    keys={
        "schema": of(int, minimum=1),
        "role": of(str, choices=tuple(ROLE_MEASURES)),
        "after_time": of(str),
        "not_measured": optional(dict, items=of(str, max_length=500)),
        "changes": of(
            list,
            max_length=64,
            items=of(
                dict,
                keys={
                    "what": of(str, max_length=300),
                    "kind": of(str, choices=tuple(ROLE_MEASURES.values())),
                    "verdict": of(str, choices=(GAIN, LOSS, WITHIN_NOISE, NOT_BEFORE)),
                    "after_rate": of(int, float, minimum=0),
                    "before_rate": optional(int, float, type(None), minimum=0),
                    "change": optional(int, float, type(None)),
                    "noise": optional(int, float, type(None), minimum=0),
                    "before_share": optional(int, float, type(None), minimum=0),
                    "after_share": optional(int, float, type(None), minimum=0),
                    "reference_is": optional(str, max_length=300),
                    "reference_change": optional(int, float, type(None)),
                },
            ),
        ),
    },
)


def median_and_deviation(values: Sequence[float]) -> tuple[float, float]:
    """The values' median and their median absolute deviation from it."""
    import statistics  # the audit imports this module for its schema alone: not worth its start-up

    middle = statistics.median(values)
    return middle, statistics.median(abs(v - middle) for v in values)


def summarise(
    rates: Sequence[float], reference: Sequence[float] = (), reference_is: str = ""
) -> dict[str, Any]:
    """One phase's measurement: each round's rate, their median and median absolute deviation; with a
    reference measured in the same rounds, also each round's share of it (rate / reference), their
    median and deviation."""
    middle, deviation = median_and_deviation(rates)
    summary: dict[str, Any] = {
        "rates": [round(r, 3) for r in rates],
        "median": round(middle, 3),
        "mad": round(deviation, 3),
    }
    if reference and len(reference) == len(rates) and all(r > 0 for r in reference):
        shares = [rate / ref for rate, ref in zip(rates, reference, strict=True)]
        share, share_deviation = median_and_deviation(shares)
        summary["reference"] = {
            "is": reference_is,
            "rates": [round(r, 3) for r in reference],
            "median": round(median_and_deviation(reference)[0], 3),
        }
        summary |= {"shares": [round(v, 4) for v in shares], "share": round(share, 4),
                    "share_mad": round(share_deviation, 4)}  # fmt: skip
    return summary


def _standard_error(deviation: float, values: object) -> float:
    """The standard error of a phase's median, from its median absolute deviation and its rounds."""
    rounds = len(values) if isinstance(values, list) and values else 1
    return float(MEDIAN_ERROR_PER_MAD * deviation / rounds**0.5)


def _shared(phase: Mapping[str, Any]) -> tuple[float, float, Mapping[str, Any]] | None:
    """The phase's share of its reference, that share's standard error and the reference; None
    without."""
    reference = phase.get("reference")
    if not isinstance(reference, Mapping):
        return None
    try:
        share, deviation = float(phase["share"]), float(phase["share_mad"])
        reference_median = float(reference["median"])
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in (share, deviation, reference_median)):
        return None
    if share <= 0 or reference_median <= 0:
        return None
    return share, _standard_error(deviation, phase.get("shares")), reference


def _measured(phase: Mapping[str, Any] | None) -> bool:
    """Whether a phase holds a rate to compare with: a finite median and deviation (a before-file from
    an older or damaged writer may hold none, or NaN, which JSON admits)."""
    if not isinstance(phase, Mapping) or not phase:
        return False
    try:
        median, deviation = float(phase["median"]), float(phase["mad"])
    except (KeyError, TypeError, ValueError):
        return False
    return math.isfinite(median) and math.isfinite(deviation) and median >= 0


def compare(
    what: str, kind: str, unit: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> dict[str, Any]:
    """One measure's change from before to after the role: a gain or a loss beyond the noise, or
    within it; "not measured before" where the first phase had nothing to measure (a new mount) or
    holds no finite rate.
    Where both phases have a reference, the change is that of the share of it (the node's own speed
    taken out); else that of the rates."""
    change: dict[str, Any] = {
        "what": what,
        "kind": kind,
        "unit": unit,
        "after_rate": after["median"],
        "after": after,
    }
    if before is None or not _measured(before):
        return change | {"verdict": NOT_BEFORE, "before_rate": None, "change": None, "noise": None}
    then, now = _shared(before), _shared(after)
    if then is not None and now is not None:
        base, value = then[0], now[0]
        errors = (then[1], now[1])
        change |= {
            "before_share": base,
            "after_share": value,
            "reference_is": str(now[2].get("is", "")),
            "reference_change": round(float(now[2]["median"]) / float(then[2]["median"]) - 1, 4),
        }
    else:
        base, value = float(before["median"]), float(after["median"])
        errors = (
            _standard_error(float(before["mad"]), before.get("rates")),
            _standard_error(float(after["mad"]), after.get("rates")),
        )
    noise = max(NOISE_STANDARD_ERRORS * (errors[0] ** 2 + errors[1] ** 2) ** 0.5, NOISE_FLOOR * base)
    difference = value - base
    relative = difference / base if base > 0 else None
    verdict = (
        WITHIN_NOISE if abs(difference) <= noise or relative is None else GAIN if difference > 0 else LOSS
    )
    return change | {
        "before": before,
        "before_rate": float(before["median"]),
        "change": None if relative is None else round(relative, 4),
        "noise": round(noise / base, 4) if base > 0 else None,
        "verdict": verdict,
    }


def said(change: Mapping[str, Any]) -> str:
    """ "small-file reads /data +35% (1234 -> 1666 files/s, noise +-3%)", or within noise, said so; with
    a reference, the share of it before and after, and the node's own change where it is beyond the
    noise (why the rates moved when the role changed nothing)."""
    what, unit = change["what"], change.get("unit", "")
    if change["verdict"] == NOT_BEFORE:
        return f"{what}: {change['after_rate']:.0f} {unit} after (nothing to measure before)"
    rates = f"{change['before_rate']:.0f} -> {change['after_rate']:.0f} {unit}"
    noise = f"noise +-{change['noise']:.0%}"
    if change.get("before_share") is not None and change.get("after_share") is not None:
        reference = change.get("reference_is") or "the reference"
        shares = f"{change['before_share']:.0%} -> {change['after_share']:.0%}"
        figures = f"{shares} of {reference}, {noise}; {rates}"
        node = change.get("reference_change")
        if isinstance(node, (int, float)) and abs(node) > (change["noise"] or 0):
            figures += f", the node itself {node:+.0%}"
    else:
        figures = f"{rates}, {noise}"
    if change["verdict"] == WITHIN_NOISE:
        return f"{what}: within noise ({figures})"
    return f"{what} {change['change']:+.0%} ({figures})"
