"""test_bench_cpu.py: `batchscale bench cpu` tells the truth about the
kernels, checked against sources it does not use: /proc/cpuinfo read here,
Debian's OpenBLAS asked through ctypes in another process, and the
environment the test sets.

  default   fields against /proc/cpuinfo; the OpenBLAS rule (a core is set only
            when OpenBLAS detected a generic one, and only one the CPU's flags
            allow); the core in effect is what the rule gives, and what a
            process that loads Debian's OpenBLAS with the benchmarks'
            environment (bench/kernel_report.openblas_env) reports itself;
            `bench gemm` names the same core; a bad flag is one line
  forced    with OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2
            OMP_NUM_THREADS=3 (what an AVX2 machine runs): the forced core is
            in effect and named as coming from the environment, the detected
            core is still the one OpenBLAS picks without it, oneDNN's ISA is
            avx2, the benchmarks leave the variable as given. Skipped (exit 77)
            on a CPU without AVX2.
usage: test_bench_cpu.py [default|forced]"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
sys.path.insert(0, HERE)
import kernel_report  # noqa: E402
from bstest import SKIP  # noqa: E402

BATCHSCALE = os.environ.get("BATCHSCALE", "build/batchscale")
GENERIC = {"prescott", "core2", "nehalem", "sandybridge"}
CORE_NEEDS = {"SkylakeX": "avx512f", "Haswell": "avx2"}  # what the rule may set, and the flag each needs
FLAGS_REPORTED = ["sse4_2", "avx", "fma", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                  "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]
# the core OpenBLAS runs, asked of Debian's libopenblas by a process that is not batchscale
OPENBLAS_CORE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())
"""


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def cpuinfo():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break  # the first processor only
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def bench_cpu(env):
    p = subprocess.run([BATCHSCALE, "bench", "cpu"], capture_output=True, text=True, env=env)
    check(p.returncode == 0, f"bench cpu exits 0 ({p.stderr.strip()})")
    return json.loads(p.stdout)


def debian_openblas_core(env):
    """The core in effect in /usr/bin/python3 loading the libopenblas batchscale links."""
    ldd = subprocess.run(["ldd", BATCHSCALE], capture_output=True, text=True, check=True).stdout
    lib = next(line.split("=>")[1].split()[0] for line in ldd.splitlines() if "libopenblas" in line)
    out = subprocess.run(["/usr/bin/python3", "-c", OPENBLAS_CORE, lib], capture_output=True, text=True, env=env,
                         check=True).stdout
    return out.strip()


def default_case(env, info):
    m = bench_cpu(env)
    check(m["cpu_model"] == info.get("model name"), f"cpu_model {m['cpu_model']!r} is /proc/cpuinfo's")
    check(m["cpu_vendor"] == info.get("vendor_id"), f"cpu_vendor {m['cpu_vendor']!r} is /proc/cpuinfo's")
    check(m["cpu_family"] == int(info["cpu family"]) and m["cpu_model_number"] == int(info["model"]),
          "cpu family and model are /proc/cpuinfo's")
    flags = info.get("flags", "").split()
    check(m["cpu_flags"] == [f for f in FLAGS_REPORTED if f in flags], f"cpu_flags {m['cpu_flags']}")
    check(m["openblas_coretype_env"] is None, "no OPENBLAS_CORETYPE from the environment")
    detected, to_set = m["openblas_detected"], m["openblas_core_to_set"]
    check(detected is not None, f"detected core known ({detected})")
    if detected.lower() in GENERIC:
        want = "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None
        check(to_set == want, f"generic core {detected}: the rule sets {to_set} (flags allow {want})")
    else:
        check(to_set is None, f"core {detected} detected: the rule sets nothing")
    if to_set:
        check(CORE_NEEDS[to_set] in flags, f"{to_set} runs on this CPU ({CORE_NEEDS[to_set]})")
    effect = to_set or detected
    check(m["openblas_core"].lower() == effect.lower(), f"core in effect {m['openblas_core']} is {effect}")
    check(m["omp_threads"] == 2, "omp_threads follows OMP_NUM_THREADS=2")
    peer = debian_openblas_core(kernel_report.openblas_env(env, m))
    check(peer == m["openblas_core"], f"a Debian-OpenBLAS process given the benchmarks' environment runs {peer}")
    gemm = subprocess.run([BATCHSCALE, "bench", "gemm", "--m", "64", "--n", "64", "--k", "64", "--reps", "1"],
                          capture_output=True, text=True, env=env, check=True).stdout
    check(f"core={m['openblas_core']}:" in gemm, f"bench gemm names its core: {gemm.strip()}")
    bad = subprocess.run([BATCHSCALE, "bench", "cpu", "--bogus"], capture_output=True, text=True, env=env)
    lines = bad.stderr.strip().splitlines()
    check(bad.returncode != 0 and len(lines) == 1 and "--bogus" in lines[0], f"bad flag: {bad.stderr.strip()}")


def forced_case(env, info):
    if "avx2" not in info.get("flags", "").split():
        print("SKIP: this CPU has no AVX2, so OPENBLAS_CORETYPE=Haswell cannot run here")
        sys.exit(SKIP)
    plain = bench_cpu(env)
    forced_env = dict(env, OPENBLAS_CORETYPE="Haswell", ONEDNN_MAX_CPU_ISA="AVX2", OMP_NUM_THREADS="3")
    m = bench_cpu(forced_env)
    check(m["openblas_core"] == "Haswell", f"forced core in effect ({m['openblas_core']})")
    check(m["openblas_coretype_env"] == "Haswell", "named as coming from the environment")
    check(m["openblas_detected"] == plain["openblas_detected"],
          f"detected core without it is still {plain['openblas_detected']} ({m['openblas_detected']})")
    check(m["onednn_isa"] == "avx2" and m["onednn_max_cpu_isa_env"] == "AVX2", f"oneDNN ISA {m['onednn_isa']}")
    check(m["omp_threads"] == 3, "omp_threads follows OMP_NUM_THREADS=3")
    check(kernel_report.openblas_env(forced_env, m)["OPENBLAS_CORETYPE"] == "Haswell",
          "the benchmarks leave an explicit OPENBLAS_CORETYPE as given")
    check(debian_openblas_core(kernel_report.openblas_env(forced_env, m)) == "Haswell",
          "a Debian-OpenBLAS process runs the forced core too")


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "default"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "BATCHSCALE_OPENBLAS_DETECTED")}
    env["OMP_NUM_THREADS"] = "2"
    {"default": default_case, "forced": forced_case}[case](env, cpuinfo())


if __name__ == "__main__":
    main()
