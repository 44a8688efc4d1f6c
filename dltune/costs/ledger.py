"""The tuning ledger: what each role bought on this node, measured before and after it ran
(`dltune ledger`, run by dltune.cluster.site with `dltune_ledger: true`). Plain data and the one
comparison rule; the measurements are dltune.bench.io_cost's, the files live beside the manifests
(``<manifest dir>/ledger/<role>.before.json`` while a site run is between its two phases, then
``<role>.json``), the audit reports them (system.tuning_ledger) and `dltune report` adds them up.

A change is a gain or a loss only beyond the measurement's noise: twice the larger phase's median
absolute deviation over its rounds, and at least NOISE_FLOOR of the rate before; within it, the entry
says "within noise", never a gain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dltune.schema import of, optional

LEDGER_SUBDIR = "ledger"
# The least change that counts: an untuned lab node measured -1% between two phases whose rounds
# deviated by 0.5%; two healthy H200 machines measured 3% apart on the same bench (cluster.py).
NOISE_FLOOR = 0.03
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
                },
            ),
        ),
    },
)


def summarise(rates: Sequence[float]) -> dict[str, Any]:
    """One phase's measurement: each round's rate, their median and median absolute deviation."""
    import statistics  # the audit imports this module for its schema alone: not worth its start-up

    middle = statistics.median(rates)
    return {
        "rates": [round(r, 3) for r in rates],
        "median": round(middle, 3),
        "mad": round(statistics.median(abs(r - middle) for r in rates), 3),
    }


def compare(
    what: str, kind: str, unit: str, before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> dict[str, Any]:
    """One measure's change from before to after the role: a gain or a loss beyond the noise, or
    within it; "not measured before" where the first phase had nothing to measure (a new mount)."""
    change: dict[str, Any] = {
        "what": what,
        "kind": kind,
        "unit": unit,
        "after_rate": after["median"],
        "after": after,
    }
    if not before:
        return change | {"verdict": NOT_BEFORE, "before_rate": None, "change": None, "noise": None}
    base = float(before["median"])
    noise = max(2 * max(float(before["mad"]), float(after["mad"])), NOISE_FLOOR * base)
    difference = float(after["median"]) - base
    relative = difference / base if base > 0 else None
    verdict = (
        WITHIN_NOISE if abs(difference) <= noise or relative is None else GAIN if difference > 0 else LOSS
    )
    return change | {
        "before": before,
        "before_rate": base,
        "change": None if relative is None else round(relative, 4),
        "noise": round(noise / base, 4) if base > 0 else None,
        "verdict": verdict,
    }


def said(change: Mapping[str, Any]) -> str:
    """ "small-file reads /data +35% (1234 -> 1666 files/s, noise +-3%)", or within noise, said so."""
    what, unit = change["what"], change.get("unit", "")
    if change["verdict"] == NOT_BEFORE:
        return f"{what}: {change['after_rate']:.0f} {unit} after (nothing to measure before)"
    figures = (
        f"{change['before_rate']:.0f} -> {change['after_rate']:.0f} {unit}, noise +-{change['noise']:.0%}"
    )
    if change["verdict"] == WITHIN_NOISE:
        return f"{what}: within noise ({figures})"
    return f"{what} {change['change']:+.0%} ({figures})"
