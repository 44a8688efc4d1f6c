"""`read_driver_packages` parses only the stanzas that name a driver package (a start-up cost of every
audit): it must find exactly what splitting every stanza into fields finds, on generated status files
(names that almost match, a name line that is not first, blank-line runs, continuation lines, two name
lines in one stanza)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dltune.probes.hostfs import HostFS
from dltune.probes.packages import DPKG_STATUS, DRIVER_PACKAGE, read_driver_packages
from dltune.snapshot import Package


def every_stanza(text: str) -> tuple[Package, ...]:
    """The plain reading: every stanza split into its fields."""
    found = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        name, status = fields.get("Package", ""), fields.get("Status", "").split()
        if DRIVER_PACKAGE.match(name) and len(status) == 3 and status[2] == "installed":
            found.append(Package(name, fields.get("Version", ""), held=status[0] == "hold"))
    return tuple(sorted(found, key=lambda p: p.name))


def read(tmp_path: Path, text: str) -> tuple[Package, ...] | None:
    target = tmp_path / DPKG_STATUS.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return read_driver_packages(HostFS(tmp_path))


NAMES = st.sampled_from(
    [
        "nvidia-driver-550",
        "libnvidia-compute-550",
        "linux-modules-nvidia-550-generic",
        "nvidia-fabricmanager-550",
        "xserver-xorg-video-nvidia-550",
        "libnvidia",
        "nvidia",
        "python3-nvidia-ml",
        "libcuda1",
        "nvidiax",
        "bash",
    ]
)
STATUS = st.sampled_from(["install ok installed", "hold ok installed", "deinstall ok config-files", "x"])
FIELD_LINE = st.one_of(
    st.builds(lambda n: f"Package: {n}", NAMES),
    st.builds(lambda n: f"Package:{n}", NAMES),
    st.builds(lambda s: f"Status: {s}", STATUS),
    st.just("Version: 550.54.15-0ubuntu1"),
    st.just(" continuation: Package: nvidia-driver-1"),
    st.just("Description: the nvidia-driver-550 package"),
)
STANZA = st.lists(FIELD_LINE, min_size=1, max_size=6).map("\n".join)
SEPARATOR = st.sampled_from(["\n\n", "\n\n\n", "\n\n\n\n"])


@settings(max_examples=300, deadline=None)
@given(stanzas=st.lists(STANZA, max_size=8), separator=SEPARATOR, tail=st.sampled_from(["", "\n", "\n\n"]))
def test_generated_status_files_give_what_every_stanza_gives(
    tmp_path_factory: pytest.TempPathFactory, stanzas: list[str], separator: str, tail: str
) -> None:
    text = separator.join(stanzas) + tail
    assert read(tmp_path_factory.mktemp("dpkg"), text) == every_stanza(text)
