"""test_ops_config.py: configuration files (issue 20, part 7).

- `train --config job.json` takes the file's options, and flags on the
  command line override them (the file's flags go first, getopt keeps the
  last value).
- Every run directory (--out) gets config.json: "options", the options the
  user gave (the file's and the command line's: the option parser's record,
  defaults left out), "resolved", every option's value as the run used it
  (the defaults included), the command line, the git revision of the
  source tree the binary was built from, the CPU, the MPI library and the
  process count.
- `train --config RUN/config.json --out OTHER` repeats the run: the final
  model file is the same bits, and OTHER/config.json differs only in --out.
  Also for 2 ranks under mpirun (ZeRO-1), whose config.json records 2 processes,
  and for a LoRA run whose rank, alpha and targets come from --lora-init's
  adapter_config.json over an --init-from base (the options left out stay
  left out on the repeat: the same resolved configuration, the same losses).
- Bad files: not JSON (the line is named), an unknown option, a value of the
  wrong type, a config naming another: one line naming the file, exit 2.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bstest  # noqa: E402
from bstest import BATCHSCALE, MPIRUN  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(args, ranks=1, check=True):
    cmd = ([BATCHSCALE] if ranks == 1 else MPIRUN + ["-np", str(ranks), BATCHSCALE]) + ["train"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def load(path):
    with open(path) as f:
        return json.load(f)


def model_bytes(run_dir):
    with open(os.path.join(run_dir, "model.bin"), "rb") as f:
        return f.read()


def metric_losses(path):
    with open(path) as f:
        return [row["loss"] for row in map(json.loads, f) if "loss" in row]


class ConfigFiles(bstest.CorpusTest):
    CORPUS_BYTES = 40_000

    def job_file(self, name, options):
        path = self.path(name)
        with open(path, "w") as f:
            json.dump(options, f)
        return path

    def job(self):
        return {"layers": 2, "heads": 2, "channels": 32, "seq-len": 32, "micro-batch": 2, "global-batch": 4,
                "steps": 6, "lr": 3e-3, "min-lr": 1.7e-4, "warmup": 2, "eval-every": 0, "sample-tokens": 0,
                "threads": 1, "nesterov": False, "no-overlap": True, "data-order": "sequential", "seed": 4242,
                "quiet": True, "data": os.path.join(self.data, "train_000000.bin")}

    def test_file_flags_override_and_record(self):
        job = self.job_file("job.json", self.job())
        out = self.path("run_a")
        train(["--config", job, "--steps", "4", "--out", out])
        rec = load(os.path.join(out, "config.json"))
        o = rec["options"]
        self.assertEqual(o["steps"], 4, "the command line overrides the file")
        self.assertEqual((o["layers"], o["seed"], o["data-order"], o["no-overlap"]), (2, 4242, "sequential", True))
        self.assertEqual(o["min-lr"], 1.7e-4, "a double round-trips exactly")
        self.assertNotIn("zero", o, "a default is not an option given")
        self.assertEqual(rec["resolved"]["zero"], 0, "defaults are among the resolved values")
        self.assertEqual(rec["resolved"]["steps"], 4)
        self.assertNotIn("config", o)
        self.assertNotIn("config", rec["resolved"])
        self.assertEqual(rec["processes"], 1)
        self.assertIn("MPI", rec["mpi"])
        self.assertTrue(rec["cpu"] and rec["cpu"] != "unknown" or not os.path.exists("/proc/cpuinfo"))
        self.assertEqual(rec["command_line"][:3], ["train", "--config", job])
        head = subprocess.run(["git", "-C", SOURCE, "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:  # the revision the build recorded is one of this tree's commits
            rev = rec["git_revision"].removesuffix("-dirty")
            known = subprocess.run(["git", "-C", SOURCE, "cat-file", "-e", rev + "^{commit}"])
            self.assertEqual(known.returncode, 0, f"{rev} is not a commit of {SOURCE}")
        else:
            print("note: no git checkout here: the revision is not checked")

    def repeat(self, ranks, extra):
        first, again = self.path(f"first_{ranks}"), self.path(f"again_{ranks}")
        train(["--config", self.job_file(f"job_{ranks}.json", self.job()), "--out", first] + extra, ranks)
        train(["--config", os.path.join(first, "config.json"), "--out", again], ranks)
        self.assertEqual(model_bytes(first), model_bytes(again), "a repeated run ends on the same bits")
        a, b = load(os.path.join(first, "config.json")), load(os.path.join(again, "config.json"))
        self.assertEqual(b["processes"], ranks)
        for key in ("options", "resolved"):
            self.assertNotEqual(a[key].pop("out"), b[key].pop("out"))
            self.assertEqual(a[key], b[key], key)
        shutil.rmtree(first)
        shutil.rmtree(again)
        return a, b

    def test_repeat_one_process(self):
        self.repeat(1, ["--lr", "2e-3"])

    def test_repeat_two_ranks(self):
        self.repeat(2, ["--zero", "1", "--bucket-mb", "0.05"])

    def test_repeat_lora_from_adapter_config(self):
        """LoRA's flags left out take --lora-init's values: the repeat leaves them out too (on main every option was
        recorded, so a repeat gave them all, and --init-from's repeat was refused for --upcycle-noise)."""
        job = self.job()
        base, adapters = self.path("base.bin"), self.path("adapters")
        train(["--config", self.job_file("base.json", job), "--save-model", base])
        train(["--config", self.job_file("lora.json", dict(job, steps=2)), "--init-from", base, "--lora-rank", "4",
               "--lora-alpha", "8", "--lora-targets", "qkv,fc", "--lora-dropout", "0.1", "--save-adapters", adapters])
        first, again = self.path("lora_first"), self.path("lora_again")
        train(["--config", self.job_file("tune.json", job), "--init-from", base, "--lora-init", adapters, "--metrics",
               os.path.join(first, "metrics.jsonl"), "--out", first])
        train(["--config", os.path.join(first, "config.json"), "--metrics", os.path.join(again, "metrics.jsonl"),
               "--out", again])
        a, b = load(os.path.join(first, "config.json")), load(os.path.join(again, "config.json"))
        for flag in ("lora-rank", "lora-alpha", "lora-targets", "lora-dropout", "upcycle-noise"):
            self.assertNotIn(flag, a["options"], "an option left out is not recorded as given")
        resolved = a["resolved"]
        self.assertEqual((resolved["lora-rank"], resolved["lora-alpha"], resolved["lora-targets"],
                          resolved["lora-dropout"]), (4, 8.0, "qkv,fc", 0.1), "the adapter's values, resolved")
        for key in ("options", "resolved"):
            for run in (a, b):
                run[key].pop("out"), run[key].pop("metrics")
            self.assertEqual(a[key], b[key], key)
        losses = [metric_losses(os.path.join(d, "metrics.jsonl")) for d in (first, again)]
        self.assertEqual(len(losses[0]), job["steps"])
        self.assertEqual(losses[0], losses[1], "the repeat trains the same losses")
        self.assertEqual(model_bytes(first), model_bytes(again))

    def assert_refused(self, options, words, text=None):
        path = self.path("bad.json")
        with open(path, "w") as f:
            f.write(text if text is not None else json.dumps(options))
        p = train(["--config", path, "--out", self.path("never")], check=False)
        self.assertEqual(p.returncode, 2, p.stderr)  # a configuration error (README, "Exit statuses")
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        for w in [path] + words:
            self.assertIn(w, lines[0])
        self.assertFalse(os.path.exists(self.path("never")))

    def test_bad_files(self):
        self.assert_refused(None, ["line 2"], text='{"layers": 2,\n "heads": }\n')
        self.assert_refused({"layers": 2, "lyers": 3}, ['"lyers"', "unknown option"])
        self.assert_refused({"layers": "two"}, ['"layers"', "needs a number"])
        self.assert_refused({"data-order": 1}, ['"data-order"', "string"])
        self.assert_refused({"nesterov": 1}, ['"nesterov"', "true or false"])
        self.assert_refused({"config": "x.json"}, ["cannot name another"])
        self.assert_refused(None, ["not a JSON object"], text="[1, 2]\n")
        missing = train(["--config", self.path("missing.json")], check=False)
        self.assertEqual(missing.returncode, 2)
        self.assertEqual(len(missing.stderr.strip().splitlines()), 1, missing.stderr)
        self.assertIn("missing.json", missing.stderr)


if __name__ == "__main__":
    unittest.main()
