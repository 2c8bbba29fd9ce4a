"""kernel_report.py: which kernels each benchmark process ran, and the one
OpenBLAS rule for every process that loads Debian's OpenBLAS.

In the benchmark script (any Python):
  machine(bs)           `batchscale bench cpu`: the CPU model and flags, the
                        OpenBLAS core detected, set by batchscale and in effect,
                        oneDNN's effective ISA; what batchscale's own processes ran
  openblas_env(env, m)  the environment for a process that loads Debian's
                        OpenBLAS (numpy, Debian's PyTorch): OPENBLAS_CORETYPE set
                        only where batchscale's rule sets it (OpenBLAS detected a
                        generic core; the core is one the CPU runs), an explicit
                        one left as given, never a core forced unconditionally
  environment_note(m)   a line naming the variables that came from outside
                        (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE, ONEDNN_MAX_CPU_ISA):
                        they hold for every process of the run, peers included,
                        and are recorded, not removed

In a peer process, after it imported numpy or torch:
  this_process()        {"openblas": [...], "torch": {...}}: each OpenBLAS library
                        loaded with its core in effect (threadpoolctl where
                        installed, else openblas_get_corename through ctypes), and
                        PyTorch's BLAS, ATen CPU capability, MKL's ISA and
                        oneDNN's ISA as their verbose modes print them

PyPI's PyTorch does its fp32 matmuls in MKL (which OPENBLAS_CORETYPE does not
touch) and its bf16 ones in oneDNN; PyPI's numpy carries its own OpenBLAS with
its own detection, so neither gets the Debian rule.
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

OUTSIDE_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def machine(bs):
    out = subprocess.run([bs, "bench", "cpu"], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def openblas_env(env, m):
    env = dict(env)
    if "OPENBLAS_CORETYPE" not in env and m["openblas_core_to_set"]:
        env["OPENBLAS_CORETYPE"] = m["openblas_core_to_set"]
    return env


def environment_note(m=None):
    given = {k: os.environ[k] for k in OUTSIDE_VARIABLES if k in os.environ}
    if not given:
        return None
    text = " ".join(f"{k}={v}" for k, v in given.items())
    line = f"note: {text} from the environment: in effect for every process of this run, peers included"
    if m and m.get("openblas_detected"):
        line += f" (OpenBLAS detects {m['openblas_detected']} without it)"
    return line


def summary(m):
    """One line: the CPU and what batchscale's processes ran."""
    forced = f", OPENBLAS_CORETYPE={m['openblas_coretype_env']} from the environment" if m["openblas_coretype_env"] \
        else (f", set by batchscale (OpenBLAS detected {m['openblas_detected']})" if m["openblas_core_to_set"] else "")
    return (f"CPU: {m['cpu_model']} (family {m['cpu_family']} model {m['cpu_model_number']}); batchscale: OpenBLAS "
            f"core {m['openblas_core']}{forced}, oneDNN {m['onednn_version']} ISA {m['onednn_isa']}")


def _mapped_libraries(fragment):
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if fragment in line.rsplit("/", 1)[-1]}
    return sorted(p for p in paths if p.startswith("/"))


def _openblas_by_ctypes():
    """openblas_get_corename/config of each loaded OpenBLAS, under the symbol names
    the Debian (plain) and PyPI (scipy_openblas, 64-bit interface) builds export."""
    libs = []
    for path in _mapped_libraries("openblas"):
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("openblas", ""), ("openblas", "64_"), ("scipy_openblas", "64_"), ("scipy_openblas", "")):
            core = getattr(lib, f"{prefix}_get_corename{suffix}", None)
            if core is None:
                continue
            config = getattr(lib, f"{prefix}_get_config{suffix}")
            core.restype = config.restype = ctypes.c_char_p
            libs.append(dict(library=os.path.basename(path), core=core().decode(), config=config().decode()))
            break
    return libs


def openblas_libraries():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return _openblas_by_ctypes()
    return [dict(library=os.path.basename(i["filepath"]), core=i.get("architecture"), version=i.get("version"),
                 threads=i.get("num_threads")) for i in threadpool_info() if i.get("internal_api") == "openblas"]


def _captured_stdout(fn):
    """What fn writes to file descriptor 1 (C libraries' verbose modes print there)."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            fn()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode(errors="replace")


def _torch_verbose_isa(torch):
    """MKL's ISA (its verbose line on one fp32 matmul) and oneDNN's (its info
    line on one reorder into a oneDNN tensor), None where the library is absent."""
    out = {"mkl_isa": None, "onednn_isa": None, "onednn_version": None}
    if torch.backends.mkl.is_available() and hasattr(torch.backends.mkl, "verbose"):
        a = torch.ones(64, 64)
        def matmul():
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                torch.mm(a, a)
        m = re.search(r"MKL_VERBOSE (.*?) Product build \S+ for Intel\(R\) 64 architecture (.*?), Lnx",
                      _captured_stdout(matmul))
        out["mkl_isa"] = f"{m.group(1)}: {m.group(2)}" if m else None
    if torch.backends.mkldnn.is_available() and hasattr(torch.backends.mkldnn, "verbose"):
        def reorder():
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                torch.ones(8, 8).to_mkldnn().to_dense()
        text = _captured_stdout(reorder)
        isa = re.search(r"onednn_verbose,(?:v\d+,)?info,cpu,isa:(.*)", text)
        version = re.search(r"onednn_verbose,(?:v\d+,)?info,oneDNN v(\S+)", text)
        out["onednn_isa"] = isa.group(1).strip() if isa else None
        out["onednn_version"] = version.group(1) if version else None
    return out


def torch_report(torch):
    config = torch.__config__.show()
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    if capability:
        aten = capability()
    else:
        m = re.search(r"CPU capability usage: (\S+)", config)
        aten = m.group(1) if m else None
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    r = dict(version=torch.__version__, threads=torch.get_num_threads(), blas=blas.group(1) if blas else None,
             aten_cpu_capability=aten)
    r.update(_torch_verbose_isa(torch))
    return r


def this_process():
    r = {"openblas": openblas_libraries()}
    if "torch" in sys.modules:
        r["torch"] = torch_report(sys.modules["torch"])
    if "numpy" in sys.modules:
        r["numpy"] = sys.modules["numpy"].__version__
    return r
