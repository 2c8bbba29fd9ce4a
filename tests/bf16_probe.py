"""bf16_probe.py: what the bf16 tests need to know about oneDNN here, from
`bf16_driver probe` (matmul_bf16_onednn_available, oneDNN's effective ISA
and the path --bf16-matmul auto picks), and the visible skip of a oneDNN
case where oneDNN has no bf16 matmul (oneDNN 2.6 below AVX-512: an AVX2-only
AMD EPYC, or ONEDNN_MAX_CPU_ISA=AVX2): the reason printed, exit SKIP_CODE
(bstest.SKIP: BS_SKIP in tests/CMakeLists.txt, CTest's SKIP_RETURN_CODE)."""
import subprocess
import sys

from bstest import SKIP as SKIP_CODE


def probe(driver):
    """{"available": bool, "isa": oneDNN's effective ISA, "auto": the path auto picks (onednn-bf16 or widen-fp32)}"""
    words = subprocess.run([driver, "probe"], check=True, capture_output=True, text=True).stdout.split()
    return {"available": words[0] == "available", "isa": words[1], "auto": words[2]}


def onednn_or_skip(driver, what):
    """Returns the probe where oneDNN can run bf16 matmuls; else prints why `what` is skipped and exits SKIP_CODE."""
    p = probe(driver)
    if not p["available"]:
        print(f"SKIP: {what}: oneDNN (effective ISA {p['isa']}) has no bf16 matmul below AVX-512, so the onednn "
              "path cannot run on this CPU; the widen path is tested without this skip")
        sys.exit(SKIP_CODE)
    return p
