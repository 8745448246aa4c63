"""The HTML report in a real browser: Debian's chromium, headless, driven by playwright.

The page must load offline with no console error and no request leaving file://,
every plot must have drawn its traces, and the screenshot must not be blank; it is
kept as an artifact (the pytest tmp dir, and $VPUC_ARTIFACTS when set).  Without
chromium the test fails, saying how to install it (.ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.sim.simlib import run_cli

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PLOTS = ("timeline", "layers", "roofline", "utilization", "ddr")
VIEWPORT = {"width": 1300, "height": 900}


def browser_or_fail():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium with `apt-get update && "
                    "apt-get install -y chromium` (.ci/run does this before the tests)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: `pip install -e '.[test]'` (its wheel ships the "
                    "driver; no `playwright install` is needed, the test uses /usr/bin/chromium)")
    return sync_playwright


@contextmanager
def chromium(profile: Path):
    """A headless Debian chromium context (``browser_or_fail`` says how to get one),
    closed on the way out."""
    sync_playwright = browser_or_fail()
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport=VIEWPORT)
        try:
            yield context
        finally:
            context.close()


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered RGB(A) rows of an 8-bit PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color = header[:4]
    assert depth == 8 and color in (2, 6), header
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc
                                      else corner)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def colours(data: bytes, step: int = 7) -> int:
    """How many distinct colours a sample of the screenshot's pixels has."""
    width, height, rows = png_pixels(data)
    bpp = len(rows[0]) // width
    return len({row[x * bpp:x * bpp + 3] for row in rows[::step] for x in range(0, width, step)})


def render(page, html: Path) -> tuple[list[str], list[str]]:
    errors, remote = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if not r.request.url.startswith("file://"):
            remote.append(r.request.url)
            r.abort()
        else:
            r.continue_()
    page.route("**/*", route)
    page.goto(html.as_uri())
    page.wait_for_function("document.querySelectorAll('.plot-container .main-svg').length >= 5")
    return errors, remote


def make_report(tmp_path, capsys, monkeypatch, source: str) -> Path:
    html = tmp_path / "report.html"
    code, _, err = run_cli(["run", source, "--timing-only", "--report-dir", tmp_path / "dir"],
                           capsys, monkeypatch)
    assert code == 0, err
    code, out, err = run_cli(["report", tmp_path / "dir", "-o", html], capsys, monkeypatch)
    assert code == 0 and str(html) in out, err
    return html


def conv_relu_sigmoid(tmp_path) -> str:
    from tests.sim.test_layer_reports import conv_relu_sigmoid as build
    return build(tmp_path / "crs.onnx")


@pytest.mark.parametrize("source", ["examples/graph_conv.vir", "onnx:conv_relu_sigmoid"])
def test_report_renders_in_chromium(source, tmp_path, capsys, monkeypatch):
    from vpuc.report.data import read_report_dir
    from vpuc.report.plots import FIGURES
    if source.startswith("onnx:"):
        source = conv_relu_sigmoid(tmp_path)
    html = make_report(tmp_path, capsys, monkeypatch, source)
    data = read_report_dir(tmp_path / "dir")
    traces = {key: len(make(data).data) for key, make in FIGURES}
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        errors, remote = render(page, html)
        counts = {key: page.locator(f"#plot-{key} g.trace").count() for key in PLOTS}
        bars = page.locator("#plot-timeline .barlayer g.point").count()
        points = page.locator("#plot-roofline .scatterlayer path.point").count()
        shot = page.screenshot(full_page=True)
        blank = context.new_page()
        blank.set_viewport_size(VIEWPORT)
        blank.goto("about:blank")
        empty = blank.screenshot()
    assert errors == [] and remote == []
    for key in PLOTS:              # every trace drew (the timeline's twice: its range slider)
        assert counts[key] >= traces[key] > 0, (key, counts, traces)
    assert bars >= len(data.tasks)
    macs_layers = sum(1 for r in data.compute if r["macs"])
    assert points >= macs_layers > 0
    assert colours(empty) == 1     # the check itself: a blank page is one colour
    assert colours(shot) > 20
    target = tmp_path / "report.png"
    target.write_bytes(shot)
    if os.environ.get("VPUC_ARTIFACTS"):
        artifacts = Path(os.environ["VPUC_ARTIFACTS"])
        artifacts.mkdir(parents=True, exist_ok=True)
        stem = Path(source).stem
        shutil.copy(target, artifacts / f"report-{stem}.png")
        shutil.copy(html, artifacts / f"report-{stem}.html")


def test_report_of_a_missing_directory_is_an_error(tmp_path, capsys, monkeypatch):
    code, _, err = run_cli(["report", tmp_path / "nope"], capsys, monkeypatch)
    assert code == 1 and "not a directory" in err


def test_report_of_an_incomplete_directory_names_the_missing_files(tmp_path, capsys,
                                                                   monkeypatch):
    (tmp_path / "summary.json").write_text("{}")
    code, _, err = run_cli(["report", tmp_path], capsys, monkeypatch)
    assert code == 1 and "missing compute_report.csv" in err and "Traceback" not in err


def test_run_html_writes_the_report_alone(tmp_path, capsys, monkeypatch):
    html = tmp_path / "run.html"
    code, _, err = run_cli(["run", "examples/clamp.vir", "--timing-only", "--html", html],
                           capsys, monkeypatch)
    assert code == 0, err
    text = html.read_text()
    assert text.count('id="plot-') == len(PLOTS) and "<script src=" not in text


def test_run_html_to_stdout_is_a_usage_error(capsys, monkeypatch):
    code, _, err = run_cli(["run", "examples/clamp.vir", "--html", "-"], capsys, monkeypatch)
    assert code == 2 and "--html writes a file" in err


def test_report_of_a_corrupt_summary_is_an_error(tmp_path, capsys, monkeypatch):
    code, _, err = run_cli(["run", "examples/clamp.vir", "--timing-only", "--report-dir",
                            tmp_path], capsys, monkeypatch)
    assert code == 0, err
    (tmp_path / "summary.json").write_text("{not json")
    code, _, err = run_cli(["report", tmp_path], capsys, monkeypatch)
    assert code == 1 and "cannot read the report files" in err and "Traceback" not in err


def test_roofline_labels_do_not_overlap_in_chromium(tmp_path, capsys, monkeypatch):
    """A chain of identical convolutions: their roofline points coincide, and every label
    plotly draws there must be clear of the others, measured on the rendered page (drawn
    all at "top center", they overprinted)."""
    from tests.report.test_roofline_labels import conv_chain
    from vpuc.report.plots import ROOFLINE_LABELS
    html = make_report(tmp_path, capsys, monkeypatch,
                       conv_chain(tmp_path / "chain.onnx", ROOFLINE_LABELS + 4))
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        errors, remote = render(page, html)
        boxes = page.evaluate("""() => [...document.querySelectorAll(
            '#plot-roofline .scatterlayer .textpoint text')]
            .filter(t => t.textContent.trim() !== '')
            .map(t => { const r = t.getBoundingClientRect();
                        return [r.left, r.top, r.right, r.bottom]; })""")
    assert errors == [] and remote == []
    assert boxes and all(b[2] > b[0] and b[3] > b[1] for b in boxes)
    overlapping = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                   if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert overlapping == []
