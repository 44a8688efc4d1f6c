"""The HTML report as a person sees it, in headless Chromium (Debian's `chromium` package) at 1,400 x
900 pixels. 200 nodes of random findings: every area header lies inside the window and is the element
actually drawn at its own centre (an overflow that hides or covers it does not count), the page does
not scroll sideways, the bench charts of 200 nodes x 8 GPUs stay under 600 pixels high and inside the
window, with no label running into its bars. The generated fleets of 5 and 200 nodes
(tests/report_fleet.py): the first finding is on the first screen, no word on the page is broken
across lines (a node's name, a check's id: `gpu00/2`, `env.cublas_wor/kspace` were), the stale and
invalid nodes are grey, and the first screen is what docs/report-*-nodes.png show."""

from __future__ import annotations

import html
import json
import os
import random
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from dltune.fleet.cluster import render_html
from dltune.fleet.node_files import load
from dltune.model import AREAS
from tests import report_fleet

SCREEN_WIDTH = 1400
# What a large audit produces: every area, several checks in each, long check ids and subjects.
CHECKS_PER_AREA = 7
GPUS_PER_NODE = 8
# A chart at 200 x 8 GPUs fits one screen's height (it grew 22 px per GPU: 35,000 px).
CHART_MAX_HEIGHT = 600

MEASURE = """
<script>
window.addEventListener("load", () => {
  // The grid follows the report's first section (what to fix first): measured where it is drawn.
  document.querySelector("table.matrix").scrollIntoView();
  const headers = [...document.querySelectorAll("table.matrix tr:first-child th")].slice(1);
  const found = headers.map((th) => {
    const box = th.getBoundingClientRect();
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    return {text: th.textContent, left: box.left, right: box.right, drawn: !!hit && th.contains(hit)};
  });
  const out = document.createElement("pre");
  out.id = "measured";
  const charts = [...document.querySelectorAll("svg")].map((svg) => {
    const box = svg.getBoundingClientRect();
    const labels = [...svg.querySelectorAll("text")].filter((t) => t.getAttribute("x") === "0"
      && Number(t.getAttribute("y")) > 20);
    return {
      title: svg.querySelector("title").textContent,
      width: box.width, height: box.height, right: box.right,
      widest_label: Math.max(0, ...labels.map((t) => t.getBBox().width)),
      text_right: Math.max(...[...svg.querySelectorAll("text")]
        .map((t) => t.getBBox().x + t.getBBox().width)),
      svg_width: svg.width.baseVal.value,
      first_bar: Math.min(...[...svg.querySelectorAll("rect")].map((r) => Number(r.getAttribute("x")))),
    };
  });
  out.textContent = JSON.stringify({
    charts: charts,
    headers: found,
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
  });
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str:
    found = report_fleet.chromium()
    if found is None:
        if os.environ.get("DLTUNE_LAB_REQUIRED"):
            pytest.fail("chromium is not installed (make pytest installs Debian's chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def measure(browser: str, file: Path, page: str, script: str) -> Any:
    """What ``script`` measured in the page (its JSON in <pre id="measured">), drawn by Chromium."""
    file.write_text(page.replace("</body>", script + "</body>"))
    done = report_fleet.browse(browser, file, "--dump-dom")
    match = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, flags=re.DOTALL)
    assert match, f"no measurement from chromium (rc {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def write_nodes(directory: Path, count: int) -> None:
    rng = random.Random(7)  # noqa: S311 - test data, not secrets
    for n in range(count):
        results = []
        for area in AREAS:
            for c in range(CHECKS_PER_AREA):
                status = rng.choices(["pass", "warn", "fail", "skip", "error"], [80, 8, 4, 7, 1])[0]
                results.append(
                    {
                        "id": f"{area}.a_rather_long_check_name_{c}",
                        "area": area,
                        "status": status,
                        "subject": f"/data/volume-{c}/with/a/long/path",
                        "summary": f"{status}: what the check found on this node, in a sentence",
                    }
                )
        document = {
            "schema_version": 1,
            "host": f"gpu-node-{n:03d}.cluster.example.org",
            "valid_until": "2999-01-01T00:00:00+00:00",
            "results": results,
        }
        (directory / f"gpu-node-{n:03d}.audit.json").write_text(json.dumps(document))
        # The bench of an 8-GPU node: one matmul figure per GPU, one training figure per node.
        bench = [
            {
                "id": "bench.matmul",
                "area": "bench",
                "status": "pass",
                "subject": f"cuda:{g}:bf16",
                "summary": "bf16 matmul",
                "metrics": {"tflops": rng.uniform(760.0, 800.0) if rng.random() > 0.005 else 450.0},
            }
            for g in range(GPUS_PER_NODE)
        ]
        bench.append(
            {
                "id": "bench.train_synthetic",
                "area": "bench",
                "status": "pass",
                "subject": "cuda:0",
                "summary": "resnet50",
                "metrics": {"images_per_s": rng.uniform(2000.0, 3000.0)},
            }
        )
        (directory / f"gpu-node-{n:03d}.bench.json").write_text(json.dumps({**document, "results": bench}))


def test_two_hundred_nodes_fit_a_1400_pixel_screen(tmp_path: Path) -> None:
    browser = chromium()
    reports = tmp_path / "reports"
    reports.mkdir()
    write_nodes(reports, 200)
    page = render_html(load([reports]), "2026-11-24T00:00:00+00:00")
    assert page.count('<tr><th><span class="tok">gpu-node-') == 200  # every node has a finding
    measured = measure(browser, tmp_path / "report.html", page, MEASURE)
    assert measured["innerWidth"] == SCREEN_WIDTH
    headers = measured["headers"]
    assert [h["text"] for h in headers] == list(AREAS)
    for header in headers:
        assert header["left"] >= 0 and header["right"] <= SCREEN_WIDTH, header
        assert header["drawn"], f"{header['text']} is covered or clipped"
    assert measured["scrollWidth"] <= SCREEN_WIDTH, "the page scrolls sideways"
    charts = measured["charts"]
    assert {c["title"] for c in charts} == {
        "matmul bf16 per GPU",
        "training throughput (synthetic data) per node",
    }
    for chart in charts:
        assert chart["height"] <= CHART_MAX_HEIGHT and chart["right"] <= SCREEN_WIDTH, chart
        # Every label ends before the bars begin: none is clipped by or drawn over a bar.
        assert 0 < chart["widest_label"] <= chart["first_bar"], chart
        assert chart["text_right"] <= chart["svg_width"], f"a text runs out of its chart: {chart}"
    # Long check ids, subjects and node names by the thousand: none broken inside a word.
    layout = measure(browser, tmp_path / "layout.html", page, LAYOUT)
    assert layout["words"] > 10_000 and layout["broken"] == [] and layout["split_tokens"] == [], layout[
        "broken"
    ][:20]


# The generated fleets, measured where they are drawn: the first finding's box (the window not
# scrolled); every word of the page's text that lies on more than one line (a break inside it), except
# after a "/" of a long path (the page marks those <wbr>, so a path's parts are text nodes of their own);
# every token the page never breaks (node names, check ids, statuses) on one line; each grid row's node,
# class and cell backgrounds.
LAYOUT = """
<script>
window.addEventListener("load", () => {
  window.scrollTo(0, 0);
  const first = document.querySelector("table.findings tr.finding").getBoundingClientRect();
  const broken = [];
  let words = 0;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("svg, script, style")) continue;
    for (const word of node.textContent.matchAll(/\\S+/g)) {
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0)
        .map((r) => Math.round(r.top)));
      words += 1;
      if (lines.size > 1) broken.push(word[0]);
    }
  }
  const tokens = [...document.querySelectorAll(".tok")].filter((t) => t.getClientRects().length);
  const split = tokens.filter((t) => t.getClientRects().length > 1).map((t) => t.textContent);
  const rows = [...document.querySelectorAll("table.matrix tr")].slice(1).map((tr) => ({
    host: tr.querySelector("th .tok").textContent,
    grey: tr.classList.contains("grey"),
    backgrounds: [...tr.querySelectorAll("td")].map((td) => getComputedStyle(td).backgroundColor),
    colours: [...tr.querySelectorAll("td, th, span, a")].map((e) => getComputedStyle(e).color),
  }));
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    first_finding: {top: first.top, bottom: first.bottom},
    findings_before_grid: document.querySelector("table.findings").getBoundingClientRect().top
      < document.querySelector("table.matrix").getBoundingClientRect().top,
    broken: broken, words: words, tokens: tokens.length, split_tokens: split, rows: rows,
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  });
  document.body.appendChild(out);
});
</script>
"""
GREY = "rgb(238, 238, 238)"
GREY_TEXT = "rgb(117, 117, 117)"


def png_size(file: Path) -> tuple[int, int]:
    data = file.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", file
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize("count", [5, 200])
def test_the_generated_fleet_shows_its_findings_first_unbroken_and_its_stale_nodes_grey(
    tmp_path: Path, count: int
) -> None:
    browser = chromium()
    kinds = report_fleet.write_fleet(tmp_path / "nodes", count)
    page = report_fleet.fleet_page(tmp_path, count).read_text()
    measured = measure(browser, tmp_path / "measured.html", page, LAYOUT)
    width, height = report_fleet.SCREEN
    assert measured["innerWidth"] == width and measured["scrollWidth"] <= width
    # The first finding lies whole on the first screen (the page's layout depends on the width only:
    # --dump-dom's window keeps 87 pixels of its height for itself), above the grid.
    assert 0 < measured["first_finding"]["top"] < measured["first_finding"]["bottom"] <= height, measured
    assert measured["findings_before_grid"]
    # No word of the page is broken across lines, and every name, id and status is one line.
    assert measured["words"] > 100 * count**0.5 and measured["tokens"] > count
    assert measured["broken"] == [] and measured["split_tokens"] == [], measured["broken"][:20]
    # The grid holds the nodes with findings (the others are one line); stale, invalid and unreachable
    # ones are grey, every cell and every text of their row: no status colour on what is old or unknown.
    rows = {row["host"]: row for row in measured["rows"]}
    greyed = kinds["stale"] + kinds["invalid"] + kinds["unreachable"]
    assert set(rows) == {host for kind, hosts in kinds.items() if kind != "clean" for host in hosts}
    for host in greyed:
        assert rows[host]["grey"] and set(rows[host]["backgrounds"]) == {GREY}, rows[host]
        assert set(rows[host]["colours"]) == {GREY_TEXT}, rows[host]
    for host in kinds["nfs"] + kinds["ecc"]:
        assert not rows[host]["grey"] and "rgb(198, 40, 40)" in rows[host]["backgrounds"], rows[host]
    assert f"{len(kinds['clean'])} node(s) with no finding: " in page
    # The first screen, as docs/report-*-nodes.png show it (python -m tests.report_fleet renews them).
    shot = tmp_path / f"report-{count}-nodes.png"
    report_fleet.screenshot(browser, tmp_path / "report.html", shot)
    assert png_size(shot) == report_fleet.SCREEN
    assert png_size(Path(__file__).parents[2] / "docs" / shot.name) == report_fleet.SCREEN
