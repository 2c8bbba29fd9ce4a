#!/usr/bin/python3
"""test_plan_cli.py: `batchscale plan` and `batchscale bench --calibrate` from
the outside: bad input gets one line saying what to change; the JSON report
is self-consistent (parts add up, MFU and cost recomputed here from their
definitions); the search finds Llama 3's published 405B layout and the
scaling sweep gives the commonly quoted efficiencies; mixed fleets, money,
config files, charts and calibration files work end to end."""
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bstest import MPIRUN, BATCHSCALE, TempDir, one_line_error, process, run  # noqa: E402

GIB = 1073741824.0


def plan(*args, check=True):
    return run(["plan"] + [str(a) for a in args], check=check, timeout=300)


def plan_json(*args):
    return json.loads(plan(*args, "--json").stdout)


class BadInput(unittest.TestCase):
    def fails(self, args, *needles):
        p = plan(*args, check=False)
        self.assertNotEqual(p.returncode, 0, f"expected failure: {args}\n{p.stdout}")
        self.assertGreater(p.returncode, 0, "killed by a signal (crash)")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line, got:\n{p.stderr}")
        self.assertTrue(lines[0].startswith("batchscale: error: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])
        return p

    def test_layout_product_not_gpu_count(self):
        self.fails(["--model", "gpt3-175b", "--gpus", 64, "--tp", 8, "--pp", 4, "--dp", 4], "= 128 GPUs, but the fleet has 64: use dp 2",
                   "(flags: --tp, --cp, --pp, --dp, --gpus)")

    def test_model_parallel_not_dividing_gpus(self):
        self.fails(["--model", "gpt3-175b", "--gpus", 64, "--tp", 8, "--pp", 3], "does not divide", "64")

    def test_heads_not_divisible_by_tp(self):
        self.fails(["--model", "gpt2-124m", "--gpus", 10, "--tp", 5],
                   "the tensor-parallel degree 5 does not divide the 12 attention heads", "(flags: --tp, --heads)")

    def test_batch_does_not_split(self):
        self.fails(["--model", "gpt2-124m", "--gpus", 8, "--tp", 1, "--global-batch", 12],
                   "does not split into dp 8 x micro-batch 1", "(flags: --dp, --micro-batch)")

    def test_batch_not_whole_sequences(self):
        self.fails(["--model", "llama3-8b", "--batch-schedule", "0:4M,1T:16M"], "--batch-schedule", "4000000 tokens",
                   "8192")

    def test_fits_nowhere(self):
        self.fails(["--model", "llama3-405b", "--gpus", 8], "does not fit on 8 x h100-sxm", "GPUs or more")

    def test_explicit_layout_that_does_not_fit(self):
        p = self.fails(["--model", "llama3-70b", "--gpus", 8, "--tp", 8], "does not fit", "--recompute full")
        self.assertIn("DOES NOT FIT", p.stdout, "the report is still printed to show the breakdown")

    def test_unknown_names(self):
        self.fails(["--model", "gpt5"], "--model 'gpt5'", "llama3-405b")
        self.fails(["--model", "demo", "--hardware", "tpu-v9"], "tpu-v9", "h100-sxm")
        self.fails(["--model", "demo", "--recompute", "some"], "--recompute")
        self.fails(["--model", "demo", "--plot", "chart.pdf"], ".png or .svg")
        self.fails(["--model", "demo", "--batch-schedule", "5:1M"], "--batch-schedule")
        self.fails(["--model", "demo", "--hardware", "a100-80g:8,h100-sxm"], "count per kind")

    def test_negative_prices_and_new_words(self):
        self.fails(["--model", "demo", "--on-demand-usd-per-gpu-hour", "-4"], "--on-demand-usd-per-gpu-hour", "-4")
        self.fails(["--model", "demo", "--gpu-price-usd", "-35000"], "--gpu-price-usd")
        self.fails(["--model", "demo", "--cp-algo", "tree"], "--cp-algo", "ring or allgather")
        self.fails(["--model", "demo", "--in-network-reduction", "yes"], "--in-network-reduction", "on or off")
        self.fails(["--model", "demo", "--tp-overlap", "yes"], "--tp-overlap", "on or off")
        self.fails(["--model", "demo", "--pp-overlap", "maybe"], "--pp-overlap", "on or off")
        self.fails(["--model", "demo", "--rank-order", "dp-tp"], "--rank-order", "tp-cp-ep-dp-pp")
        self.fails(["--model", "demo", "--grad-reduce", "fp16"], "--grad-reduce", "weights or fp32")
        self.fails(["--model", "demo", "--pipeline-engine", "gpipe"], "--pipeline-engine", "megatron or deepspeed")
        self.fails(["--model", "demo", "--zero1-reduce", "tree"], "--zero1-reduce", "reduce-scatter or allreduce")
        self.fails(["--model", "llama3-70b", "--gpus", 64, "--tp", 4, "--pp", 4, "--virtual-stages", 5, "--pipeline-engine",
                    "deepspeed"], "DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule",
                   "(flags: --pipeline-engine, --schedule)")
        self.fails(["--model", "demo", "--layer-split", "sideways"], "--layer-split", "balanced or even")
        self.fails(["--model", "mixtral-8x7b", "--moe-probs", "up"], "--moe-probs", "combine or activation")
        self.fails(["--model", "demo", "--moe-probs", "activation"],
                   "the router probabilities applied in the activation need a mixture-of-experts model",
                   "(flags: --moe-probs, --experts)")
        self.fails(["--model", "demo", "--precision", "fp8", "--fp8-linears", "apex"], "--fp8-linears", "te, te-delayed or torchao")
        self.fails(["--model", "demo", "--fp8-linears", "torchao"], "--fp8-linears torchao", "--precision fp8")
        self.fails(["--model", "llama3-405b", "--gpus", 1024, "--tp", 8, "--pp", 16, "--layer-split", "even"],
                   "an even layer split: 126 layers do not divide into 16 pipeline stages",
                   "(flags: --layer-split, --pp, --first-stage-layers, --last-stage-layers)")
        self.fails(["--model", "llama3-405b", "--gpus", 1024, "--tp", 8, "--pp", 16, "--first-stage-layers", 7],
                   "the first and last stages' layers fix the split: split evenly",
                   "(flags: --first-stage-layers, --last-stage-layers, --layer-split)")
        self.fails(["--model", "llama3-405b", "--gpus", 1024, "--tp", 8, "--pp", 16, "--layer-split", "even",
                    "--first-stage-layers", 60, "--last-stage-layers", 60],
                   "60 first-stage and 60 last-stage layers", "14 middle stages", "(flags: --first-stage-layers")
        self.fails(["--model", "demo", "--attention", "flash3"], "--attention", "flash or flash2")
        self.fails(["--model", "demo", "--window-layers", 2], "the windowed layers",
                   "(flags: --attention-window, --window-layers, --layers)")
        self.fails(["--model", "mixtral-8x7b", "--gpus", 8, "--recompute", "op"], "per-op recomputation", "dense blocks",
                   "(flags: --recompute, --experts, --attention)")
        self.fails(["--model", "demo", "--recompute", "op", "--attention", "full"], "per-op recomputation", "fused attention",
                   "--recompute")
        self.fails(["--model", "gpt2-124m", "--gpus", 8, "--tp", 2, "--tp-overlap", "on", "--sequence-parallel", "off"],
                   "the tensor-parallel overlap needs sequence parallelism", "(flags: --tp-overlap, --sequence-parallel)")

    def test_moe_words(self):
        moe = ["--model", "mixtral-8x7b", "--gpus", 16, "--ep", 8]
        self.fails(["--model", "demo", "--ep-overlap", "sometimes"], "--ep-overlap", "off, shared, dualpipe or combined-1f1b")
        combined = ("the combined-1f1b expert overlap extends the interleaved schedule",
                    "(flags: --ep-overlap, --schedule, --virtual-stages, --recompute)")
        self.fails(moe + ["--pp", 2, "--schedule", "1f1b", "--ep-overlap", "combined-1f1b"], *combined)
        self.fails(moe + ["--recompute", "full", "--ep-overlap", "combined-1f1b"], *combined, "no full recomputation")
        self.fails(moe + ["--ep-overlap", "shared"], "the shared expert overlap needs 1 or more shared experts",
                   "(flags: --ep-overlap, --shared-experts)")
        self.fails(moe + ["--pp", 2, "--schedule", "interleaved", "--virtual-stages", 2, "--ep-overlap", "dualpipe"],
                   "the dualpipe expert overlap is its own pipeline schedule", "(flags: --ep-overlap, --pp, --schedule)")
        etp = "(flags: --etp, --tp, --ffn, --rank-order)"
        self.fails(moe + ["--tp", 2, "--etp", 3, "--rank-order", "tp-cp-ep-dp-pp"], "an expert tensor-parallel degree 3",
                   "must divide the tensor-parallel degree 2", etp)
        self.fails(moe + ["--tp", 2, "--etp", 1, "--rank-order", "tp-cp-pp-dp"], "an expert tensor-parallel degree 1", "rank order tp-cp-ep-dp-pp", etp)
        self.fails(["--model", "demo", "--shared-experts", 1], "--shared-experts", "mixture-of-experts")

    def test_missing_shape(self):
        self.fails(["--layers", 4], "--model NAME", "--hidden")

    def test_bad_files(self):
        with TempDir() as d:
            self.fails(["--config", os.path.join(d, "none.json")], "none.json")
            bad = os.path.join(d, "bad.json")
            with open(bad, "w") as f:
                f.write("{\"model\": \"demo\",")
            self.fails(["--config", bad], bad, "not valid JSON")
            with open(bad, "w") as f:
                json.dump({"model": "demo", "gpu": 8}, f)
            self.fails(["--config", bad], bad, 'unknown option "gpu"')  # train's and plan's --config: cli/config_file.c
            with open(bad, "w") as f:
                json.dump({"format": "something-else"}, f)
            self.fails(["--model", "demo", "--calibrate", bad], "not a batchscale calibration")


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.j = plan_json("--model", "gpt3-175b", "--hardware", "a100-80g", "--gpus", 1024, "--tp", 8, "--pp", 8,
                          "--recompute", "selective", "--virtual-stages", 4, "--micro-batch", 1,
                          "--usd-per-gpu-hour", 2, "--gpu-price-usd", 30000, "--power-usd-per-gpu-hour", 0.5)

    def test_parts_add_up(self):
        p = self.j["plan"]
        t = p["step_time"]
        self.assertAlmostEqual(sum(v for k, v in t.items() if k != "step"), t["step"], delta=1e-9 * t["step"])
        m = p["memory"]
        self.assertAlmostEqual(sum(v for k, v in m.items() if k not in ("total", "capacity")), m["total"],
                               delta=1e-6 * m["total"])
        self.assertTrue(p["fits"])
        self.assertEqual(p["layout"]["dp"], 1024 // 64, "dp defaults to GPUs / (tp x cp x pp)")
        self.assertEqual(p["layout"]["schedule"], "interleaved")

    def test_mfu_from_its_definition(self):
        p, m = self.j["plan"], self.j["model"]
        # 72 B s l h^2 (1 + s/6h + V/12lh) per step of B sequences (Narayanan et al.), V padded to 128
        B, s, l, h = p["batch_tokens"] / m["seq_len"], m["seq_len"], m["layers"], m["hidden"]
        V = math.ceil(m["vocab"] / 128) * 128
        flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
        mfu = flops / p["step_time"]["step"] / (p["gpus"] * 312e12)
        self.assertAlmostEqual(p["mfu"], mfu, delta=1e-9)
        self.assertGreater(p["hfu"], p["mfu"], "selective recomputation does extra attention work")
        self.assertAlmostEqual(p["tokens_per_s"], p["batch_tokens"] / p["step_time"]["step"], delta=1e-6)

    def test_cost_and_reliability(self):
        rel, p = self.j["reliability"], self.j["plan"]
        # Young: sqrt(2 delta M); job MTBF = per-GPU MTBF / GPUs
        M = rel["mtbf_gpu_hours"] * 3600 / p["gpus"]
        self.assertAlmostEqual(rel["job_mtbf_s"], M, delta=1e-6 * M)
        self.assertAlmostEqual(rel["young_interval_s"], math.sqrt(2 * rel["checkpoint_s"] * M), delta=1e-6 * M)
        self.assertAlmostEqual(rel["mtbf_gpu_hours"], 54 * 24 * 16384 / 419, delta=1e-6, msg="Llama 3's rate")
        self.assertLess(rel["goodput"], 1)
        self.assertAlmostEqual(rel["wall_s"], p["train_seconds"] / rel["goodput"], delta=1e-6 * rel["wall_s"])
        self.assertAlmostEqual(self.j["cost"]["usd"], 2 * p["gpus"] * rel["wall_s"] / 3600, delta=1e-3)
        own = self.j["cost"]["rates"][0]["ownership_usd_per_gpu_hour"]
        self.assertAlmostEqual(own, 30000 / (4 * 8766) + 0.5, delta=1e-9)

    def test_critical_batch_warning(self):
        j = plan_json("--model", "gpt2-124m", "--gpus", 8, "--batch-tokens", 64 * 1024 * 1024, "--target-loss", 3.0)
        crit = 2e8 / 3.0 ** (1 / 0.21)
        self.assertAlmostEqual(j["batch"]["critical_batch_tokens"], crit, delta=1e-6 * crit)
        self.assertTrue(j["batch"]["warning"])
        text = plan("--model", "gpt2-124m", "--gpus", 8, "--batch-tokens", 64 * 1024 * 1024, "--target-loss", 3.0).stdout
        self.assertIn("warning", text)

    def test_batch_schedule(self):
        base = ["--model", "llama3-8b", "--gpus", 64, "--tp", 1, "--pp", 1, "--zero", 3, "--tokens", "10G"]
        small = plan_json(*base, "--batch-tokens", "4194304")["plan"]["train_seconds"]
        big = plan_json(*base, "--batch-tokens", "16777216")["plan"]["train_seconds"]
        mixed = plan_json(*base, "--batch-schedule", "0:4194304,5G:16777216")["plan"]["train_seconds"]
        self.assertLess(big, small, "a bigger batch has fewer optimizer steps")
        self.assertAlmostEqual(mixed, (small + big) / 2, delta=1e-6 * mixed, msg="half the tokens at each batch")


class Search(unittest.TestCase):
    def test_llama3_405b_layout(self):
        # Meta kept context parallelism for the 128K stage; at 8K the search over
        # everything else must give their TP 8 x PP 16 x DP 128 on 16,384 H100
        j = plan_json("--model", "llama3-405b", "--hardware", "h100-sxm", "--gpus", 16384, "--cp", 1, "--search")
        best = j["search"]["layouts"][0]["layout"]
        self.assertEqual((best["tp"], best["pp"], best["dp"]), (8, 16, 128), best["text"])
        why = j["search"]["why"]
        self.assertIn("would not fit", why, "the faster shorter pipelines run out of memory")
        self.assertIn("Half the pipeline", why)
        self.assertGreater(j["search"]["evaluated"], 100)
        print(f"\n  search of {j['search']['evaluated']} layouts for 16,384 GPUs took {j['search']['seconds']:.3f} s")

    def test_pinned_virtual_stages_above_the_search_range(self):
        # one layer per chunk (NeMo's Llama 2 70B: 80 layers, PP 4, VP 20): a pinned v above the 16 the
        # search tries on its own is still tried (round 10; the loop used to end at 17)
        j = plan_json("--model", "llama3-70b", "--gpus", 64, "--tp", 4, "--pp", 4, "--virtual-stages", 20,
                      "--schedule", "interleaved", "--search")
        self.assertEqual((j["plan"]["layout"]["schedule"], j["plan"]["layout"]["virtual_stages"]), ("interleaved", 20))

    def test_top_list_is_sorted_and_fits(self):
        j = plan_json("--model", "llama3-70b", "--gpus", 512, "--search", "--top", 10)
        layouts = j["search"]["layouts"]
        self.assertEqual(len(layouts), 10)
        times = [x["train_seconds"] for x in layouts]
        self.assertEqual(times, sorted(times))
        for x in layouts:
            self.assertTrue(x["fits"])
            self.assertLessEqual(x["memory"]["total"], x["memory"]["capacity"])
        self.assertEqual(j["plan"]["layout"], layouts[0]["layout"])

    def test_commonly_quoted_scaling_table(self):
        # 95-99% linear scaling on one node: Llama 3 8B at its 16M-token batch
        j = plan_json("--model", "llama3-8b", "--hardware", "h100-sxm", "--scaling", "--scaling-mode", "strong")
        pts = {p["gpus"]: p for p in j["scaling"]["points"]}
        self.assertTrue(0.95 <= pts[8]["linear_efficiency"] <= 0.99, pts[8]["linear_efficiency"])
        effs = [pts[n]["linear_efficiency"] for n in sorted(pts)]
        self.assertEqual(effs, sorted(effs, reverse=True), "efficiency falls with the GPU count")
        # 60-75% on 16,384 GPUs: Llama 3 405B on its published layout
        big = plan_json("--model", "llama3-405b", "--hardware", "h100-sxm", "--gpus", 16384, "--cp", 1, "--search")
        self.assertTrue(0.60 <= big["linear_efficiency"] <= 0.75, big["linear_efficiency"])
        # which term dominates (docs/PLANNER.md): stragglers from 8 to 1,024 GPUs, then exposed DP communication
        for n in [n for n in pts if n <= 1024] + [16384]:
            t = pts[n]["plan"]["step_time"]
            overheads = {k: v for k, v in t.items() if k not in ("step", "compute")}
            self.assertEqual(max(overheads, key=overheads.get), "straggler" if n <= 1024 else "dp_comm", (n, t))
        # the documented reason the middle is not reproduced: stragglers at a level that puts 64 and 256 GPUs in
        # their quoted ranges leave 1,024 above its range and 8 below its own
        j3 = plan_json("--model", "llama3-8b", "--hardware", "h100-sxm", "--scaling", "--scaling-mode", "strong",
                       "--jitter", 0.03, "--scaling-to", 1024)
        lin = {p["gpus"]: p["linear_efficiency"] for p in j3["scaling"]["points"]}
        self.assertTrue(0.90 <= lin[64] <= 0.95 and 0.85 <= lin[256] <= 0.92, lin)
        self.assertTrue(lin[1024] > 0.85 and lin[8] < 0.95, lin)

    def test_tp_overlap_and_rank_order(self):
        # userbuffer overlap hides most of TP 4's collectives behind the GEMMs, never all (the tails stay)
        args = ["--model", "llama3-70b", "--gpus", 64, "--tp", 4, "--pp", 4, "--recompute", "full"]
        off, on = plan_json(*args), plan_json(*args, "--tp-overlap", "on")
        self.assertTrue(on["plan"]["layout"]["tp_overlap"] and not off["plan"]["layout"]["tp_overlap"])
        t_off, t_on = off["plan"]["step_time"]["tp_comm"], on["plan"]["step_time"]["tp_comm"]
        self.assertTrue(0 < t_on < 0.5 * t_off, (t_on, t_off))
        self.assertLess(on["plan"]["step_time"]["step"], off["plan"]["step_time"]["step"])
        # Megatron's overlap_p2p_comm: pipeline sends beside compute, interleaved schedules only
        il = args + ["--virtual-stages", 5, "--schedule", "interleaved"]
        sync, overlapped = plan_json(*il), plan_json(*il, "--pp-overlap", "on")
        self.assertTrue(overlapped["plan"]["layout"]["pp_overlap"])
        self.assertLess(overlapped["plan"]["step_time"]["pp_comm"], 0.5 * sync["plan"]["step_time"]["pp_comm"])
        self.assertFalse(plan_json(*args, "--pp-overlap", "on")["plan"]["layout"]["pp_overlap"], "1F1B: not applied")
        # DeepSpeed's PipelineEngine: four blocking transfers and three TP all-gathers per micro-batch
        ds = plan_json(*args, "--pipeline-engine", "deepspeed")
        self.assertGreater(ds["plan"]["step_time"]["pp_comm"], 2 * off["plan"]["step_time"]["pp_comm"])
        # Megatron's order keeps a TP 1 model's EP 8 inside a node: its all-to-all on NVLink
        moe = ["--model", "mixtral-8x7b", "--gpus", 16, "--tp", 1, "--pp", 2, "--ep", 8, "--recompute", "full"]
        engine, megatron = plan_json(*moe, "--rank-order", "tp-cp-pp-dp"), plan_json(*moe, "--rank-order", "tp-cp-ep-dp-pp")
        self.assertEqual(megatron["plan"]["layout"]["rank_order"], "tp-cp-ep-dp-pp")
        self.assertLess(2 * megatron["plan"]["step_time"]["ep_comm"], engine["plan"]["step_time"]["ep_comm"])
        # given no order, an expert-parallel layout gets Megatron-core's (issue 47), and says so; a dense one the engine's
        default = plan_json(*moe)
        self.assertEqual(default["plan"]["step_time"], megatron["plan"]["step_time"])
        self.assertEqual(default["assumptions"]["switches"]["rank_order"],
                         {"value": "tp-cp-ep-dp-pp", "origin": "default (expert-parallel layouts)"})
        self.assertEqual(megatron["assumptions"]["switches"]["rank_order"]["origin"], "user")
        self.assertIn("\n           default (expert-parallel layouts) rank_order tp-cp-ep-dp-pp\n", plan(*moe).stdout)
        self.assertEqual(off["assumptions"]["switches"]["rank_order"], {"value": "tp-cp-pp-dp", "origin": "default"})
        searched = plan_json("--model", "mixtral-8x7b", "--gpus", 16, "--search", "--top", 16)["search"]["layouts"]
        self.assertTrue(any(s["layout"]["ep"] > 1 for s in searched) and any(s["layout"]["ep"] == 1 for s in searched))
        for s in searched:  # the search decides the default per layout
            want = "tp-cp-ep-dp-pp" if s["layout"]["ep"] > 1 else "tp-cp-pp-dp"
            self.assertEqual(s["layout"]["rank_order"], want, s["layout"]["text"])

    def test_moe_host_time_sensitivity(self):
        """An MoE plan says what it does not price: 1 ms per MoE layer and micro-batch costs layers x micro-batches
        ms per step (the fullest stage's), that share of the step; a dense plan says nothing of it."""
        args = ["--model", "mixtral-8x7b", "--gpus", 16, "--tp", 1, "--pp", 2, "--ep", 8, "--recompute", "full"]
        text, j = plan(*args).stdout, plan_json(*args)["plan"]
        layers = max(s["max_layers"] for s in j["stages"])
        ms = layers * j["micro_batches"]
        self.assertIn(f"adds {ms} ms ({layers} layers x {j['micro_batches']}", text)
        self.assertIn(f"{100 * ms * 1e-3 / j['step_time']['step']:.1f}% of the step", text)
        self.assertNotIn("host       ", plan("--model", "llama3-8b", "--gpus", 8).stdout)

    def test_rank_by_cost_tries_fewer_gpus(self):
        j = plan_json("--model", "llama3-8b", "--gpus", 1024, "--search", "--rank-by", "cost", "--usd-per-gpu-hour", 2)
        costs = [x["cost_usd"] for x in j["search"]["layouts"]]
        self.assertEqual(costs, sorted(costs))
        self.assertLessEqual(j["search"]["layouts"][0]["gpus"], 1024)


class MixedFleet(unittest.TestCase):
    def test_mix_against_each_kind(self):
        j = plan_json("--model", "llama3-70b", "--hardware", "a100-80g:256,h100-sxm:256", "--search",
                      "--usd-per-gpu-hour", "1.2,2.5")
        alts = {a["fleet"]: a for a in j["alternatives"]}
        mix = j["plan"]["train_seconds"]
        self.assertLess(mix, alts["512 x a100-80g"]["plan"]["train_seconds"])
        self.assertGreater(mix, alts["512 x h100-sxm"]["plan"]["train_seconds"])
        stages = {s["hardware"]: s for s in j["plan"]["stages"]}
        self.assertEqual(stages["a100-80g"]["stages"], stages["h100-sxm"]["stages"], "half the stages on each kind")
        self.assertGreater(stages["h100-sxm"]["max_layers"], stages["a100-80g"]["max_layers"],
                           "faster GPUs get more layers")
        rel = j["reliability"]
        self.assertAlmostEqual(j["cost"]["usd"], (256 * 1.2 + 256 * 2.5) * rel["wall_s"] / 3600, delta=1e-3)


class Files(unittest.TestCase):
    def test_config_file_equals_flags_and_flags_override(self):
        with TempDir() as d:
            cfg = os.path.join(d, "job.json")
            with open(cfg, "w") as f:
                json.dump({"model": "gpt3-175b", "hardware": "a100-80g", "gpus": 512, "tp": 8, "pp": 8,
                           "recompute": "selective", "jitter": 0.02, "json": True}, f)
            a = json.loads(plan("--config", cfg).stdout)
            b = plan_json("--model", "gpt3-175b", "--hardware", "a100-80g", "--gpus", 512, "--tp", 8, "--pp", 8,
                          "--recompute", "selective", "--jitter", 0.02)
            self.assertEqual(a["plan"], b["plan"])
            c = json.loads(plan("--config", cfg, "--pp", 16).stdout)
            self.assertEqual(c["plan"]["layout"]["pp"], 16)

    def test_plot_png_and_svg(self):
        with TempDir() as d:
            png, svg = os.path.join(d, "s.png"), os.path.join(d, "s.svg")
            plan("--model", "llama3-8b", "--plot", png, "--scaling-to", 1024)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            plan("--model", "llama3-8b", "--plot", svg, "--scaling-to", 1024)
            with open(svg) as f:
                text = f.read()
            self.assertIn("<svg", text)
            self.assertIn("</svg>", text)

    def test_calibration_round_trip(self):
        with TempDir() as d:
            cal = os.path.join(d, "cal.json")
            run(["bench", "--calibrate", cal, "--quick"])
            with open(cal) as f:
                c = json.load(f)
            self.assertEqual(c["format"], "batchscale-calibration")
            self.assertGreater(len(c["matmul"]), 5)
            for p in c["matmul"]:
                self.assertGreater(p["flops_per_s"], 1e8)
            self.assertGreater(c["memory_bandwidth"]["bytes_per_s"], 1e8)
            self.assertGreater(c["elementwise"]["bytes_per_s"], 1e7)
            args = ["--calibrate", cal, "--model", "demo", "--gpus", 2, "--tp", 1, "--pp", 1, "--global-batch", 32,
                    "--micro-batch", 16, "--zero", 0, "--overlap", "off"]
            j = json.loads(plan(*args, "--json").stdout)
            self.assertEqual(j["precision"], "fp32")
            self.assertIn("no collectives", j["note"])
            assumed = j["plan"]["step_time"]["dp_comm"]
            # a measured collectives section replaces the assumption: 10x slower links, 10x the time
            bw = c["memory_bandwidth"]["bytes_per_s"] / 4 / 10
            c["collectives"] = {"ranks": 2, "ring": {"alpha_s": 5e-6, "busbw_bytes_per_s": bw}}
            with open(cal, "w") as f:
                json.dump(c, f)
            j2 = json.loads(plan(*args, "--json").stdout)
            self.assertNotIn("note", j2)
            # one ring all-reduce of all gradients on 2 ranks: 2 alpha + bytes / busbw
            self.assertAlmostEqual(j2["plan"]["step_time"]["dp_comm"] - 2 * 5e-6, 10 * (assumed - 2 * 5e-6),
                                   delta=1e-9 * assumed)
            self.assertAlmostEqual(assumed, 2 * 5e-6 + j["plan"]["dp_bytes"] / (10 * bw), delta=1e-9 * assumed)

    def test_calibrated_cores_are_shared(self):
        """Four processes of one thread placed on a calibrated 2-core node (--gpus-per-node 4) each run half the
        time: every time of the step doubles against the same four as two nodes of two, and the note says why."""
        with TempDir() as d:
            cal = os.path.join(d, "cal.json")
            run(["bench", "--calibrate", cal, "--quick"])
            with open(cal) as f:
                c = json.load(f)
            c["machine"].update(cores=2, threads_per_rank=1, ranks_per_node=2)
            c["collectives"] = {"ranks": 2, "ring": {"alpha_s": 5e-6, "busbw_bytes_per_s": 1e9}}
            with open(cal, "w") as f:
                json.dump(c, f)
            args = ["--calibrate", cal, "--model", "demo", "--gpus", 4, "--dp", 4, "--tp", 1, "--pp", 1,
                    "--global-batch", 64, "--micro-batch", 16, "--jitter", 0, "--json"]
            apart = json.loads(plan(*args).stdout)
            shared = json.loads(plan(*args, "--gpus-per-node", 4).stdout)
            self.assertNotIn("note", apart)
            self.assertIn("4 processes of 1 thread share 2 cores", shared["note"])
            for part in ("compute", "optimizer", "step"):
                a, b = apart["plan"]["step_time"][part], shared["plan"]["step_time"][part]
                self.assertGreater(a, 0, part)
                self.assertAlmostEqual(b, 2 * a, delta=1e-9 * a, msg=part)


class DeviceCalibration(unittest.TestCase):
    """`bench --calibrate --device sim`: the device's products, fused attention, copies and element-wise kernels
    measured through the seam, its all-reduces of device buffers under mpirun, and `plan --calibrate` pricing
    attention at the measured rates (the planner's check against the engine on a GPU is
    tests/test_plan_reality.py --device cuda, run by scripts/gpu-check.sh)."""

    ARGS = ["--model", "demo", "--gpus", 1, "--tp", 1, "--pp", 1, "--global-batch", 32, "--micro-batch", 16,
            "--jitter", 0, "--json"]

    def test_round_trip(self):
        with TempDir() as d:
            cal = os.path.join(d, "cal.json")
            run(["bench", "--calibrate", cal, "--device", "sim", "--quick"])
            with open(cal) as f:
                c = json.load(f)
            self.assertEqual((c["machine"]["device"], c["precision"]), ("sim", "fp32"))
            self.assertGreater(len(c["matmul"]), 3)
            for key in ("forward_flops_per_s", "backward_flops_per_s"):
                self.assertGreater(c["attention"][key], 1e6, key)
            for key in ("host_to_device_bytes_per_s", "device_to_host_bytes_per_s"):
                self.assertGreater(c["host_link"][key], 1e7, key)
            self.assertGreater(c["memory_bandwidth"]["bytes_per_s"], 1e7)
            j = json.loads(plan("--calibrate", cal, *self.ARGS).stdout)
            self.assertEqual((j["precision"], j["attention"]), ("fp32", "flash2"))
            # attention priced at the measured rates: per layer and micro-batch of T = 16 x 128 tokens the
            # forward's causal half of 4 T s C flops at the forward rate, backward 2.5x the flops at its own
            fwd, bwd = c["attention"]["forward_flops_per_s"], c["attention"]["backward_flops_per_s"]
            flops = 0.5 * 4 * (16 * 128) * 128 * 192
            attention = 4 * 2 * (flops / fwd + 2.5 * flops / bwd)  # 4 layers, 2 micro-batches
            c["attention"].update(forward_flops_per_s=2 * fwd, backward_flops_per_s=2 * bwd)
            with open(cal, "w") as f:
                json.dump(c, f)
            faster = json.loads(plan("--calibrate", cal, *self.ARGS).stdout)
            saved = j["plan"]["step_time"]["compute"] - faster["plan"]["step_time"]["compute"]
            self.assertAlmostEqual(saved, attention / 2, delta=1e-9 * attention)

    def test_bf16_and_collectives(self):
        with TempDir() as d:
            cal = os.path.join(d, "cal.json")
            p = process(MPIRUN + ["-np", "2", BATCHSCALE, "bench", "--calibrate", cal, "--device", "sim",
                                  "--precision", "bf16", "--quick"], timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(cal) as f:
                c = json.load(f)
            self.assertEqual((c["precision"], c["collectives"]["path"], c["collectives"]["ranks"]), ("bf16", "host", 2))
            self.assertGreater(c["collectives"]["ring"]["busbw_bytes_per_s"], 1e6)
            j = json.loads(plan("--calibrate", cal, *self.ARGS[:-1], "--gpus", 2, "--json").stdout)
            self.assertEqual(j["precision"], "bf16")
            self.assertNotIn("note", j, "measured collectives replace the assumed ones")

    def test_bad_input(self):
        for args, needle in ((["--device", "tpu"], "--device must be cpu, cuda or sim"),
                             (["--precision", "bf16"], "--precision bf16 needs --device cuda or sim"),
                             (["--device", "sim", "--precision", "fp16"], "--precision must be fp32 or bf16"),
                             (["--device", "cuda"], "--device cuda: ")):  # no GPU, or CUDA not built in
            with TempDir() as d:
                cal = os.path.join(d, "cal.json")
                p = run(["bench", "--calibrate", cal] + args, check=False)
                if args == ["--device", "cuda"] and p.returncode == 0:
                    continue  # a machine with a GPU: measured it
                self.assertIn(needle, one_line_error(p))
                self.assertFalse(os.path.exists(cal), "nothing written")


if __name__ == "__main__":
    unittest.main()
