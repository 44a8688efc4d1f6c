"""RDMA port bandwidth between the first two nodes of a multi-node bench: perftest's `ib_write_bw`,
one port at a time (the second node serves, the first connects), each active port of the first node to
the port of the same name on the second, judged against the port's rate. With GPUs under test and
nvidia_peermem loaded, the buffers are in the GPU nearest the port (`--use_cuda`: GPUDirect RDMA), as
training's NCCL traffic is.

Pass lines: Azure's HPC node health checks pass an NDR (400 Gb/s) port at 380 Gb/s and an HDR
(200 Gb/s) port at 180 Gb/s (check_ib_bw_gdr); other rates at 90% of the rate (HDR's share). Below the
line `warn`, below half of it `fail`.

No RDMA device exists where dltune is tested (no rdma_rxe in the lab's kernel): the command lines run
against a stand-in `ib_write_bw` that prints real published outputs (tests/fixtures/real/interconnect/).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from dltune.model import Result, Status
from dltune.records import record
from dltune.snapshot import IbPort

PERFTEST = "ib_write_bw"
MESSAGE_BYTES = 1 << 20
DURATION_S = 3
# The server waits this long for its client; the client retries its connection for as long.
CONNECT_S = 60
PASS_GBPS = {400: 380.0, 200: 180.0}
OTHER_SHARE = 0.9
FAIL_SHARE = 0.5
# perftest's MB/sec is 2^20 bytes per second (newer releases print it as MiB/sec); its Gb/sec is
# 10^9 bits per second.
MIB_S_IN_GBPS = 1048576 * 8 / 1e9
GBPS_PER_UNIT = {"Gb/sec": 1.0, "MB/sec": MIB_S_IN_GBPS, "MiB/sec": MIB_S_IN_GBPS}
PEERMEM = "/sys/module/nvidia_peermem"


def command(
    device: str, port: int, tcp_port: int, peer: str | None = None, cuda_device: int | None = None
) -> list[str]:
    """One ib_write_bw: the server without `peer`, the client with it (both sides alike otherwise)."""
    argv = [PERFTEST, "-d", device, "-i", str(port), "-s", str(MESSAGE_BYTES), "-D", str(DURATION_S)]
    argv += ["-F", "--report_gbits", "-p", str(tcp_port)]
    if cuda_device is not None:
        argv.append(f"--use_cuda={cuda_device}")
    return argv + ([peer] if peer else [])


@record(frozen=True)
class Measured:
    """The result row of one ib_write_bw."""

    message_bytes: int
    peak_gbps: float
    average_gbps: float
    link_type: str | None  # "IB", "Ethernet"


_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[(?P=unit)\]")
_ROW = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)\s+[\d.]+\s*$", re.M
)
_LINK = re.compile(r"^\s*Link type\s*:\s*(?P<type>\S+)", re.M)


def parse(text: str) -> Measured | None:
    """The result row of the largest message after the table header (dltune runs one size; a sweep's
    largest is its plateau), in Gb/s whichever unit perftest printed; None without a complete table."""
    header = _HEADER.search(text)
    unit = header["unit"].strip() if header else None
    if header is None or unit not in GBPS_PER_UNIT:
        return None
    table = text[header.end() :]
    end = table.find("\n---")
    rows = list(_ROW.finditer(table if end < 0 else table[:end]))
    if not rows:
        return None
    row = max(rows, key=lambda r: int(r["bytes"]))
    scale = GBPS_PER_UNIT[unit]
    link = _LINK.search(text)
    return Measured(
        int(row["bytes"]),
        float(row["peak"]) * scale,
        float(row["avg"]) * scale,
        link["type"] if link else None,
    )


# perftest's words when the adapter cannot register the buffer (ibv_reg_mr): on a --use_cuda run, the GPU's
# memory cannot be given to the adapter, GPUDirect RDMA does not work (linux-rdma/perftest #31, #126).
MR_FAILURE = re.compile(
    r"Couldn't (?:allocate|register|create) MR|ibv_reg_mr failed|Failed to register (?:the )?MR"
)


def pass_line(rate_gbps: float) -> float:
    return PASS_GBPS.get(round(rate_gbps), OTHER_SHARE * rate_gbps)


def judge_port(
    port: IbPort, peer: str, measured: Measured | None, error: str | None, cuda: int | None
) -> Result:
    subject = port.name
    where = f"{subject} to {peer}" + (
        f" (GPUDirect RDMA, GPU {cuda})" if cuda is not None else " (host memory)"
    )
    if measured is None and cuda is not None and error and MR_FAILURE.search(error):
        return Result(
            "bench.rdma",
            Status.FAIL,
            f"{where}: GPUDirect RDMA cannot register GPU memory with the adapter ({error})",
            subject=subject,
            evidence={"error": error},
            remedy="load nvidia_peermem (`modprobe nvidia-peermem`), or use the DMA-BUF path (the open GPU "
            "kernel modules on Linux 5.12 or later); `dltune audit --only fabric` judges it "
            "(fabric.gpudirect); a vGPU or a GPU without peer memory support cannot do it",
        )
    if measured is None:
        return Result(
            "bench.rdma",
            Status.ERROR,
            f"{where}: ib_write_bw gave no figure" + (f": {error}" if error else ""),
            subject=subject,
            evidence={"error": error} if error else {},
            remedy="run the printed ib_write_bw by hand on both nodes; check the port (audit fabric)",
        )
    evidence: dict[str, object] = {"peer": peer, "message_bytes": measured.message_bytes, "cuda_device": cuda}
    metrics = {"average_gbps": measured.average_gbps, "peak_gbps": measured.peak_gbps}
    summary = f"{where}: {measured.average_gbps:.1f} Gb/s average"
    status = Status.PASS
    if port.rate_gbps:
        line = pass_line(port.rate_gbps)
        evidence["judged_against"] = f"{line:g} Gb/s on a {port.rate_gbps:g} Gb/s port"
        summary += f", {measured.average_gbps / port.rate_gbps:.0%} of the port's {port.rate_gbps:g} Gb/s"
        status = (
            Status.PASS
            if measured.average_gbps >= line
            else Status.WARN
            if measured.average_gbps >= FAIL_SHARE * line
            else Status.FAIL
        )
        if status is not Status.PASS:
            summary += f" (below {line:g})"
    return Result(
        "bench.rdma",
        status,
        summary,
        subject=subject,
        evidence=evidence,
        metrics=metrics,
        remedy=None
        if status is Status.PASS
        else "check both ports' counters and cables (audit fabric), the PCIe link of the adapter, and "
        "for GPUDirect that nvidia_peermem is loaded and the GPU sits under the adapter's PCIe switch",
    )


def nearest_gpu(
    hca_pci: str | None, gpu_pci: Sequence[str], sysfs: Path = Path("/sys/bus/pci/devices")
) -> int | None:
    """The GPU whose PCI path shares the longest prefix with the adapter's (same switch, then same root
    port, then same socket); None without addresses."""
    if not hca_pci or not gpu_pci:
        return None

    def path(address: str) -> list[str]:
        return os.path.realpath(sysfs / address).split("/")

    hca = path(hca_pci)

    def shared(address: str) -> int:
        return next((i for i, (a, b) in enumerate(zip(hca, path(address), strict=False)) if a != b), len(hca))

    return max(range(len(gpu_pci)), key=lambda i: (shared(gpu_pci[i]), -i))


Run = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)


def serve(ports: Sequence[IbPort], base_port: int, cuda: Sequence[int | None], run: Run = _run) -> None:
    """The second node: one server per port, in order, each waiting for its client."""
    for index, port in enumerate(ports):
        try:
            run(
                command(port.device, port.port, base_port + index, cuda_device=cuda[index]),
                CONNECT_S + 2 * DURATION_S,
            )
        except subprocess.TimeoutExpired:
            continue


def connect(
    ports: Sequence[IbPort], peer: str, base_port: int, cuda: Sequence[int | None], run: Run = _run
) -> list[Result]:
    """The first node: each port's client, retried until its server listens (or CONNECT_S passes)."""
    results = []
    for index, port in enumerate(ports):
        argv = command(port.device, port.port, base_port + index, peer, cuda[index])
        until = time.monotonic() + CONNECT_S
        measured, error = None, None
        while True:
            try:
                done = run(argv, CONNECT_S + 2 * DURATION_S)
            except subprocess.TimeoutExpired:
                error = f"{' '.join(argv)}: no answer in {CONNECT_S + 2 * DURATION_S} s"
                break
            measured = parse(done.stdout) if done.returncode == 0 else None
            said = (done.stderr + "\n" + done.stdout).strip().splitlines()
            registration = next((line.strip() for line in said if MR_FAILURE.search(line)), None)
            # A buffer the adapter cannot register fails the same way on every try: only a server not
            # listening yet is worth the retry window.
            if measured is not None or registration is not None or time.monotonic() >= until:
                error = (
                    None
                    if measured
                    else (registration or (done.stderr.strip().splitlines() or ["no result row"])[-1])[:300]
                )
                break
            time.sleep(1)
        results.append(judge_port(port, peer, measured, error, cuda[index]))
    return results


def installed() -> bool:
    return shutil.which(PERFTEST) is not None


def skipped(reason: str) -> Result:
    return Result("bench.rdma", Status.SKIP, reason)


def gpudirect_expected() -> bool:
    return os.path.isdir(PEERMEM)
