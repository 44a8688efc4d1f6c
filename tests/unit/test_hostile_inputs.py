"""What a hostile tester feeds dltune (issue 28), by class, each through the real CLI where it can:

A. numeric options: NaN, infinity, other scripts' digits: exit 2, one line naming the option;
B. JSON nested past any stack (node files, --previous, recorded commands, tools' output);
C. FIFOs, sockets and devices where a file is read or written: never a blocked process;
D. digit tests on host text: ASCII digits only ("²" and "٣" are no numbers);
E. one error boundary: an OSError, a missing command, a bug: one line on stderr, the contract's code;
F. `dltune report`: NaN/Infinity make a node invalid; unknown areas share one column;
G. an interpreter without tarfile's data filter is refused by name.

The boundary is `dltune.cli.run` (what the `dltune` entry point runs); tests that could hang without
their fix run the CLI in a child with a timeout."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dltune import cli
from dltune.checks.fabric import _gts, _kernel_at_least
from dltune.commands.options import Number
from dltune.files import safeio
from dltune.fleet import cluster, node_files
from dltune.model import AREAS, InputError
from dltune.probes.dcgm import parse_dcgm_diag
from dltune.probes.fabric import parse_aer, parse_rate, ports_from_values, read_fabric
from dltune.probes.hostfs import HostFS
from dltune.probes.manifest import read_manifest
from dltune.probes.mounts import parse_fstab
from dltune.probes.network import route_to
from dltune.probes.nvrm import parse_nvrm
from dltune.probes.runner import RecordedRunner
from dltune.staging.compat import UnsupportedPython, require_tar_data_filter
from dltune.text import decimal
from tests.conftest import FIXTURES, REPO_ROOT
from tests.unit.test_stage import nobody_can_run_dltune

SOME = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NOW = datetime.now(timezone.utc)
# Digits int() and float() accept that no kernel file or option means, and ASCII look-alikes.
FOREIGN_DIGITS = ("٣", "١٢", "²", "۵", "߀", "१", "𝟗", "Ⅷ", "½")  # noqa: RUF001
CHILD_TIMEOUT_S = 60


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The CLI in this process, through the entry point's error boundary: (exit code, stdout, stderr)."""
    code = cli.run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_child(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as `python -m dltune.cli` (what srun and users run), killed if it blocks."""
    return subprocess.run(
        [sys.executable, "-m", "dltune.cli", *argv],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        cwd=cwd or REPO_ROOT,
        check=False,
    )


def one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


def envelope(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tool_version": "0.1.0",
        "host": "n",
        "time": NOW.isoformat(timespec="seconds"),
        "valid_until": (NOW + timedelta(hours=1)).isoformat(timespec="seconds"),
        "results": results,
    }


def result(
    check_id: str = "gpu.ecc", status: str = "pass", area: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": check_id,
        "area": area or check_id.split(".")[0],
        "subject": None,
        "status": status,
        "summary": f"{check_id} {status}",
        "evidence": {},
        "remedy": None,
        "metrics": {},
        "critical": False,
        **extra,
    }


# ------------------------------------------------------------------------ A. numeric options

HOSTILE_NUMBERS = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e999",
    "-1",
    "1_0",
    " 5",
    "0x10",
    "",
    *FOREIGN_DIGITS,
)


def numeric_options() -> Iterator[tuple[str, str, Number]]:
    """(command, option, its type) for every numeric option of every command but the lead's."""
    import typer.main

    group = typer.main.get_command(cli.app)
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        for param in command.params:
            if param.type.name in ("float", "integer", "float range", "integer range", "number"):
                yield name, param.opts[0], param.type


def test_every_numeric_option_is_checked_by_the_one_number_type() -> None:
    found = list(numeric_options())
    assert {(c, o) for c, o, _ in found} >= {
        ("audit", "--timeout"),
        ("audit", "--nfs-timeout"),
        ("audit", "--nvml-timeout"),
        ("check", "--dcgm"),
        ("check", "--dcgm-timeout"),
        ("bench", "--batch"),
        ("bench", "--steps"),
        ("bench", "--image-size"),
    }
    assert [(c, o) for c, o, kind in found if not isinstance(kind, Number)] == []
    for _command, _option, kind in found:
        assert math.isfinite(kind.minimum) and math.isfinite(kind.maximum) and kind.minimum <= kind.maximum


@pytest.mark.parametrize("value", HOSTILE_NUMBERS)
def test_a_hostile_number_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    for command, option, _kind in numeric_options():
        code, out, err = run_cli(capsys, command, f"{option}={value}")
        assert code == 2, (command, option, value, out, err)
        assert option in one_line(err), (command, option, value)


def test_dcgm_timeout_infinity_never_reaches_int(capsys: pytest.CaptureFixture[str]) -> None:
    """The tester's case: `check --dcgm-timeout inf` passed the old positive-number test."""
    code, _out, err = run_cli(capsys, "check", "--dcgm", "1", "--dcgm-timeout", "inf")
    assert code == 2 and "--dcgm-timeout" in one_line(err)


@SOME
@given(number=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30))
def test_the_number_type_admits_exactly_finite_numbers_in_range(number: float) -> None:
    seconds = Number(float, 0.001, 86_400.0)
    text = repr(number) if isinstance(number, float) else str(number)
    admitted = math.isfinite(number) and 0.001 <= number <= 86_400.0
    try:
        converted = seconds.convert(text, None, None)
    except Exception as exc:
        assert not admitted, (text, exc)
        assert type(exc).__name__ == "BadParameter"
    else:
        assert admitted and converted == float(text)


@SOME
@given(text=st.text(min_size=1, max_size=12))
def test_the_number_type_reads_ascii_decimal_text_only(text: str) -> None:
    count = Number(int, 0, 10**9)
    try:
        value = count.convert(text, None, None)
    except Exception:
        return
    assert text.lstrip("+-").isascii() and text.lstrip("+-").isdigit() and value == int(text)


# ------------------------------------------------------------------------------- B. deep JSON

DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 50_000 + "1" + "}" * 50_000


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT, '{"results": ' + DEEP + "}"])
def test_the_one_loader_refuses_deep_json_before_parsing(text: str) -> None:
    with pytest.raises(safeio.JsonError, match="nested deeper than 64"):
        safeio.loads(text)
    with pytest.raises(ValueError):  # what every caller catches
        safeio.decode_first(text + " trailing")


def test_brackets_inside_strings_do_not_count() -> None:
    document = json.dumps({"s": "[" * 500 + '\\"{' * 100, "t": ["]" * 300]})
    assert safeio.json_depth(document) == 2
    assert safeio.loads(document) == json.loads(document)


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
)
JSON_DATA = st.recursive(
    JSON_LEAVES | st.text(alphabet=st.sampled_from('[]{}"\\ab,:'), max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=30,
)


def nesting(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((nesting(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((nesting(v) for v in value.values()), default=0)
    return 0


@SOME
@given(data=JSON_DATA)
def test_the_depth_scan_measures_what_json_nests(data: Any) -> None:
    text = json.dumps(data)
    assert safeio.json_depth(text) == nesting(data)
    assert safeio.loads(text) == json.loads(text)


def test_a_deep_node_file_makes_its_node_invalid_and_the_rest_is_read(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text('{"schema_version": 1, "results": ' + DEEP + "}")
    (tmp_path / "ok.json").write_text(json.dumps(envelope([result()])))
    nodes = {n.host: n for n in node_files.load([tmp_path])}
    assert (nodes["deep"].problem or "").startswith("invalid: deep.json") and "nested deeper" in (
        nodes["deep"].problem or ""
    )
    assert nodes["ok"].healthy


def test_a_deep_previous_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "previous.json").write_text(DEEP)
    root = FIXTURES / "tmp_tmpfs_ok"
    code, _out, err = run_cli(
        capsys, "audit", "--root", str(root), "--previous", str(tmp_path / "previous.json")
    )
    assert code == 2 and "--previous" in one_line(err) and "nested deeper" in err


@pytest.mark.parametrize(
    "content",
    [DEEP, '{"dmesg --kernel --notime": {"returncode": "٣"}}', "[1]", '{"x": {"stdout": NaN}}'],
)
def test_unusable_recorded_commands_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    shutil.copytree(FIXTURES / "tmp_tmpfs_ok", tmp_path / "root")
    (tmp_path / "root" / "dltune-commands.json").write_text(content)
    with pytest.raises(InputError, match=r"dltune-commands\.json"):
        RecordedRunner.for_fixture_root(tmp_path / "root")
    code, _out, err = run_cli(capsys, "audit", "--root", str(tmp_path / "root"), "--only", "gpu")
    assert code == 2 and "dltune-commands.json" in one_line(err)


def test_deep_json_from_tools_is_a_finding_not_a_crash() -> None:
    tests, _version, problem = parse_dcgm_diag(
        "Successfully ran diagnostic.\n" + '{"a":' * 5000 + "{}" + "}" * 5000
    )
    assert tests == () and problem is not None and "nested deeper" in problem
    choice = route_to(RecordedRunner({"ip -j route get 192.0.2.1": {"stdout": DEEP}}), "192.0.2.1")
    assert choice.dev is None and choice.error


def test_a_deep_manifest_fragment_is_a_problem_of_its_role(tmp_path: Path) -> None:
    fragments = tmp_path / "etc" / "dltune" / "expected.d"
    fragments.mkdir(parents=True)
    (fragments / "dl_env.json").write_text(DEEP)
    (fragments / "health.json").write_text(
        '{"schema_version": 1, "role": "health", "ib_ports": [], "x": Infinity}'
    )
    found, problems = read_manifest(HostFS(tmp_path))
    assert found == {} and "nested deeper" in problems["dl_env"] and "Infinity" in problems["health"]


# ------------------------------------------------------------------- C. FIFOs, sockets, devices


def special_files(directory: Path) -> dict[str, Path]:
    """A FIFO, a socket and a link to a character device, each named as a JSON file would be."""
    directory.mkdir(parents=True, exist_ok=True)
    fifo, sock, device = directory / "fifo.json", directory / "socket.json", directory / "device.json"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    device.symlink_to("/dev/zero")
    return {"a FIFO": fifo, "a socket": sock, "a character device": device}


def test_read_regular_refuses_what_is_not_a_regular_file_without_blocking(tmp_path: Path) -> None:
    for kind, path in special_files(tmp_path).items():
        with pytest.raises(safeio.NotRegularFileError, match=kind):
            safeio.read_regular(path)
        with pytest.raises(OSError):  # every caller that treats an unreadable file as data still does
            HostFS(tmp_path).read_text(path.name)
    with pytest.raises(IsADirectoryError):
        safeio.read_regular(tmp_path)
    (tmp_path / "big").write_bytes(b"x" * 100)
    assert len(safeio.read_regular(tmp_path / "big", max_bytes=10)) == 11


def test_report_of_a_directory_with_a_fifo_finishes_and_names_the_node_invalid(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    special_files(reports)
    (reports / "ok.json").write_text(json.dumps(envelope([result()])))
    done = run_child("report", str(reports), "--json", str(tmp_path / "merged.json"))
    assert done.returncode == 1, done.stderr
    merged = {n["host"]: n for n in json.loads((tmp_path / "merged.json").read_text())["nodes"]}
    assert merged["fifo"]["problem"] == "invalid: fifo.json: not a regular file (a FIFO)"
    assert merged["socket"]["problem"].startswith("invalid: socket.json")
    assert merged["device"]["problem"] == "invalid: device.json: not a regular file (a character device)"
    assert merged["ok"]["healthy"]


def test_an_audit_of_a_tree_with_fifos_finishes_within_its_timeout(tmp_path: Path) -> None:
    from tests import fabric_tree

    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "golden_ubuntu_server", root)
    shutil.copytree(
        FIXTURES / "data_ok_managed" / "etc" / "dltune", root / "etc" / "dltune", dirs_exist_ok=True
    )
    fabric_tree.pci_device(root, "0000:3b:00.0")
    fabric_tree.ib_port(root, fabric_tree.Port("mlx5_0"))
    for host_path in (
        "/etc/fstab",
        "/proc/self/mountinfo",
        "/etc/dltune/expected.d/data_disks.json",
        "/proc/meminfo",
        "/var/lib/dpkg/status",
        "/sys/bus/pci/devices/0000:3b:00.0/aer_dev_fatal",
        "/sys/class/infiniband/mlx5_0/ports/1/state",
        "/proc/4242/comm",
    ):
        path = root / host_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    done = run_child("audit", "--root", str(root), "--format", "json", "--timeout", "20")
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    judged = {r["id"]: r for r in results}
    assert judged["storage.fstab_parse"]["status"] == "fail"
    assert "not a regular file (a FIFO)" in json.dumps(judged["storage.data_noatime"])
    assert "system.audit_timeout" in judged and judged["system.audit_timeout"]["status"] == "pass"


def test_a_fifo_as_previous_or_as_an_output_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = special_files(tmp_path / "special")
    root = str(FIXTURES / "tmp_tmpfs_ok")
    done = run_child("audit", "--root", root, "--previous", str(files["a FIFO"]))
    assert done.returncode == 2 and "--previous" in one_line(done.stderr) and "FIFO" in done.stderr
    for argv, option in (
        (["audit", "--root", root, "--facts-file", str(files["a FIFO"])], "--facts-file"),
        (["report", str(FIXTURES), "--json", str(files["a character device"])], "--json"),
        (["report", str(FIXTURES), "--html", "/dev/null"], "--html"),
        (["bench", "--data", str(files["a FIFO"])], "--data"),
    ):
        code, _out, err = run_cli(capsys, *argv)
        assert code == 2 and option in one_line(err), argv
        assert "a FIFO" in err or "a character device: give a regular file" in err, argv
    assert files["a FIFO"].exists() and not files["a FIFO"].is_file()  # never replaced by a rename


def test_an_output_path_through_a_link_replaces_the_file_not_the_link(tmp_path: Path) -> None:
    """`--json /dev/stdout` with stdout redirected to a file: the rename once replaced /dev/stdout."""
    (tmp_path / "n.json").write_text(json.dumps(envelope([result()])))
    target = tmp_path / "merged.json"
    target.write_text("")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    done = run_child("report", str(tmp_path / "n.json"), "--json", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and json.loads(target.read_text())["nodes"][0]["host"] == "n"


# ------------------------------------------------------------------------------------ D. digits


@SOME
@given(text=st.text(max_size=45))
def test_decimal_reads_ascii_digits_only(text: str) -> None:
    value = decimal(text)
    plain = text != "" and all("0" <= c <= "9" for c in text) and len(text) <= 40
    assert (value is not None) == plain
    if plain:
        assert value == int(text)


@pytest.mark.parametrize("digits", FOREIGN_DIGITS)
def test_fabric_probes_take_no_foreign_digit_for_a_number(tmp_path: Path, digits: str) -> None:
    assert parse_aer(f"RxErr {digits}\nTOTAL_ERR_COR {digits}\n") == (None, {})
    files = [
        f"/p/{name}"
        for name in ("state", "phys_state", "rate", "link_layer", "c1", "c2", "c3", "c4", "c5", "c6")
    ]
    values = {files[0]: "4: ACTIVE", files[1]: "5: LinkUp", files[2]: "400 Gb/sec (4X NDR)", files[4]: digits}
    fs = HostFS(tmp_path)
    assert ports_from_values(fs, [("mlx5_0", digits, files)], values) == ()  # a port named "²" is no port
    (port,) = ports_from_values(fs, [("mlx5_0", "1", files)], values)
    assert port.counters == {}
    from tests import fabric_tree

    fabric_tree.pci_device(tmp_path, "0000:3b:00.0")
    (tmp_path / "sys/bus/pci/devices/0000:3b:00.0/current_link_width").write_text(f"{digits}\n")
    (device,) = read_fabric(fs, {}, None).pci
    assert device.link_width is None


def test_numbers_in_host_text_are_ascii_and_bounded() -> None:
    assert parse_rate("1.2.3 Gb/sec") == (None, None)  # was a ValueError out of the probe
    assert parse_rate("200 Gb/sec (2X NDR)") == (200.0, "2X")
    assert parse_nvrm("NVRM: Xid (PCI:0000:3b:00): ٧٩, pid=1").events == ()
    assert parse_nvrm("NVRM: Xid (PCI:0000:3b:00): " + "7" * 5000 + ", pid=1").events == ()
    assert [e.xid for e in parse_nvrm("NVRM: Xid (PCI:0000:3b:00): 79, pid=1").events] == [79]
    huge = parse_fstab("/dev/sda1 / ext4 defaults 0 " + "1" * 5000 + "\n/dev/sdb1 /d ext4 defaults ٣ 0\n")
    assert huge.entries == () and len(huge.unparsed) == 2
    assert parse_aer("RxErr " + "9" * 5000) == (None, {})
    assert _gts("nan GT/s") == 0.0 and _gts("inf GT/s") == 0.0 and _gts("١٦ GT/s") == 0.0
    assert _gts("16.0 GT/s PCIe") == 16.0
    assert not _kernel_at_least("٦.٨.0", (5, 12)) and _kernel_at_least("6.8.0-45-generic", (5, 12))


def test_gpu_indices_are_ascii_digits(capsys: pytest.CaptureFixture[str]) -> None:
    for gpus in ("١", "0,²", "-1", "1_0", " ", ","):  # noqa: RUF001
        code, _out, err = run_cli(capsys, "bench", "--gpus", gpus)
        assert code == 2 and "--gpus" in one_line(err), gpus


# ------------------------------------------------------------------------ E. the error boundary


@pytest.fixture
def long_name(tmp_path: Path) -> Path:
    return tmp_path / ("x" * 300) / "out.json"


def test_a_name_too_long_is_one_line_naming_the_option(
    long_name: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(FIXTURES / "tmp_tmpfs_ok")
    for argv, option in (
        (["audit", "--root", root, "--facts-file", str(long_name)], "--facts-file"),
        (["audit", "--root", root, "--textfile-dir", str(long_name)], "--textfile-dir"),
        (["audit", "--root", str(long_name)], "--root"),
        (["report", str(long_name)], "PATHS"),
        (["report", str(FIXTURES), "--html", str(long_name)], "--html"),
    ):
        code, _out, err = run_cli(capsys, *argv)
        assert code == 2 and option in one_line(err) and "File name too long" in err, argv


@pytest.mark.parametrize(
    ("raised", "shown"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/scratch/job/.dltune.meta"),
            "/scratch/job/.dltune.meta",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/secret/x.json"),
            "/secret/x.json: Permission denied",
        ),
        (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"), "/a -> /b"),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "srun-not-installed"),
            "srun-not-installed: no such command",
        ),
    ],
)
def test_an_oserror_from_anywhere_is_one_line_naming_its_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raised: OSError, shown: str
) -> None:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise raised

    monkeypatch.setattr(node_files, "load", fail)
    code, out, err = run_cli(capsys, "report", str(FIXTURES))
    assert code == 2 and out == ""
    assert one_line(err).startswith("dltune report: ") and shown in err


def test_a_missing_command_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def load(*_args: Any, **_kwargs: Any) -> Any:
        subprocess.run(["dltune-test-no-such-program", "--version"], check=False)

    monkeypatch.setattr(node_files, "load", load)
    code, _out, err = run_cli(capsys, "report", str(FIXTURES))
    assert code == 2 and "dltune-test-no-such-program: no such command on PATH" in one_line(err)


def test_a_missing_srun_ends_the_broadcast_in_one_line(tmp_path: Path) -> None:
    source, to = tmp_path / "data", tmp_path / "local"
    source.mkdir()
    to.mkdir()
    (source / "a.bin").write_bytes(b"a" * 100)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()  # a PATH without srun, sbcast or scontrol
    env = {"PATH": str(bin_dir), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2"}
    done = run_child("stage", "--broadcast", str(source), "--to", str(to), env=env)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert said and "srun" in said[-1], done.stderr


def test_a_bug_is_one_line_and_its_traceback_only_on_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyError("no such result")

    monkeypatch.setattr(node_files, "load", broken)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    code, _out, err = run_cli(capsys, "report", str(FIXTURES))
    assert code == 2 and "dltune bug" in one_line(err) and "KeyError" in err
    code, _out, err = run_cli(capsys, "--debug", "report", str(FIXTURES))
    assert code == 2 and "Traceback" in err and "dltune bug" in err.splitlines()[-1]
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    code, _out, err = run_cli(capsys, "report", str(FIXTURES))
    assert code == 2 and "Traceback" in err


def test_the_entry_point_runs_the_boundary() -> None:
    done = run_child("audit", "--only", "nonsense")
    assert done.returncode == 2 and "--only" in one_line(done.stderr)
    done = run_child("report")
    assert done.returncode == 2 and "paths" in one_line(done.stderr).lower()


@pytest.mark.skipif(
    not nobody_can_run_dltune(),
    reason="needs root, setpriv, and this checkout's interpreter readable by an ordinary user",
)
def test_an_unsearchable_directory_as_another_user_is_one_line(tmp_path: Path) -> None:
    """Root searches every directory: the case needs an ordinary user (setpriv, as CI runs as root)."""
    locked = tmp_path / "locked"
    (locked / "sub").mkdir(parents=True)
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("needs setpriv to run as an ordinary user")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    for argv, option in (
        (["audit", "--root", str(locked / "sub")], "--root"),
        (["report", str(locked / "sub" / "n.json")], "PATHS"),
        (
            ["audit", "--root", str(FIXTURES / "tmp_tmpfs_ok"), "--facts-file", str(locked / "sub" / "f")],
            "--facts-file",
        ),
    ):
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "dltune.cli", *argv],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            cwd="/",
            check=False,
        )
        if "No module named" in done.stderr or "Permission denied: '" + sys.executable in done.stderr:
            pytest.skip("this Python is not usable by an ordinary user here")
        assert done.returncode == 2, (argv, done.stderr)
        assert option in one_line(done.stderr) and "Permission denied" in done.stderr, argv


def test_an_output_file_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk filled up between the check and the write: one whole line, however long the path."""
    import dltune.files.dirfd

    def full(path: Any, text: str, mode: int = 0o644) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dltune.files.dirfd, "write_atomically", full)
    facts = tmp_path / ("a-long-directory-name-" * 4) / "dltune.fact"
    facts.parent.mkdir()
    code, _out, err = run_cli(
        capsys, "audit", "--root", str(FIXTURES / "tmp_tmpfs_ok"), "--facts-file", str(facts)
    )
    assert code == 2 and str(facts) in one_line(err) and "No space left on device" in err


# ------------------------------------------------------------------------------ F. dltune report

NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999", "-1e400")


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize("where", ["metrics", "evidence"])
def test_a_non_finite_number_makes_its_node_invalid_and_never_reaches_the_merged_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], number: str, where: str
) -> None:
    text = json.dumps(envelope([result("bench.matmul", **{where: {"tflops": 0.5}})])).replace("0.5", number)
    (tmp_path / "bad.json").write_text(text)
    (tmp_path / "ok.json").write_text(json.dumps(envelope([result()])))
    merged = tmp_path / "out" / "merged.json"
    merged.parent.mkdir()
    code, _out, _err = run_cli(
        capsys, "report", str(tmp_path), "--json", str(merged), "--html", str(merged.with_suffix(".html"))
    )
    assert code == 1
    nodes = {n["host"]: n for n in safeio.loads(merged.read_text())["nodes"]}  # strict: no NaN in it
    assert nodes["bad"]["problem"].startswith("invalid: bad.json") and nodes["bad"]["results"] == []
    assert nodes["ok"]["healthy"]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(areas=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=300, unique=True))
def test_unknown_areas_share_one_column(areas: list[str]) -> None:
    node = cluster.NodeReport("n", [result(f"{area}.x", "fail", area=area) for area in areas])
    page = cluster.render_html([node], "now")
    header = page.split('<table class="matrix"><tr>', 1)[1].split("</tr>", 1)[0]
    known = [a for a in AREAS if a in areas]
    assert header.count("<th>") == 1 + len(known) + (1 if set(areas) - set(AREAS) else 0)


def test_a_bar_chart_stays_finite_for_any_finite_numbers() -> None:
    nodes = [
        cluster.NodeReport(f"n{i}", [result("bench.train_synthetic", metrics={"images_per_s": value})])
        for i, value in enumerate((-1e308, -1e-308, 1e308, 0.0))
    ]
    (chart,) = cluster.bench_charts(nodes)
    assert "inf" not in chart and "nan" not in chart


# ----------------------------------------------------------------------------- G. the interpreter


def test_an_interpreter_without_the_data_filter_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_tar_data_filter()  # this one has it
    monkeypatch.delattr(tarfile, "data_filter")
    with pytest.raises(UnsupportedPython, match=r"Python 3\.[0-9]+\.[0-9]+") as refused:
        require_tar_data_filter()
    assert sys.executable in str(refused.value)

    def stage_like(*_args: Any, **_kwargs: Any) -> Any:
        require_tar_data_filter()

    monkeypatch.setattr(node_files, "load", stage_like)
    code, _out, err = run_cli(capsys, "report", str(FIXTURES))
    assert code == 2 and "'data' filter" in one_line(err) and "dltune bug" not in err
