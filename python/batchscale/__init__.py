"""batchscale: the planner of batchscale (https://github.com/.../batchscale) from Python.

The planner is the project's C code, built into this package as a native library and called through ctypes: each
function runs `batchscale plan` on the options given and returns what `plan --json` prints, parsed. Keyword
arguments are the command's options without "--", with "_" for "-" (`global_batch=512`, `stack="nemo"`); True
passes a flag, None and False leave an option out, a list or tuple is joined with commas (per-GPU-kind values).
A bad argument raises ValueError with the planner's one-line reason.

    import batchscale
    p = batchscale.plan(model="llama3-70b", hardware="h100-sxm", gpus=512, tp=4, pp=4, stack="nemo")
    p["plan"]["tokens_per_s"], p["assumptions"]["switches"]["tp_overlap"]
    best = batchscale.search(model="llama3-405b", gpus=16384)          # the best layouts, best first
    curve = batchscale.scaling(model="llama3-8b", scaling_from=8, scaling_to=16384)
    steps = batchscale.read_metrics("runs/demo")                       # a DataFrame when pandas is installed
"""
import ctypes
import json
import os

__all__ = ["plan", "search", "scaling", "read_metrics", "planner_json"]

_ERROR_PREFIX = "batchscale: error: "


def _library():
    here = os.path.dirname(os.path.abspath(__file__))
    names = [n for n in os.listdir(here) if n.startswith("_planner") and n.endswith((".so", ".dylib", ".pyd"))]
    if not names:
        raise ImportError(f"batchscale: the native planner library is missing from {here}: reinstall the package")
    lib = ctypes.CDLL(os.path.join(here, names[0]))
    lib.bs_plan_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p),
                                ctypes.POINTER(ctypes.c_void_p)]
    lib.bs_plan_run.restype = ctypes.c_int
    lib.bs_plan_free.argtypes = [ctypes.c_void_p]
    lib.bs_plan_free.restype = None
    return lib


_LIB = _library()


def _flags(options):
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        args.append("--" + key.replace("_", "-"))
        if value is True:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args.append(str(value))
    return args


def _run(args):
    """(exit status, stdout, stderr) of `batchscale plan ARGS`."""
    argv = ["plan"] + list(args)
    c_argv = (ctypes.c_char_p * len(argv))(*[a.encode() for a in argv])
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    status = _LIB.bs_plan_run(len(argv), c_argv, ctypes.byref(out), ctypes.byref(err))
    texts = []
    for p in (out, err):
        texts.append(ctypes.string_at(p.value).decode() if p.value else "")
        if p.value:
            _LIB.bs_plan_free(p.value)
    if status < 0:
        raise OSError("batchscale: could not start the planner (fork failed)")
    return status, texts[0], texts[1]


def planner_json(args):
    """The record `batchscale plan ARGS --json` prints (args: a list of command-line words)."""
    status, out, err = _run(list(args) + ["--json"])
    if status != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"the planner exited with status {status}"
        raise ValueError(reason[len(_ERROR_PREFIX):] if reason.startswith(_ERROR_PREFIX) else reason)
    return json.loads(out)


def plan(model=None, hardware=None, gpus=None, **options):
    """One plan: the layout given, or the search's best when none is. Returns plan --json's record."""
    return planner_json(_flags(dict(model=model, hardware=hardware, gpus=gpus, **options)))


def search(model=None, hardware=None, gpus=None, top=10, **options):
    """The best layouts (each a plan record as in plan()["plan"]), best first."""
    record = planner_json(_flags(dict(model=model, hardware=hardware, gpus=gpus, search=True, top=top, **options)))
    return record["search"]["layouts"]


def scaling(model=None, hardware=None, gpus=None, **options):
    """The scaling sweep (plan --scaling): its points, each with the GPU count, efficiencies and best plan."""
    record = planner_json(_flags(dict(model=model, hardware=hardware, gpus=gpus, scaling=True, **options)))
    return record["scaling"]["points"]


def read_metrics(run_dir):
    """The records of a training run's metrics.jsonl (one per step or event): a pandas DataFrame when pandas is
    installed, else a list of dicts."""
    path = os.path.join(run_dir, "metrics.jsonl") if os.path.isdir(run_dir) else run_dir
    records = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON record ({e.msg})") from None
    try:
        import pandas
    except ImportError:
        return records
    return pandas.DataFrame.from_records(records)
