#!/usr/bin/python3
"""test_plan_stacks.py: `batchscale plan --stack NAME[@VERSION]` (issue 47).

- Each preset sets the switches docs/reference/stacks.md cites for it (the doc's tables are the expected values,
  so the doc and the code cannot drift apart), and only those; the doc lists exactly the planner's presets.
- `--search` never leaves a stack's space: every listed layout's ZeRO stage, recomputation policy and tensor,
  context and pipeline degrees are ones the stack can run (and, without --stack, the same job's search does leave
  them, so the check can fail).
- Every answer's "assumptions" in --json: a switch pinned by the user, one set by the preset, one chosen by the
  search, one left at the planner's default; the warning when a searched switch moves the step by more than 5%.
- An unknown stack: one line on stderr naming --stack, a non-zero exit.
- The validation table (tests/data/plan_validation.tsv's rows, read through tests/harness/plan_rows.py) run with the fields a user
  knows plus each row's stack (tests/data/plan_stacks.tsv): its mean and worst error are asserted equal to the
  figures docs/reference/stacks.md states (to their printed digit), beside the table with everything pinned and
  with no preset.
"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness.plan_rows as validation  # noqa: E402  (the rows and their prediction, read one way)

HERE = os.path.dirname(os.path.abspath(__file__))
BATCHSCALE = validation.BATCHSCALE
DOC = os.path.join(HERE, "..", "docs", "reference", "stacks.md")
STACKS_TSV = os.path.join(HERE, "data", "plan_stacks.tsv")
SWITCHES = ["tp_overlap", "pp_overlap", "overlap", "sequence_parallel", "recompute", "zero", "attention", "grad_reduce",
            "pipeline_engine", "layer_split", "zero1_reduce", "rank_order", "fp8_linears", "moe_probs", "cp_algo"]
RECOMPUTE = ["none", "selective", "full", "op"]

# A job on which every switch shows in the answer: FP8, TP with sequence parallelism, an interleaved pipeline,
# context and data parallelism, and MoE where the stack sets the MoE switch (torchtitan's per-op recomputation is
# priced for dense blocks only; DeepSpeed's pipeline runs 1F1B only). The layout is given, so recomputation and
# ZeRO are the stack's. Whether it fits does not matter here.
PROBE = ["--precision", "fp8", "--hardware", "h100-sxm", "--gpus", "64", "--tp", "2", "--pp", "2", "--cp", "2",
         "--global-batch", "256", "--micro-batch", "1"]


def probe(cited):
    model = ["--model", "llama3-8b" if cited["moe_probs"] == "—" else "mixtral-8x7b"]
    interleaved = [] if cited["pipeline_engine"] == "deepspeed" else ["--virtual-stages", "2"]
    return PROBE + model + interleaved
SEARCH_JOB = ["--model", "llama3-70b", "--hardware", "h100-sxm", "--gpus", "256", "--global-batch", "512", "--search",
              "--top", "64"]

# Flags of the stack's switches: a validation row's values for them are replaced by its stack's preset.
STACK_FLAGS = {"tp-overlap", "pp-overlap", "overlap", "sequence-parallel", "attention", "grad-reduce", "pipeline-engine",
               "layer-split", "first-stage-layers", "last-stage-layers", "zero1-reduce", "rank-order", "fp8-linears",
               "moe-probs", "cp-algo"}
PLACEMENT = ("layer-split", "first-stage-layers", "last-stage-layers")


def plan(*args):
    p = subprocess.run([BATCHSCALE, "plan", *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0 and not ("this layout does not fit" in p.stderr and p.stdout.strip()):
        raise AssertionError(f"plan {' '.join(args)} failed:\n{p.stderr}")
    return p.stdout


def plan_json(*args):
    return json.loads(plan(*args, "--json"))


def doc_presets():
    """{"name@version": {key: value}} from docs/reference/stacks.md's tables ("—": the planner's default)."""
    with open(DOC) as f:
        text = f.read()
    presets = {}
    for m in re.finditer(r"^### ([a-z0-9.-]+@[0-9.]+)\n(.*?)(?=^### |\Z)", text, re.M | re.S):
        presets[m.group(1)] = dict(re.findall(r"^\| ([a-z_0-9]+) \| ([^|]*?) \|", m.group(2), re.M))
    if not presets:
        raise AssertionError(f"{DOC}: no preset tables")
    return presets


def words(cell):
    return [w.strip() for w in cell.split(",")]


def user_fields(row, stack):
    """A validation row as a user would type it: its flags less the stack's switches, plus --stack. The layers
    per stage stay when the row gives them explicitly (first/last stage, or a 'balanced' stand-in for a recipe's
    explicit layout map): the user typed those numbers into the stack's configuration."""
    placed = "first-stage-layers" in row.flags or row.flags.get("layer-split") == "balanced"

    def keep(k):
        return k not in STACK_FLAGS or (placed and k in PLACEMENT)

    tokens, kept = [], True
    for token in row.args:
        if token.startswith("--"):
            kept = keep(token[2:])
        if kept:
            tokens.append(token)
    if stack != "none":
        tokens += ["--stack", stack]
    return validation.Row({"id": row.id, "half": row.half, "source": row.source, "metric": row.metric,
                           "published": repr(row.published), "flags": " ".join(tokens)})


def row_stacks():
    with open(STACKS_TSV) as f:
        return {line.split("\t")[0]: line.split("\t")[1] for line in f if line.strip() and not line.startswith("#")}


def table_errors(rows):
    """{row id: error, or None where the planner finds no layout}."""
    out = {}
    for row in rows:
        try:
            value, _, _ = validation.predict(row)
            out[row.id] = validation.error(row.metric, value, row.published)
        except AssertionError:
            out[row.id] = None
    return out


def figures(errors):
    done = [abs(e) for e in errors.values() if e is not None]
    return sum(done) / len(done), max(done), len(errors) - len(done)


class PresetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.presets = doc_presets()

    def test_doc_lists_the_planners_presets(self):
        p = subprocess.run([BATCHSCALE, "plan", "--stack", "no-such-stack"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn("--stack", lines[0])
        known = re.search(r"known: ([^)]*)\)", lines[0]).group(1).split()
        self.assertEqual(sorted(known), sorted(self.presets), "the planner's presets and docs/reference/stacks.md's")

    def test_each_preset_sets_its_cited_values(self):
        for name, cited in self.presets.items():
            with self.subTest(stack=name):
                switches = plan_json(*probe(cited), "--stack", name)["assumptions"]["switches"]
                for key in SWITCHES:
                    got = switches[key]
                    if cited[key] == "—":
                        self.assertEqual(got["origin"], "default", f"{name}: {key} is not the stack's")
                    else:
                        self.assertEqual((got["value"], got["origin"]), (cited[key], "stack"), f"{name}: {key}")

    def test_name_alone_is_the_latest_version(self):
        for name in {n.split("@")[0] for n in self.presets}:
            latest = [n for n in self.presets if n.startswith(name + "@")][-1]
            stack = plan_json(*probe(self.presets[latest]), "--stack", name)["assumptions"]["stack"]
            self.assertEqual(f"{stack['name']}@{stack['version']}", latest)

    def test_search_stays_in_the_stacks_space(self):
        left = set()
        free = plan_json(*SEARCH_JOB)["search"]["layouts"]
        for name, cited in self.presets.items():
            with self.subTest(stack=name):
                zero = {int(z) for z in words(cited["zero_stages"])}
                policies = set(words(cited["recompute_policies"]))
                if cited["recompute_chosen_by"] == "stack":
                    policies = {cited["recompute"]}
                degrees = {d: cited[p] == "yes" for d, p in
                           (("tp", "tensor_parallel"), ("cp", "context_parallel"), ("pp", "pipeline"))}

                def inside(layout):
                    return (layout["zero"] in zero and layout["recompute"] in policies and
                            all(has or layout[d] == 1 for d, has in degrees.items()))

                try:
                    layouts = plan_json(*SEARCH_JOB, "--stack", name)["search"]["layouts"]
                except AssertionError as e:  # a stack that cannot run the job at all says so
                    self.assertIn("no layout", str(e))
                    layouts = []
                for layout in layouts:
                    self.assertTrue(inside(layout["layout"]), f"{name}: {layout['layout']['text']}")
                if any(not inside(layout["layout"]) for layout in free):
                    left.add(name)
        self.assertGreaterEqual(len(left), 3, "without --stack the search should leave several stacks' spaces")

    def test_assumptions_in_json(self):
        j = plan_json("--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--recompute", "full", "--search",
                      "--stack", "nemo@25.09", "--top", "1")
        a = j["assumptions"]
        self.assertEqual(a["stack"], {"name": "nemo", "version": "25.09"})
        self.assertEqual(a["switches"]["recompute"], {"value": "full", "origin": "user"})
        self.assertEqual(a["switches"]["tp_overlap"], {"value": "on", "origin": "stack"})
        self.assertEqual(a["switches"]["zero"]["origin"], "search")
        self.assertEqual(int(a["switches"]["zero"]["value"]), j["plan"]["layout"]["zero"])
        self.assertEqual(a["switches"]["recompute"]["value"], j["plan"]["layout"]["recompute"])
        bare = plan_json("--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--search", "--top", "1")["assumptions"]
        self.assertIsNone(bare["stack"])
        self.assertEqual(bare["switches"]["tp_overlap"], {"value": "off", "origin": "default"})
        self.assertEqual(bare["switches"]["recompute"]["origin"], "search")
        text = plan("--model", "llama3-8b", "--gpus", "64", "--tp", "2", "--recompute", "full", "--search",
                    "--stack", "nemo@25.09", "--top", "1")
        self.assertRegex(text, r"(?m)^switches   user     recompute full$")
        self.assertRegex(text, r"(?m)^stack      nemo@25\.09: ")

    def test_warning_when_the_search_moves_the_step(self):
        """torchtitan's own default is ZeRO-3 and the per-op policy; on this job the search's choices differ and
        are faster by more than 5%: each gets its line, with the step change recomputed here from two pinned
        plans."""
        job = ["--model", "llama3-70b", "--gpus", "256", "--hardware", "h100-sxm"]
        j = plan_json(*job, "--stack", "torchtitan", "--search", "--top", "1")
        layout = j["plan"]["layout"]
        warnings = j["assumptions"]["warnings"]
        self.assertNotEqual(layout["zero"], 3)
        pinned = ["--tp", str(layout["tp"]), "--pp", str(layout["pp"]), "--cp", str(layout["cp"]), "--micro-batch",
                  str(layout["micro_batch"]), "--virtual-stages", str(layout["virtual_stages"]), "--recompute",
                  layout["recompute"], "--stack", "torchtitan"]
        chosen = plan_json(*job, *pinned, "--zero", str(layout["zero"]))["plan"]["step_time"]["step"]
        stacks = plan_json(*job, *pinned, "--zero", "3")["plan"]["step_time"]["step"]
        change = chosen / stacks - 1
        self.assertGreater(abs(change), 0.05)
        line = [w for w in warnings if w.startswith(f"zero {layout['zero']} chosen by search")]
        self.assertEqual(len(line), 1, warnings)
        self.assertIn(f"step {100 * change:+.1f}% vs the stack's 3 (torchtitan@2025.09)", line[0])
        text = plan(*job, "--stack", "torchtitan", "--search", "--top", "1")
        self.assertIn("warning    " + line[0] + "\n", text)
        quiet = plan_json(*job, *pinned, "--zero", str(layout["zero"]))["assumptions"]["warnings"]
        self.assertEqual(quiet, [], "no warning for a switch the user pinned")


class PresetsOnlyTableTest(unittest.TestCase):
    """The validation table with the fields a user knows plus the row's stack."""

    def test_table_with_presets_only(self):
        stacks = row_stacks()
        rows = validation.ALL_ROWS
        self.assertEqual(sorted(stacks), sorted(r.id for r in rows), f"{STACKS_TSV}: one stack per validation row")
        presets = table_errors([user_fields(r, stacks[r.id]) for r in rows])
        bare = table_errors([user_fields(r, "none") for r in rows])
        pinned = table_errors(rows)
        fresh = {r.id for r in rows if r.half == "fresh held-out"}
        report = []
        for label, errors in (("presets only", presets), ("everything pinned", pinned), ("no preset", bare)):
            for part, ids in (("all", set(errors)), ("fresh held-out", fresh)):
                mean, worst, failed = figures({k: v for k, v in errors.items() if k in ids})
                report.append((label, part, mean, worst, failed))
                print(f"{label:17s} {part:15s} mean {100 * mean:5.1f}%  worst {100 * worst:6.1f}%  no layout {failed}")
        print("rows the preset moves by more than 2 points (no preset -> preset; pinned):")
        for rid, err in presets.items():
            if bare[rid] is None or abs(err - bare[rid]) > 0.02:
                before = "no layout" if bare[rid] is None else f"{100 * bare[rid]:+.1f}%"
                print(f"  {rid:36s} {stacks[rid]:20s} {before:>9s} -> {100 * err:+.1f}%; pinned {100 * pinned[rid]:+.1f}%")
        with open(DOC) as f:
            doc = f.read()
        for label, part, mean, worst, failed in report:
            m = re.search(rf"^\| {label} \| {part} \| ([\d.]+)% \| ([\d.]+)% \| (\d+) \|$", doc, re.M)
            self.assertIsNotNone(m, f"{DOC} states no figures for {label}, {part}")
            # the doc's figures to their printed digit, both ways: a better table is written down, not left slack
            self.assertAlmostEqual(100 * mean, float(m.group(1)), delta=0.05, msg=f"{label}, {part}: mean")
            self.assertAlmostEqual(100 * worst, float(m.group(2)), delta=0.05, msg=f"{label}, {part}: worst")
            self.assertEqual(failed, int(m.group(3)), f"{label}, {part}: rows with no layout")
        self.assertEqual(figures(presets)[2], 0, "every row finds a layout with its preset")
        self.assertLess(figures(presets)[0], figures(bare)[0], "the presets make the table better than no preset")


if __name__ == "__main__":
    unittest.main()
