"""The corpus of real outputs in tests/fixtures/real/<kind>/: each file is a header (SOURCE, COMMAND,
EXPECT, QUOTE lines: where the sample was published, the verdict it must get, and the source's own
words that justify that verdict), a line of four dashes, then the output exactly as published."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT

CORPUS = REPO_ROOT / "tests" / "fixtures" / "real"
SEPARATOR = "----\n"


@dataclass(frozen=True)
class Sample:
    kind: str
    name: str
    header: dict[str, str]
    body: str

    @property
    def expect(self) -> str:
        return self.header["EXPECT"]

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def load(path: Path) -> Sample:
    text = path.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n" + SEPARATOR)
    if not sep:
        raise ValueError(f"{path}: no '----' line between the header and the sample")
    header = {}
    for line in head.splitlines():
        key, _, value = line.partition(": ")
        header[key] = value
    return Sample(path.parent.name, path.stem, header, body)


def samples(kind: str) -> list[Sample]:
    return [load(path) for path in sorted((CORPUS / kind).glob("*.txt"))]


def all_samples() -> list[Sample]:
    return [load(path) for path in sorted(CORPUS.glob("*/*.txt"))]
