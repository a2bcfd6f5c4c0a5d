"""`octet report` in a real browser: headless Chromium (Debian's `chromium`, installed by
scripts/setup.sh) opens a report rendered from the fixed runs of tests/report/fixtures. It
fails on a console message or a script error, on an SVG figure the browser lays out with no
size or a curve of no length, and on a blank screenshot (one colour). The report itself has no
script: the checks are a script injected into a copy of the page."""
import os
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report", "fixtures")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("chromium is not installed: run scripts/setup.sh", allow_module_level=True)

# Root in a container needs --no-sandbox; no GPU here.
BROWSER = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--enable-logging=stderr", "--v=0"]

# Runs in the page after it loaded: sets document.title to "octet-report-ok" or to what failed.
CHECK = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message)));
</script>"""
VERIFY = """<script>
(function () {
  const problems = window.__errors.slice();
  const svgs = document.querySelectorAll("svg");
  if (svgs.length < 4) problems.push("only " + svgs.length + " svg figures");
  svgs.forEach((s, i) => {
    const r = s.getBoundingClientRect();
    if (!(r.width > 50 && r.height > 50)) problems.push("svg " + i + " is " + r.width + "x" + r.height);
  });
  const paths = document.querySelectorAll("path.series");
  if (paths.length === 0) problems.push("no curves");
  paths.forEach((p, i) => { if (!(p.getTotalLength() > 0)) problems.push("curve " + i + " has no length"); });
  if (document.querySelectorAll("rect.cell").length === 0) problems.push("no heatmap cells");
  document.title = problems.length ? "octet-report-fail: " + problems.join("; ") : "octet-report-ok";
})();
</script>"""


def render(tmp_path):
    out = str(tmp_path / "report.html")
    proc = subprocess.run([OCTET, "report", os.path.join(FIXTURES, "bf16"),
                           os.path.join(FIXTURES, "fp8"), os.path.join(FIXTURES, "old_format.jsonl"),
                           "-o", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def console_lines(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def png_pixels(path):
    """The RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    out = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int64)
        if kind == 0:
            cur = row
        elif kind == 1:  # Sub: a running sum per channel
            cur = np.cumsum(row.reshape(width, bpp), axis=0).reshape(-1) % 256
        elif kind == 2:  # Up
            cur = (row + prior) % 256
        else:  # Average or Paeth: each byte needs the one decoded before it
            cur, up, filt = bytearray(stride), prior.tolist(), row.tolist()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = up[i]
                c = up[i - bpp] if i >= bpp else 0
                if kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (filt[i] + pred) & 255
            cur = np.frombuffer(bytes(cur), np.uint8).astype(np.int64)
        out[y] = cur
        prior = cur
    return out.reshape(height, width, bpp)[:, :, :3]


def test_the_report_opens_without_errors_and_every_figure_has_a_size(tmp_path):
    page = open(render(tmp_path), encoding="utf-8").read()
    assert "<script" not in page  # the report has none; the checks below are injected
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("<head>", "<head>" + CHECK, 1)
                       .replace("</body>", VERIFY + "</body>", 1), encoding="utf-8")
    proc = subprocess.run(BROWSER + ["--dump-dom", checked.as_uri()], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", proc.stdout, re.S)
    assert title, proc.stdout[:500]
    assert title.group(1) == "octet-report-ok", title.group(1)
    assert console_lines(proc.stderr) == []


def test_the_screenshot_is_not_blank(tmp_path):
    report = render(tmp_path)
    shot = tmp_path / "report.png"
    proc = subprocess.run(BROWSER + ["--window-size=1000,1300", f"--screenshot={shot}",
                                     "file://" + os.path.abspath(report)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    assert console_lines(proc.stderr) == []
    keep = os.environ.get("OCTET_REPORT_SCREENSHOT")  # a copy to look at
    if keep:
        shutil.copy(shot, keep)
    pixels = png_pixels(str(shot))
    assert pixels.shape[:2] == (1300, 1000)
    colours, counts = np.unique(pixels.reshape(-1, 3), axis=0, return_counts=True)
    # A page with text, curves in several colours and tables: many colours, and the
    # background covers far from all of it. A blank page is one colour.
    assert len(colours) > 20, len(colours)
    assert counts.max() < 0.97 * pixels.shape[0] * pixels.shape[1], counts.max()
    # The run colours of the curves (palette_color 0 and 1) are on the screen.
    for rgb in [(0x1F, 0x6F, 0xB4), (0xE0, 0x67, 0x1B)]:
        assert np.any(np.all(pixels == rgb, axis=-1)), rgb
