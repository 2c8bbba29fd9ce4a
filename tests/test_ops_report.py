"""test_ops_report.py: `batchscale report RUN_DIR` (issue 20, part 6).

A run with validation, the noise scale, the MFU, checkpoints and one skipped
step (a NaN injected into a gradient), stopped and resumed so that some steps
appear twice in its metrics, then `batchscale report`:

- page: index.html and nine PNGs (loss, lr, batch, throughput, mfu, comm,
  layers, noise, events); each PNG is 760x360, and the page holds each one
  inline as a data URI with the same bytes (self-contained: nothing else is
  loaded); the summary counts each step once.
- refusals: no run directory, no metrics, a metrics line that is not JSON:
  one line, exit 1.
- browser (`--browser`, its own CTest entry): headless Chromium (Debian's)
  loads the page: no script error on its console, the page's script finds
  every chart image decoded (body data-charts="9/9"), and a screenshot of the
  page is a PNG with content. The same check run on a copy of the page with a
  broken script reports that error (so the check can fail). Where Chromium is
  missing or cannot start, it exits 77 (skipped) with the reason.
"""
import base64
import os
import re
import shutil
import struct
import subprocess
import sys
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import BATCHSCALE, SKIP  # noqa: E402

CHARTS = ["loss", "lr", "batch", "throughput", "mfu", "comm", "layers", "noise", "events"]
STEPS = 12


def png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def png_distinct_bytes(data):
    """Distinct byte values of a PNG's decompressed image data (a blank page has very few)."""
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def report(args, check=True):
    p = subprocess.run([BATCHSCALE, "report"] + args, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"report {args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


class Report(bstest.CorpusTest):
    CORPUS_BYTES = 40_000

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.run_dir = os.path.join(cls.dir, "run")
        d = cls.data
        args = ["train", "--data", os.path.join(d, "train_000000.bin"), "--val-data", os.path.join(d, "val_000000.bin"),
                "--layers", "2", "--heads", "2", "--channels", "32", "--seq-len", "32", "--micro-batch", "2",
                "--global-batch", "4", "--lr", "3e-3", "--warmup", "2", "--eval-every", "4", "--val-batches", "2",
                "--sample-tokens", "0", "--threads", "1", "--noise-scale", "--ckpt-every", "4", "--peak-gflops", "100",
                "--debug-inject-fault", "nan:0:3", "--out", cls.run_dir, "--metrics", os.path.join(cls.run_dir, "m.jsonl"),
                "--quiet"]
        bstest.run(args + ["--steps", str(STEPS - 2)])  # ends at step 10, checkpoint at 8 and 10
        # resume from step 8: steps 9 and 10 are written again (the metrics keep lines up to the checkpoint's step,
        # so append the old ones back to make the file hold a repeated step, as a run killed after step 10 would)
        with open(os.path.join(cls.run_dir, "m.jsonl")) as f:
            cls.first_lines = f.read().splitlines()
        shutil.rmtree(os.path.join(cls.run_dir, "ckpt", "step_00000010"))
        bstest.run(args + ["--steps", str(STEPS), "--resume", "latest"])
        with open(os.path.join(cls.run_dir, "m.jsonl")) as f:
            lines = f.read().splitlines()
        with open(os.path.join(cls.run_dir, "m.jsonl"), "w") as f:
            f.write("\n".join(cls.first_lines[:10] + lines[8:]) + "\n")  # steps 1-10, then 9-12 again
        cls.out = report([cls.run_dir]).stdout
        cls.page_path = os.path.join(cls.run_dir, "report", "index.html")

    def test_page_and_pngs(self):
        self.assertIn(f"(9 charts, {STEPS} steps)", self.out)
        with open(self.page_path) as f:
            page = f.read()
        self.assertIn(f"<td>{STEPS} (last {STEPS})</td>", page, "each step counted once")
        sources = re.findall(r'<img[^>]*src="([^"]*)"', page)
        self.assertEqual(len(sources), len(CHARTS))
        self.assertNotRegex(page, r'(src|href)="(?!data:)', "the page loads nothing from outside itself")
        for name in CHARTS:
            m = re.search(rf'<figure class="chart" id="chart-{name}"><img[^>]*src="data:image/png;base64,([^"]*)"',
                          page)
            self.assertIsNotNone(m, name)
            with open(os.path.join(self.run_dir, "report", name + ".png"), "rb") as f:
                png = f.read()
            self.assertEqual(base64.b64decode(m.group(1)), png, name)
            self.assertEqual(png_size(png), (760, 360), name)
        self.assertNotIn("not recorded", page, "every metric of this run is drawn")
        metrics = bstest.read_metrics(os.path.join(self.run_dir, "m.jsonl"))
        self.assertTrue(any("skipped" in m for m in metrics) and any("ckpt_stall_ms" in m for m in metrics),
                        "the run has the events the last chart shows")

    def test_refusals(self):
        for args, words in [([], "run directory"), ([self.path("nowhere")], "not a directory"),
                            ([self.data], "no metrics")]:
            p = report(args, check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(words, p.stderr)
        bad = self.path("bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"step": 1, "loss": 2}\nnot json\n')
        p = report([self.run_dir, "--metrics", bad, "--out", self.path("bad_report")], check=False)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("line 2", p.stderr)


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def load_in_browser(browser, page, screenshot):
    """(body tag, console errors) of page in headless Chromium; also a screenshot."""
    common = [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"]
    url = "file://" + os.path.abspath(page)
    dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    shot = subprocess.run(common + ["--window-size=900,3700", f"--screenshot={screenshot}", url],
                          capture_output=True, text=True, timeout=120)
    body = re.search(r"<body[^>]*>", dom.stdout)
    errors = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    return (body.group(0) if body else None), errors, dom, shot


def browser_main():
    """The browser check as its own program: 77 (skipped) where Chromium cannot be had or run."""
    browser = chromium()
    if not browser:
        print("SKIP: no chromium on PATH (Debian package chromium; scripts/install-deps.sh installs it)")
        return SKIP
    with bstest.TempDir() as tmp:
        data = bstest.make_corpus(tmp, nbytes=30_000)
        run_dir = os.path.join(tmp, "run")
        bstest.run(bstest.tiny_train_args(data, steps=6, metrics=os.path.join(run_dir, "m.jsonl"), out=run_dir,
                                          **{"noise-scale": None, "peak-gflops": 100}))
        report([run_dir])
        page = os.path.join(run_dir, "report", "index.html")
        shot = os.path.join(tmp, "shot.png")
        body, errors, dom, run = load_in_browser(browser, page, shot)
        if body is None or run.returncode != 0:
            print(f"SKIP: chromium could not render here ({dom.returncode}/{run.returncode}): "
                  f"{(dom.stderr + run.stderr).strip().splitlines()[-1:]}")
            return SKIP
        assert not errors, errors
        assert 'data-charts="9/9"' in body, f"the page's script did not see 9 decoded charts: {body}"
        with open(shot, "rb") as f:
            png = f.read()
        assert png_size(png) == (900, 3700), png_size(png)
        assert png_distinct_bytes(png) > 50, "the screenshot is blank"
        broken = os.path.join(run_dir, "report", "broken.html")
        with open(page) as f, open(broken, "w") as g:
            g.write(f.read().replace("</body>", "<script>no_such_function();</script></body>"))
        _, bad_errors, _, _ = load_in_browser(browser, broken, os.path.join(tmp, "broken.png"))
        assert any("no_such_function" in e for e in bad_errors), "a broken script went unnoticed"
        print(f"chromium: {body}, no console errors, screenshot {len(png)} bytes; a broken script is reported")
    return 0


if __name__ == "__main__":
    if "--browser" in sys.argv:
        sys.exit(browser_main())
    unittest.main()
