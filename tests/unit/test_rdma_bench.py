"""bench.rdma: perftest's ib_write_bw command lines (server and client alike), the judgement against
each port's rate at its boundaries, the GPU nearest an adapter on the PCI tree, and the two sides run
for real against a stand-in `ib_write_bw` (no RDMA device exists here: the stand-in prints a published
output, tests/fixtures/real/interconnect/, and is the only fake, at the program's boundary)."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from dltune.bench import rdma
from dltune.model import Status
from dltune.snapshot import IbPort
from tests.real_corpus import load

REAL = Path(__file__).parents[1] / "fixtures/real/interconnect"
REAL_NDR = REAL / "ib_write_bw-ndr-csegpu-dac.txt"


def published(name: str) -> str:
    return load(REAL / name).body


NDR = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", rate_gbps=400.0, pci_address="0000:1a:00.0")
HDR = IbPort("mlx5_1", 1, "ACTIVE", "LinkUp", rate_gbps=200.0)


def test_server_and_client_differ_only_by_the_peer() -> None:
    server = rdma.command("mlx5_0", 1, 29620)
    client = rdma.command("mlx5_0", 1, 29620, "node2", cuda_device=3)
    assert server == ["ib_write_bw", "-d", "mlx5_0", "-i", "1", "-s", "1048576", "-D", "3", "-F",
                      "--report_gbits", "-p", "29620"]  # fmt: skip
    assert client == [*server, "--use_cuda=3", "node2"]


def measured(average: float) -> rdma.Measured:
    return rdma.Measured(1 << 20, average + 1, average, "IB")


@pytest.mark.parametrize(
    ("port", "average", "status"),
    [
        (NDR, 380.0, Status.PASS),
        (NDR, 379.99, Status.WARN),
        (NDR, 190.0, Status.WARN),
        (NDR, 189.99, Status.FAIL),
        (HDR, 180.0, Status.PASS),
        (HDR, 179.99, Status.WARN),
        (IbPort("mlx5_2", 1, "ACTIVE", "LinkUp", rate_gbps=100.0), 90.0, Status.PASS),
        (IbPort("mlx5_2", 1, "ACTIVE", "LinkUp", rate_gbps=100.0), 89.99, Status.WARN),
    ],
)
def test_ports_are_judged_at_azures_lines_and_half_of_them(
    port: IbPort, average: float, status: Status
) -> None:
    result = rdma.judge_port(port, "node2", measured(average), None, None)
    assert result.status is status, result.summary
    assert result.subject == port.name and result.metrics["average_gbps"] == average
    assert (result.remedy is None) == (status is Status.PASS)


def test_a_port_without_a_rate_is_reported_not_judged_and_no_figure_is_an_error() -> None:
    unknown = IbPort("mlx5_3", 1, "ACTIVE", "LinkUp")
    assert rdma.judge_port(unknown, "node2", measured(5.0), None, None).status is Status.PASS
    failed = rdma.judge_port(NDR, "node2", None, "Couldn't connect to node2:29620", 0)
    assert (
        failed.status is Status.ERROR and "Couldn't connect" in failed.summary and "GPU 0" in failed.summary
    )


def test_the_nearest_gpu_shares_the_adapters_pcie_switch(tmp_path: Path) -> None:
    """A DGX-like tree: two switches under one root port; the adapter under switch b picks GPU 1."""
    root = tmp_path / "devices" / "pci0000:00" / "0000:00:01.0"
    for switch, device in (("a", "0000:18:00.0"), ("b", "0000:1a:00.0"), ("b", "0000:1b:00.0")):
        (root / switch / device).mkdir(parents=True)
    links = tmp_path / "bus"
    links.mkdir()
    for device, switch in (("0000:18:00.0", "a"), ("0000:1a:00.0", "b"), ("0000:1b:00.0", "b")):
        (links / device).symlink_to(root / switch / device)
    assert rdma.nearest_gpu("0000:1a:00.0", ["0000:18:00.0", "0000:1b:00.0"], sysfs=links) == 1
    assert rdma.nearest_gpu(None, ["0000:18:00.0"], sysfs=links) is None


def stand_in(tmp_path: Path, output: str, serve_log: Path) -> Path:
    """An `ib_write_bw` that prints `output` as a client and logs its argv as a server."""
    program = tmp_path / "bin" / "ib_write_bw"
    program.parent.mkdir()
    (tmp_path / "out.txt").write_text(output)
    program.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" node2 "*) cat {tmp_path / "out.txt"} ;; *) echo "$*" >> {serve_log} ;; esac\n'
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program.parent


def test_both_sides_run_the_stand_in_and_the_client_judges_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "served"
    output = load(REAL_NDR).body
    monkeypatch.setenv("PATH", f"{stand_in(tmp_path, output, log)}{os.pathsep}{os.environ['PATH']}")
    assert rdma.installed()
    server = threading.Thread(target=rdma.serve, args=([NDR, HDR], 29620, [None, None]))
    server.start()
    results = rdma.connect([NDR, HDR], "node2", 29620, [0, None])
    server.join()
    assert [r.subject for r in results] == ["mlx5_0/1", "mlx5_1/1"]
    assert log.read_text().splitlines() == [
        "-d mlx5_0 -i 1 -s 1048576 -D 3 -F --report_gbits -p 29620",
        "-d mlx5_1 -i 1 -s 1048576 -D 3 -F --report_gbits -p 29621",
    ]
    assert results[0].metrics["average_gbps"] == rdma.parse(output).average_gbps  # type: ignore[union-attr]


def test_published_healthy_ndr_and_hdr_ports_pass() -> None:
    """ConnectX-7 on 4x NDR back to back, 392.34 Gb/s at 64 KiB (a CPU-frequency warning inside the
    table); ConnectX-6 on HDR through a switch, an -a sweep whose largest message reaches 196.80."""
    ndr = rdma.parse(published("ib_write_bw-ndr-csegpu-dac.txt"))
    assert ndr == rdma.Measured(65536, 392.38, 392.34, "IB")
    assert rdma.judge_port(NDR, "csegpu2", ndr, None, None).status is Status.PASS
    hdr = rdma.parse(published("ib_write_bw-hdr-mt4123-cn.txt"))
    assert hdr is not None and hdr.message_bytes == 8388608 and hdr.average_gbps == 196.80
    assert rdma.judge_port(HDR, "10.1.90.3", hdr, None, None).status is Status.PASS


def test_a_published_gpudirect_run_far_below_its_host_memory_run_is_judged_so() -> None:
    """dranet's GKE H200 node: from GPU memory (dma-buf) 140.40 Gb/s, where the same pair reached
    381.41 Gb/s from host memory before its run failed (a table without its end: no figure). The port's
    rate is not printed; on the 400 Gb/s RoCE port such nodes have (an inference) 140 is a fail, on a
    200 Gb/s one a warning."""
    gpu = rdma.parse(published("ib_write_bw-roce-dranet-gke-cuda.txt"))
    assert gpu is not None and gpu.average_gbps == 140.40 and gpu.link_type == "Ethernet"
    roce400 = IbPort("mlx5_3", 1, "ACTIVE", "LinkUp", rate_gbps=400.0, link_layer="Ethernet")
    assert rdma.judge_port(roce400, "10.0.4.8", gpu, None, 0).status is Status.FAIL
    assert rdma.judge_port(HDR, "10.0.4.8", gpu, None, 0).status is Status.WARN


def test_mb_per_second_tables_are_converted_and_no_table_is_no_figure() -> None:
    text = published("ib_write_bw-hdr-mt4123-cn.txt").replace("[Gb/sec]", "[MB/sec]")
    assert rdma.parse(text).average_gbps == pytest.approx(196.80 * 1048576 * 8 / 1e9)  # type: ignore[union-attr]
    assert rdma.parse("Couldn't connect to 10.0.0.2:18515") is None
    assert rdma.parse(published("ib_write_bw-hdr-mt4123-cn.txt").replace("[Gb/sec]", "[Kb/sec]")) is None


HUNDRED_GBE = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", rate_gbps=100.0, link_layer="Ethernet")


def test_published_gpudirect_runs_at_their_ports_rate_pass() -> None:
    """--use_cuda runs published as working: NVIDIA's GPU Operator docs (dma-buf over RoCE, "approximately
    92 Gbps", a 100 GbE port inferred) and an OpenShift demo (T4 over RoCE, 22.99 Gb/s, 25 GbE inferred);
    the block indented inside reStructuredText is read the same."""
    docs = rdma.parse(published("ib_write_bw-roce-gpu-operator-docs-cuda-dmabuf.txt"))
    assert docs == rdma.Measured(8388608, 92.39, 92.39, "Ethernet")
    assert rdma.judge_port(HUNDRED_GBE, "192.168.38.90", docs, None, 0).status is Status.PASS
    t4 = rdma.parse(published("ib_write_bw-t4-openshift-addon-roce-cuda.txt"))
    assert t4 == rdma.Measured(8388608, 23.01, 22.99, "Ethernet")
    roce25 = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", rate_gbps=25.0, link_layer="Ethernet")
    assert rdma.judge_port(roce25, "server", t4, None, 0).status is Status.PASS


def test_a_gpudirect_run_without_a_port_rate_is_reported_and_judged_only_against_a_rate() -> None:
    """The T9k guide's A100-SXM4-80GB pair over IB (ConnectX-6; tabs inside the rows): 80.96 Gb/s, no
    port rate printed, so no line to judge by; on the 100 Gb/s ports the same guide's host run suggests
    (98.38 Gb/s between two other nodes) it is below the 90 Gb/s line."""
    a100 = rdma.parse(published("ib_write_bw-a100-sxm4-t9k-cn-cuda.txt"))
    assert a100 == rdma.Measured(8388608, 81.02, 80.96, "IB")
    unknown = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp")
    result = rdma.judge_port(unknown, "10.233.120.114", a100, None, 0)
    assert result.status is Status.PASS and "judged_against" not in result.evidence
    hdr100 = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", rate_gbps=100.0)
    assert rdma.judge_port(hdr100, "10.233.120.114", a100, None, 0).status is Status.WARN


def test_newer_perftests_mib_per_second_tables_are_read_as_mb_per_second() -> None:
    """perftest's newer releases print MiB/sec (the same 2^20 bytes per second older ones call MB/sec):
    the RTX 4080 GPUDirect sample, published as working, gives its figure; an unknown unit still none."""
    text = published("ib_write_bw-rtx4080-p2p-driver-cuda-mib.txt")
    rtx = rdma.parse(text)
    assert rtx is not None and rtx.message_bytes == 65536 and rtx.link_type == "IB"
    assert rtx.average_gbps == pytest.approx(14948.67 * 1048576 * 8 / 1e9)
    assert rtx.average_gbps == pytest.approx(125.40, abs=0.01)
    assert rdma.parse(text.replace("[MiB/sec]", "[MB/sec]")) == rtx
    assert rdma.parse(text.replace("[MiB/sec]", "[KiB/sec]")) is None


@pytest.mark.parametrize(
    "name", ["ib_write_bw-perftest126-a30-vgpu-cuda-no-mr.txt", "ib_write_bw-perftest31-k80-cuda-no-mr.txt"]
)
def test_gpudirect_that_cannot_register_gpu_memory_fails_naming_peermem(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """perftest #126 and #31: "Couldn't allocate MR" on the GPU buffer, no table: GPUDirect RDMA does not
    work on that node (the issues' answers: load nvidia-peermem; a vGPU cannot). Through the client's own
    loop (one try: no retry window) the port fails, the summary quoting perftest's MR line."""
    body = published(name)
    assert rdma.parse(body) is None and "Couldn't allocate MR" in body
    monkeypatch.setattr(rdma, "CONNECT_S", 0)

    def failed(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr=body)

    (result,) = rdma.connect([NDR], "node2", 29620, [0], run=failed)
    assert result.status is Status.FAIL, result.summary
    assert "GPUDirect RDMA cannot register GPU memory with the adapter (" in result.summary
    assert "Couldn't allocate MR" in result.summary and "GPU 0" in result.summary
    assert result.remedy and result.remedy.startswith("load nvidia_peermem")


def test_a_host_memory_run_that_cannot_register_its_buffer_is_an_error_not_a_gpudirect_fail() -> None:
    """The same words without --use_cuda say nothing about GPUDirect: no figure, an error as before;
    and at once: a buffer that cannot be registered is not retried for the server's minute."""
    tries: list[list[str]] = []

    def unregistered(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        tries.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", " Couldn't allocate MR\n")

    (result,) = rdma.connect([NDR], "node2", 29620, [None], run=unregistered)
    assert result.status is Status.ERROR and "gave no figure" in result.summary
    assert len(tries) == 1


def test_a_server_not_listening_yet_is_retried_until_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second node's server may start after the first node's client: a refused connection is tried
    again (a second apart) within CONNECT_S, and the figure of the try that connects is the port's."""
    monkeypatch.setattr(rdma.time, "sleep", lambda seconds: None)
    refused = " Couldn't connect to node2:29620\n Unable to init the socket connection\n"
    answers = [(1, "", refused), (1, "", refused), (0, published("ib_write_bw-ndr-csegpu-dac.txt"), "")]
    tries: list[list[str]] = []

    def later(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        tries.append(argv)
        return subprocess.CompletedProcess(argv, *answers.pop(0))

    (result,) = rdma.connect([NDR], "node2", 29620, [None], run=later)
    assert len(tries) == 3, tries
    assert result.status is not Status.ERROR and "gave no figure" not in result.summary, result.summary
