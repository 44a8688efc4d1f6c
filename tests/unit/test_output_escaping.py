"""Text from the host through every output: a mount point with rich markup in it, bytes that are not
UTF-8, control characters, a stacked mount, and output paths that cannot be written. Real fixture
trees under --root, real renderers, read back by a real Prometheus parser and JSON decoder."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from typer.testing import CliRunner

from dltune.cli import app
from dltune.model import Result, Status
from dltune.outputs.human import console, render_human
from dltune.probes.mountstats import parse_mountstats
from dltune.probes.storage import meminfo_kb
from dltune.text import unescape, visible
from tests.conftest import FIXTURES

# Mount points as a hostile or unlucky admin makes them: markup, a byte that is not UTF-8, a newline
# (mountinfo escapes it as \012), and the same name as another path once the \xff is escaped.
ODD_MOUNTS = (
    b"41 22 259:3 / /data/[/bold]x rw,relatime shared:11 - ext4 /dev/nvme2n1 rw\n"
    b"42 22 259:4 / /data/caf\xff rw,relatime shared:12 - ext4 /dev/nvme3n1 rw\n"
    b"43 22 259:5 / /data/caf\\134xff rw,relatime shared:13 - ext4 /dev/nvme4n1 rw\n"
    b"44 22 259:6 / /data/line\\012break rw,relatime shared:14 - ext4 /dev/nvme5n1 rw\n"
    # A stacked mount: a second filesystem mounted over /data/scratch; only the top one is visible.
    b"45 31 259:7 / /data/scratch rw,noatime shared:15 - ext4 /dev/nvme6n1 rw\n"
)


def odd_tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "data_relatime_unmanaged", root)
    mountinfo = root / "proc/self/mountinfo"
    mountinfo.write_bytes(mountinfo.read_bytes() + ODD_MOUNTS)
    return root


def audit(root: Path, *args: str) -> tuple[int, bytes]:
    outcome = CliRunner().invoke(app, ["audit", "--root", str(root), "--only", "storage", *args])
    return outcome.exit_code, outcome.stdout_bytes


def test_host_text_is_never_read_as_markup() -> None:
    """A mount point /data/[/bold]x crashed the table (a closing tag with nothing open), and BenchError's
    "pip install 'dltune[bench]'" was printed without its [bench]."""
    out = io.StringIO()
    results = [
        Result(
            "storage.data_noatime",
            Status.WARN,
            "/data/[/bold]x is relatime",
            subject="/data/[/bold]x",
            remedy="remount [red]now[/red]",
        ),
        Result("bench.threads", Status.WARN, "pip install 'dltune[bench]'"),
    ]
    render_human(results, Console(file=out, width=200), "node[1]")
    text = out.getvalue()
    assert "/data/[/bold]x" in text and "[red]now[/red]" in text and "'dltune[bench]'" in text
    assert "node[1]" in text
    err = io.StringIO()
    message = console(stderr=True)
    message.file = err
    message.print("dltune bench needs PyTorch: pip install 'dltune[bench]'")
    assert "'dltune[bench]'" in err.getvalue()


def test_every_output_stays_valid_utf8_and_reversible_with_odd_mount_points(tmp_path: Path) -> None:
    """A mount point with a byte that is not UTF-8 crashed --textfile-dir and --facts-file and made the
    Prometheus output invalid UTF-8. Every format is valid UTF-8 now; the byte shows as \\xff, the
    literal text "\\xff" as "\\\\xff", so the two paths stay apart, and both map back to their bytes."""
    root = odd_tree(tmp_path)
    rc, human = audit(root)
    assert rc in (0, 1)
    shown = human.decode("utf-8")  # strict
    assert "/data/[/bold]x" in shown and "/data/caf\\xff" in shown and "/data/caf\\\\xff" in shown
    rc, raw_json = audit(root, "--format", "json")
    subjects = {r["subject"] for r in json.loads(raw_json.decode("utf-8"))["results"] if r["subject"]}
    assert {"/data/caf\\xff", "/data/caf\\\\xff", "/data/line\\x0abreak"} <= subjects, subjects
    assert unescape("/data/caf\\xff") == b"/data/caf\xff"
    assert unescape("/data/caf\\\\xff") == b"/data/caf\\xff"
    rc, prom = audit(root, "--format", "prometheus")
    families = list(text_string_to_metric_families(prom.decode("utf-8")))
    assert families
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    facts = tmp_path / "dltune.fact"
    rc, _ = audit(root, "--textfile-dir", str(textfiles), "--facts-file", str(facts))
    assert rc in (0, 1)
    list(text_string_to_metric_families((textfiles / "dltune.prom").read_bytes().decode("utf-8")))
    json.loads(facts.read_bytes().decode("utf-8"))


def test_a_stacked_mount_is_judged_once_and_prometheus_series_are_unique(tmp_path: Path) -> None:
    """Two filesystems mounted at /data/scratch: one result per check and subject, by the visible (top)
    mount; node_exporter rejects a textfile with two identical series."""
    _rc, prom = audit(odd_tree(tmp_path), "--format", "prometheus")
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    values: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
    for family in text_string_to_metric_families(prom.decode("utf-8")):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
            values.append((*key, sample.value))
    scratch = [
        (labels, value)
        for name, labels, value in values
        if name == "dltune_check_status"
        and ("mountpoint", "/data/scratch") in labels
        and ("check", "storage.data_noatime") in labels
    ]
    # One state set (a series per status), and the top mount is noatime: its pass is the 1.
    assert len(scratch) == 5 and [dict(labels)["status"] for labels, v in scratch if v == 1] == ["pass"]


def test_output_paths_that_cannot_be_written_are_usage_errors_up_front(tmp_path: Path) -> None:
    root = FIXTURES / "data_relatime_unmanaged"
    directory = tmp_path / "a-directory"
    directory.mkdir()
    for args, hint in (
        (["--facts-file", str(directory)], "--facts-file"),
        (["--facts-file", str(tmp_path / "missing" / "x.fact")], "--facts-file"),
        (["--textfile-dir", str(tmp_path / "missing")], "--textfile-dir"),
    ):
        outcome = CliRunner().invoke(app, ["audit", "--root", str(root), "--only", "storage", *args])
        assert outcome.exit_code == 2, (args, outcome.output)
        assert hint in outcome.output
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "n.json").write_text(json.dumps({"problem": "unreachable"}))
    for option in ("--html", "--json"):
        outcome = CliRunner().invoke(app, ["report", str(reports), option, str(directory)])
        words = " ".join(outcome.output.replace("│", " ").split())
        assert outcome.exit_code == 2 and "directory: give a file" in words, outcome.output


def test_unicode_digits_in_kernel_files_are_not_numbers() -> None:
    """str.isdigit() accepts "²" and int() then raises: meminfo and mountstats crashed the audit."""
    assert meminfo_kb("MemTotal:       ²² kB\n", "MemTotal") is None
    assert meminfo_kb("MemTotal:       2048 kB\n", "MemTotal") == 2048
    stats = parse_mountstats(
        "device srv:/x mounted on /mnt/x with fstype nfs4 statvers=1.1\n\tage:\t²\n\tevents:\t1 ² 3\n"
    )
    assert stats is not None


def test_visible_is_reversible_and_keeps_different_paths_apart() -> None:
    samples = [b"/a\\b", b"/a\\\\b", b"/a\xffb", b"/a\\xffb", b"/caf\xc3\xa9", b"/t\tab", b"/x\x7f"]
    texts = [visible(s.decode("utf-8", "surrogateescape")) for s in samples]
    assert len(set(texts)) == len(samples)
    for raw, text in zip(samples, texts, strict=True):
        text.encode("utf-8")  # never a lone surrogate
        assert unescape(text) == raw


def test_a_mountinfo_line_dltune_cannot_read_is_reported_not_dropped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "data_relatime_unmanaged", root)
    mountinfo = root / "proc/self/mountinfo"
    mountinfo.write_bytes(mountinfo.read_bytes() + b"99 22 0:99 / /odd rw,relatime no separator here\n")
    rc, raw = audit(root, "--format", "json")
    results = [r for r in json.loads(raw)["results"] if r["id"] == "storage.fstab_parse"]
    odd = [r for r in results if r["subject"] == "/proc/self/mountinfo"]
    assert len(odd) == 1 and odd[0]["status"] == "error", results
    assert odd[0]["evidence"]["lines"][0]["text"].endswith("no separator here")
    assert rc == 2  # an error inside dltune, no fail
