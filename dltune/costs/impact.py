"""What a finding costs in training time (`Result.impact`, ARCHITECTURE.md): the throughput it takes,
as a fraction of what (the matmul, the host-to-device copy, the training step, data loading, small-file
reads, the node), and that fraction as GPU-hours a day: the GPUs it touches x 24 x the fraction x the
node's use (``--gpu-use``, 1.0: a node that trains around the clock).

Pure judgement over a command's results (audit, bench, or both in `dltune check`), never the host:
the measurements it prices with are the bench's own results (``bench.matmul``, ``bench.host_link``,
``bench.train_real``, ``bench.input_gap``, ``bench.dataloader``) and the file-system costs `dltune check`
measured (``IoCost``, dltune.bench.io_cost). A price is ``measured`` (by this run, the figures in its
method) or ``estimated`` (a published coefficient, cited in its source); a finding no method prices,
or whose measurement is missing, says why (``unpriced``) instead of showing 0. Two findings of one
loss (gpu.clocks and bench.matmul of the same GPU) name the same ``scope``: a fleet's total counts
each scope of a node once (``node_loss``).

The methods and their sources are in docs/commands.md, "What a finding costs".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dltune.model import Result, Status
from dltune.records import record, replace

HOURS_A_DAY = 24.0
MEASURED, ESTIMATED, UNPRICED = "measured", "estimated", "unpriced"

# Findings whose cost is the matmul rate of their GPU: clocks held down, power capped or braked.
CLOCK_CLASS = frozenset(
    {"gpu.clocks", "gpu.thermal_power", "gpu.power_limit", "gpu.app_clocks", "bench.matmul"}
)
# Findings whose cost is the pinned host-to-device copy of their GPU, weighted by its share of a step.
PCIE_CLASS = frozenset({"gpu.pcie", "bench.host_link"})
# The dtype a GPU is priced by where several were measured: what training runs in, first.
PRICING_DTYPES = ("bf16", "fp16", "tf32", "fp32")
# The bench's real-data input is float32 images (torchvision's ToTensor), 3 channels.
INPUT_BYTES_PER_PIXEL = 3 * 4
# One NFS connection against the same volume read over several data addresses: NetApp's iotrap
# measured READ over a 10 Gb/s network at 718 MB/s (NFSv3, one connection) and 1100 MB/s over 4 data
# LIFs (github.com/mechanicker/iotrap, README: "NFSv3 vanilla: 718mb/s NFSv3 with iotrap: 1100mb/s").
ONE_CONNECTION_SHARE = 718 / 1100
ONE_CONNECTION_SOURCE = (
    "NetApp iotrap (github.com/mechanicker/iotrap, README): READ over 10 Gb/s, NFSv3 over one connection "
    "718 MB/s against 1100 MB/s over 4 data LIFs of the same volume"
)
NODE_OUT_SOURCE = (
    "a critical failure takes the node out of scheduling (dltune healthcheck drains it): none of its "
    "GPUs trains until it is fixed"
)


@record(frozen=True)
class IoCost:
    """A file-system cost `dltune check` measured on this node (dltune.bench.io_cost): ``fraction`` of
    ``of`` lost, how it was measured (``method``, with the figures); or why it could not be (``why``)."""

    fraction: float | None
    of: str
    method: str = ""
    why: str = ""


@record(frozen=True)
class Node:
    """What a price is multiplied by, and what it is measured with."""

    gpus: int  # the node's GPUs (NVML's count; the bench's devices where NVML gave none)
    use: float = 1.0  # the share of the day the node trains
    io_costs: Mapping[str, IoCost] | None = None  # keyed by the finding's subject (a mount point, /tmp)


def priced(
    fraction: float,
    of: str,
    scope: str,
    gpus: int,
    use: float,
    basis: str,
    method: str,
    source: str | None = None,
) -> dict[str, Any]:
    """An impact: the fraction of ``of`` lost, on ``gpus`` GPUs at ``use``, as GPU-hours a day."""
    share = min(1.0, max(0.0, fraction))
    impact: dict[str, Any] = {
        "basis": basis,
        "fraction": round(share, 4),
        "of": of,
        "scope": scope,
        "gpus": gpus,
        "use": use,
        "gpu_hours_per_day": round(gpus * HOURS_A_DAY * share * use, 3),
        "method": method,
    }
    if source:
        impact["source"] = source
    return impact


def unpriced(why: str, gpus: int | None = None, use: float | None = None) -> dict[str, Any]:
    """No price, and why: never a 0 that reads as "costs nothing". ``gpus`` and ``use``: what a price
    made later (dltune report, against the fleet) would be multiplied by."""
    impact: dict[str, Any] = {"basis": UNPRICED, "why": why}
    if gpus is not None:
        impact["gpus"] = gpus
    if use is not None:
        impact["use"] = use
    return impact


def is_finding(result: Result) -> bool:
    """What gets an impact: a warn or a fail (acknowledged ones too: they still cost), and a passing
    result that recommends a change (bench.dataloader's better setting)."""
    if result.status in (Status.WARN, Status.FAIL):
        return True
    return result.status is Status.PASS and result.remedy is not None and result.id == "bench.dataloader"


def uuid_of(subject: str | None) -> str | None:
    """The GPU UUID in an audit subject ("0:GPU-3b0c..."), or None."""
    _, _, uuid = (subject or "").partition(":")
    return uuid if uuid.startswith(("GPU-", "MIG-")) else None


def _gpu_key(result: Result) -> str | None:
    """The GPU a result is about: its UUID (audit subjects, bench evidence), else its torch device."""
    evidence_uuid = result.evidence.get("uuid") if isinstance(result.evidence, Mapping) else None
    if isinstance(evidence_uuid, str) and evidence_uuid:
        return evidence_uuid
    found = uuid_of(result.subject)
    if found:
        return found
    device = (result.subject or "").rpartition(":")[0] if result.id.startswith("bench.") else ""
    return device or None


def _matmul_loss(result: Result) -> tuple[float, str] | None:
    """The matmul rate a GPU loses against the most it should reach (a healthy card of its model, or
    the node's best GPU of its name), with the figures."""
    metrics = result.metrics
    tflops = metrics.get("tflops")
    shares = {
        "what a healthy card of its model reaches": metrics.get("fraction_of_achievable"),
        "the node's best GPU of its name": metrics.get("fraction_of_best"),
    }
    known = {k: v for k, v in shares.items() if isinstance(v, int | float) and v > 0}
    if not isinstance(tflops, int | float) or not known:
        return None
    against, share = min(known.items(), key=lambda item: item[1])
    dtype = result.evidence.get("dtype", "") if isinstance(result.evidence, Mapping) else ""
    return 1.0 - share, f"{dtype} matmul {tflops:.2f} TFLOPS, {share:.1%} of {against} (bench.matmul)"


def _by_gpu(results: Iterable[Result], check_id: str) -> dict[str, list[Result]]:
    found: dict[str, list[Result]] = {}
    for r in results:
        key = (
            _gpu_key(r) if r.id == check_id and r.status in (Status.PASS, Status.WARN, Status.FAIL) else None
        )
        if key:
            found.setdefault(key, []).append(r)
    return found


def _pricing_matmul(results: Sequence[Result]) -> Result | None:
    """Of one GPU's matmul results, the dtype training runs in first (bf16, fp16, tf32, fp32)."""
    by_dtype = {r.evidence.get("dtype"): r for r in results if isinstance(r.evidence, Mapping)}
    for dtype in PRICING_DTYPES:
        if dtype in by_dtype:
            return by_dtype[dtype]
    return results[0] if results else None


def _training_step(results: Sequence[Result]) -> tuple[float, int, int] | None:
    """(seconds per step, batch, image side) of the bench's real-data training run."""
    for r in results:
        if r.id != "bench.train_real":
            continue
        rate, batch = r.metrics.get("images_per_s"), r.evidence.get("batch")
        side = r.evidence.get("image_size")
        if isinstance(rate, int | float) and rate > 0 and isinstance(batch, int) and isinstance(side, int):
            return batch / rate, batch, side
    return None


@record(frozen=True)
class _Context:
    node: Node
    matmul: dict[str, list[Result]]
    host_link: dict[str, list[Result]]
    step: tuple[float, int, int] | None
    bench_devices: frozenset[str]

    @classmethod
    def of(cls, results: Sequence[Result], node: Node) -> _Context:
        devices = frozenset(
            (r.subject or "").split(":", 1)[0] for r in results if r.id.startswith("bench.train_")
        )
        return cls(node, _by_gpu(results, "bench.matmul"), _by_gpu(results, "bench.host_link"),
                   _training_step(results), devices)  # fmt: skip


def _clock_price(result: Result, ctx: _Context) -> dict[str, Any]:
    key = _gpu_key(result)
    mine = [result] if result.id == "bench.matmul" else ctx.matmul.get(key or "", [])
    pricing = result if result.id == "bench.matmul" else _pricing_matmul(mine)
    loss = _matmul_loss(pricing) if pricing else None
    if key is None or loss is None:
        ran = (
            "the bench ran on the CPU"
            if "cpu" in ctx.bench_devices
            else "the bench did not measure this GPU"
            if ctx.bench_devices
            else "no bench ran: dltune check measures it"
        )
        return unpriced(
            f"no matmul of this GPU to measure it by ({ran}); dltune report prices it against the "
            "fleet's figure for the same device",
            gpus=1,
            use=ctx.node.use,
        )
    fraction, method = loss
    return priced(fraction, "matmul", f"matmul:{key}", 1, ctx.node.use, MEASURED, method)


def _pcie_price(result: Result, ctx: _Context) -> dict[str, Any]:
    key = _gpu_key(result)
    links = [result] if result.id == "bench.host_link" else ctx.host_link.get(key or "", [])
    link = next((r for r in links if (r.subject or "").endswith("h2d pinned")), None)
    if link is None or key is None:
        return unpriced(
            "no pinned host-to-device copy of this GPU judged against its link (bench.host_link)", 1
        )
    rate, line = link.metrics.get("gb_s"), link.metrics.get("link_gb_s")
    healthy_share = link.evidence.get("healthy_share") if isinstance(link.evidence, Mapping) else None
    if not (isinstance(rate, int | float) and rate > 0 and isinstance(line, int | float)):
        return unpriced("the host-to-device copy has no rate to price with", 1)
    healthy = line * (healthy_share if isinstance(healthy_share, int | float) else 1.0)
    if ctx.step is None:
        return unpriced("no real-data training step (bench.train_real) to weigh the copy against", 1)
    step_s, batch, side = ctx.step
    size = batch * side * side * INPUT_BYTES_PER_PIXEL
    extra = max(0.0, size / (rate * 1e9) - size / (healthy * 1e9))
    method = (
        f"pinned host-to-device {rate:.1f} GB/s against {healthy:.1f} GB/s a healthy link carries: a batch "
        f"of {batch} {side}x{side} float32 images ({size / 1e6:.1f} MB) takes {extra * 1e3:.2f} ms longer "
        f"of a {step_s * 1e3:.1f} ms training step (bench.host_link, bench.train_real)"
    )
    return priced(extra / step_s, "training step", f"host-to-device:{key}", 1, ctx.node.use, MEASURED, method)


def _node_out(result: Result, ctx: _Context) -> dict[str, Any]:
    return priced(1.0, "node", "node", ctx.node.gpus, ctx.node.use, ESTIMATED,
                  f"{result.id} fails critical: the node's {ctx.node.gpus} GPU(s) leave scheduling",
                  NODE_OUT_SOURCE)  # fmt: skip


def _input_gap_price(result: Result, ctx: _Context) -> dict[str, Any]:
    gap = result.metrics.get("gap_percent")
    if not isinstance(gap, int | float):
        return unpriced("the input gap was not measured")
    method = f"real-data training {gap:.0f}% below the same step on synthetic data (bench.input_gap)"
    return priced(gap / 100, "training step", "training step", ctx.node.gpus, ctx.node.use, MEASURED, method)


def _dataloader_price(result: Result, ctx: _Context) -> dict[str, Any]:
    gain = result.metrics.get("gain_percent")
    if not isinstance(gain, int | float) or gain <= 0:
        return unpriced("the DataLoader sweep found no better setting")
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    method = (
        f"PyTorch's default DataLoader ({evidence.get('default')}) loads {gain:.0f}% fewer images/s than "
        f"{evidence.get('best')} (bench.dataloader's sweep)"
    )
    fraction = 1.0 - 1.0 / (1.0 + gain / 100)
    return priced(fraction, "data loading", "data loading", ctx.node.gpus, ctx.node.use, MEASURED, method)


def _io_price(result: Result, ctx: _Context) -> dict[str, Any]:
    subject = result.subject or ("/tmp" if result.id == "storage.tmp_tmpfs" else "")
    cost = (ctx.node.io_costs or {}).get(subject)
    if cost is None:
        return unpriced(
            f"measured by `dltune check` on {subject or 'the mount'} (the audit alone reads only)"
        )
    if cost.fraction is None:
        return unpriced(cost.why)
    scope = f"{cost.of}:{subject}"
    return priced(cost.fraction, cost.of, scope, ctx.node.gpus, ctx.node.use, MEASURED, cost.method)


def _vip_price(result: Result, ctx: _Context) -> dict[str, Any]:
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    if result.id == "network.vip_spread":
        planned, used = evidence.get("expected_vips_per_nic"), evidence.get("actual_vips_per_nic")
        if (
            isinstance(planned, Mapping)
            and isinstance(used, Mapping)
            and planned
            and len(used) < len(planned)
        ):
            fraction = 1.0 - len(used) / len(planned)
            method = (
                f"storage traffic over {len(used)} of the {len(planned)} NICs planned: their bandwidth "
                f"is the bound of NFS reads"
            )
            return priced(fraction, "NFS reads", "NFS reads", ctx.node.gpus, ctx.node.use, ESTIMATED, method,
                          "NIC bandwidth adds up per NIC used (role nfs_multivip's host routes)")  # fmt: skip
        return unpriced("the VIPs' NICs differ from the plan without using fewer of them")
    if evidence.get("shares_connection_with"):
        method = (
            f"{result.subject} shares one TCP connection with {', '.join(evidence['shares_connection_with'])}"
        )
        scope = f"NFS reads:{result.subject}"
        return priced(1.0 - ONE_CONNECTION_SHARE, "NFS reads", scope, ctx.node.gpus, ctx.node.use, ESTIMATED,
                      method, ONE_CONNECTION_SOURCE)  # fmt: skip
    return unpriced("a VIP mount that differs from the plan is not priced unless it shares a connection")


_PRICERS = {
    **dict.fromkeys(CLOCK_CLASS, _clock_price),
    **dict.fromkeys(PCIE_CLASS, _pcie_price),
    "bench.input_gap": _input_gap_price,
    "bench.dataloader": _dataloader_price,
    "storage.data_noatime": _io_price,
    "storage.tmp_tmpfs": _io_price,
    "network.vip_spread": _vip_price,
    "nfs.vip_mounts": _vip_price,
}


def _takes_the_node_out(result: Result) -> bool:
    acknowledged = result.acknowledged or {}
    return (result.status is Status.FAIL and result.critical) or bool(acknowledged.get("was_critical"))


def impact_of(result: Result, ctx: _Context) -> dict[str, Any] | None:
    if not is_finding(result):
        return None
    if _takes_the_node_out(result):
        if ctx.node.gpus > 0:
            return _node_out(result, ctx)
        return unpriced("the node has no GPU to count")
    pricer = _PRICERS.get(result.id)
    if pricer is None:
        return unpriced(f"no method prices {result.id} (docs/commands.md, What a finding costs)")
    return pricer(result, ctx)


_CUDA_DEVICE = re.compile(r"cuda:([0-9]+):")


def bench_gpus(results: Iterable[Result]) -> int:
    """The GPUs a bench measured (its matmul subjects "cuda:N:dtype"); 0 on a CPU run."""
    return len(
        {m.group(1) for r in results if r.id == "bench.matmul" and (m := _CUDA_DEVICE.match(r.subject or ""))}
    )


def price(results: Sequence[Result], node: Node) -> list[Result]:
    """The results with an impact on each finding (None on the others)."""
    ctx = _Context.of(results, node)
    return [replace(r, impact=impact_of(r, ctx)) if is_finding(r) else r for r in results]


def node_loss(results: Iterable[Mapping[str, Any]]) -> float:
    """GPU-hours a day a node loses: each scope once, at its largest price (a GPU whose gpu.clocks and
    bench.matmul price the same matmul loss counts once); a node out of scheduling loses all."""
    by_scope: dict[str, float] = {}
    for r in results:
        impact = r.get("impact") or {}
        hours = impact.get("gpu_hours_per_day")
        if impact.get("basis") in (MEASURED, ESTIMATED) and isinstance(hours, int | float):
            scope = str(impact.get("scope"))
            by_scope[scope] = max(by_scope.get(scope, 0.0), float(hours))
    if "node" in by_scope:
        return by_scope["node"]
    return sum(by_scope.values())
