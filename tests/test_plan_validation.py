#!/usr/bin/python3
"""test_plan_validation.py: the planner against published large training runs.

Each row is a published measurement that states its layout (model shape,
hardware, GPU count, tensor/pipeline/data/context parallel degrees, global
batch; micro-batch, recomputation and schedule when the source gives them).
What a source leaves open (micro-batch, virtual stages, ZeRO stage) is
chosen by the planner's own search with the published fields pinned, as a
user of the planner would. The prediction is converted to the quantity and
FLOP convention the source reports, and the error is predicted throughput
over published throughput, minus one.

The rows are data: tests/data/plan_validation.tsv, one row per line with
its sources and assumptions in comments beside it (the file's header says
its columns).

Run as a test (CTest plan_validation): recomputes every row and checks that
docs/reference/planner-validation.md shows the same predictions and errors,
so the document cannot go stale, and that the recomputed rows meet the
accuracy the document claims (parsed from its prose, which `--markdown` does
not regenerate): every row within the stated target ("Target: within 15% on
each row") unless the "Where it misses" section names it, a named row within
the figures its bullet states (rounded: +-0.5 of the last digit), and the
summary's count within target and mean absolute error. `--markdown` prints
the table for the document (scripts/gen-doc-tables.py writes it there).
Misses are reported and explained, not tuned away.

The half "fresh held-out" holds rows transcribed and committed before the
planner was first run on them, evaluated once (the validation doc, "Held-out
discipline"). `--markdown --half "fresh held-out"` prints it alone. "fresh
held-out 2" is a second such set, transcribed and committed after the first
had been used for calibration (`--half "fresh held-out 2"`).
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.plan_rows import HALVES, ALL_ROWS, UNITS, predict, error  # noqa: E402

DOC = os.environ.get("PLANNER_DOC", os.path.join(os.path.dirname(__file__), "..", "docs", "reference",
                                                 "planner-validation.md"))

TARGET = 0.10  # the per-row bound the validation doc states (issue 22)
MOE_TARGET = 0.15  # the bound for mixture-of-experts rows (issue 17)


def fmt(metric, v):
    if metric == "megatron_mfu":
        return f"{100 * v:.1f}%"
    if metric == "step_seconds":
        return f"{v:.2f} s"
    return f"{v:.0f}"


def describe(flags):
    if "model" in flags:
        shape = flags["model"] + (f", seq {flags['seq-len']}" if "seq-len" in flags else "")
    else:
        shape = f"L{flags['layers']} h{flags['hidden']} a{flags['heads']}"
        if "kv-heads" in flags:
            shape += f" kv{flags['kv-heads']}"
        if "head-dim" in flags:
            shape += f" d{flags['head-dim']}"
        if "experts" in flags:
            shape += f" E{flags['experts']} k{flags['top-k']} f{flags['ffn']}"
        elif flags.get("activation") == "swiglu":
            shape += f" swiglu f{flags['ffn']}"
        shape += f" V{flags['vocab']} s{flags['seq-len']}"
        if flags.get("mtp-layers"):
            shape += f" mtp{flags['mtp-layers']}"
    if flags.get("precision", "bf16") != "bf16":
        shape += f", {flags['precision']}"
    return shape


def table_rows(only_half=None):
    out = []
    for row in ALL_ROWS:
        if only_half and row.half != only_half:
            continue
        rid, source, run, metric, published = row.id, row.source, row.flags, row.metric, row.published
        value, layout, fits = predict(row)
        err = error(metric, value, published)
        out.append({"id": rid, "source": source, "shape": describe(row.flags), "hardware": run["hardware"],
                    "gpus": run["gpus"], "batch": run["global-batch"], "layout": layout, "metric": UNITS[metric],
                    "published": fmt(metric, published), "predicted": fmt(metric, value),
                    "error": f"{100 * err:+.1f}%", "err": err, "fits": fits, "half": row.half})
    return out


def markdown(rows):
    lines = ["| id | half | source | model | hardware | GPUs | batch (seqs) | layout (planner's choices for open fields) | "
             "quantity | published | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['half']} | {r['source']} | {r['shape']} | {r['hardware']} | {r['gpus']} | "
                     f"{r['batch']} | {r['layout']} | {r['metric']} | {r['published']} | {r['predicted']} | {r['error']} |")
    lines.append("")
    lines.append(f"Within {100 * TARGET:.0f}%: {summary(rows)}.")
    halves = [(h, [r for r in rows if r["half"] == h]) for h in HALVES]
    lines.append("; ".join(f"{h} half: {summary(part)}" for h, part in halves if part).capitalize() + ".")
    both = [r for r in rows if r["half"] in HALVES[1:3]]
    if len(both) > len(halves[1][1]) > 0:
        lines.append(f"Both held-out halves together: {summary(both)}.")
    held_out = [r for r in rows if r["half"] != "calibration"]
    if len(held_out) > len(both) > len(halves[1][1]) > 0:
        lines.append(f"All three held-out halves together: {summary(held_out)}.")
    return "\n".join(lines)


def summary(rows):
    within = sum(1 for r in rows if abs(r["err"]) <= TARGET)
    return (f"{within} of {len(rows)} rows; mean absolute error "
            f"{100 * sum(abs(r['err']) for r in rows) / len(rows):.1f}%")


def half_unit(figure):
    """Half the last stated digit of a figure such as '+17' or '7.6'."""
    return 0.5 * 10.0 ** -(len(figure.split(".")[1]) if "." in figure else 0)


def doc_claims(doc, row_ids):
    """The accuracy the validation doc claims, from its prose: (target, {row id: (low, high)} for the rows its
    'Where it misses' section names, (rows within target, rows, mean |error|) of its summary), errors as fractions."""
    target = re.search(r"Target: within (\d+)% on each row", doc)
    moe_target = re.search(r"mixture-of-experts rows within (\d+)%", doc)
    summary = re.search(r"^Within (\d+)%: (\d+) of (\d+) rows; mean absolute error (\d+(?:\.\d+)?)%\.$", doc, re.M)
    section = re.search(r"^### Where it misses.*?$(.*?)^##", doc, re.M | re.S)
    if not (target and moe_target and summary and section):
        raise AssertionError(f"{DOC}: cannot find the target, the summary line or 'Where it misses'")
    named = {}
    for heading in re.findall(r"^- \*\*(.+?)\*\*", section.group(1), re.M):
        ids = [i for i in re.findall(r"[a-z0-9.]+(?:-[a-z0-9.]+)+", heading) if i in row_ids]
        figures = re.findall(r"[+-]\d+(?:\.\d+)?(?=%)", heading)
        if not ids or not figures:
            raise AssertionError(f"{DOC}: the miss '{heading}' names no row id or no signed error figure")
        low = min(float(f) - half_unit(f) for f in figures)
        high = max(float(f) + half_unit(f) for f in figures)
        named.update({i: (low / 100, high / 100) for i in ids})
    mean = summary.group(4)
    claimed = (int(summary.group(2)), int(summary.group(3)), (float(mean) + half_unit(mean)) / 100)
    return (int(target.group(1)) / 100, int(moe_target.group(1)) / 100), named, claimed


class ValidationTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DOC) as f:
            cls.doc = f.read()
        cls.rows = table_rows()

    def test_rows_meet_the_accuracy_the_doc_claims(self):
        (target, moe_target), named, (within_claimed, total_claimed, mean_claimed) = doc_claims(self.doc, [r.id for r in ALL_ROWS])
        self.assertEqual((target, moe_target), (TARGET, MOE_TARGET), "the per-row targets")
        moe_ids = {row.id for row in ALL_ROWS if "experts" in row.flags}
        for r in self.rows:
            bound = moe_target if r["id"] in moe_ids else target
            low, high = named.get(r["id"], (-bound, bound))
            self.assertTrue(low <= r["err"] <= high,
                            f"{r['id']}: error {100 * r['err']:+.1f}% outside [{100 * low:+.1f}%, {100 * high:+.1f}%], "
                            f"the bound {DOC} states for it")
        within = sum(1 for r in self.rows if abs(r["err"]) <= target)
        mean = sum(abs(r["err"]) for r in self.rows) / len(self.rows)
        self.assertEqual(len(self.rows), total_claimed, "rows")
        self.assertGreaterEqual(within, within_claimed, f"rows within {100 * target:.0f}%")
        self.assertLessEqual(mean, mean_claimed, f"mean absolute error {100 * mean:.2f}%")

    def test_doc_matches_recomputed_predictions(self):
        doc, rows = self.doc, self.rows
        self.assertGreaterEqual(len(rows), 10, "the issue asks for at least ten published measurements")
        _, named, _ = doc_claims(doc, [r.id for r in ALL_ROWS])
        for r in rows:
            # A fresh row the memory model rejects stays in the table, named under "Where it misses".
            self.assertTrue(r["fits"] or (r["half"] in HALVES[2:] and r["id"] in named),
                            f"{r['id']}: the published layout does not fit in the planner's memory model")
            m = re.search(r"^\| " + re.escape(r["id"]) + r" \|(.*)$", doc, re.M)
            self.assertIsNotNone(m, f"{r['id']} is missing from {DOC}")
            cells = [c.strip() for c in m.group(1).split("|")]
            self.assertEqual(cells[-4:-1], [r["published"], r["predicted"], r["error"]],
                             f"{r['id']}: the document says {cells[-4:-1]}, the planner now gives "
                             f"{[r['published'], r['predicted'], r['error']]}: regenerate the table with "
                             f"scripts/gen-doc-tables.py (tests/test_plan_validation.py --markdown prints it)")
            self.assertEqual(cells[0], r["half"], f"{r['id']}: the document puts it in another half")
            self.assertEqual(cells[6], r["layout"], f"{r['id']}: layout changed")
        for line in markdown(rows).split("\n\n")[-1].splitlines():
            self.assertIn(line, doc, "the summary lines under the table are stale")


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        half = sys.argv[sys.argv.index("--half") + 1] if "--half" in sys.argv else None
        if half is not None and half not in HALVES:
            sys.exit(f"--half must be one of {', '.join(HALVES)}")
        print(markdown(table_rows(half)))
    else:
        unittest.main()
