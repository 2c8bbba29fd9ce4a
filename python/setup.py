"""setup.py: builds batchscale's planner (src/plan, src/core and the `plan` command of src/cli) into one native
library inside the package, which batchscale/__init__.py loads with ctypes. Needs a C compiler and the development
files of jansson, cairo and fontconfig (the command's JSON and charts), found with pkg-config. Compiled with the
flags of the project's CMake build (-O3, -march=native unless BATCHSCALE_NATIVE=0, no errno or trapping math), so
the library computes what the `batchscale` binary built on the same machine does, to the bit."""
import glob
import os
import subprocess

from setuptools import Extension, setup

ROOT = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SRC = os.path.join(ROOT, "src")
CLI = ["cmd_plan", "plan_config", "config_file", "plan_json", "plan_report", "plan_plot", "plan_stack", "plan_entry", "options", "subject_flags"]
PACKAGES = ["jansson", "cairo", "fontconfig"]
NATIVE = [] if os.environ.get("BATCHSCALE_NATIVE") == "0" else ["-march=native"]  # CMake's BS_NATIVE


def pkg_config(flag):
    try:
        return subprocess.run(["pkg-config", flag, *PACKAGES], check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"batchscale: pkg-config {flag} {' '.join(PACKAGES)} failed ({e}): install their -dev packages")


sources = sorted(glob.glob(os.path.join(SRC, "plan", "*.c")) + glob.glob(os.path.join(SRC, "core", "*.c")))
sources += [os.path.join(SRC, "cli", name + ".c") for name in CLI]
cflags = pkg_config("--cflags")
libs = pkg_config("--libs")

setup(ext_modules=[Extension(
    "batchscale._planner", sources=sources, include_dirs=[SRC] + [f[2:] for f in cflags if f.startswith("-I")],
    libraries=[f[2:] for f in libs if f.startswith("-l")] + ["m", "pthread"],
    extra_compile_args=["-std=gnu17", "-O3", "-fno-math-errno", "-fno-trapping-math"] + NATIVE +
    [f for f in cflags if not f.startswith("-I")],
    extra_link_args=["-Wl,--no-undefined"])])
