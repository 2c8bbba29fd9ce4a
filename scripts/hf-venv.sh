#!/bin/sh
# hf-venv.sh: the Hugging Face peer of the safetensors tests: transformers
# (pinned) from PyPI in a virtual environment over Debian's /usr/bin/python3
# with its system packages, so it runs on Debian's python3-torch (1.13)
# instead of downloading PyPI's several-GB torch. tests/test_hf_peer.py
# saves a random GPT-2 with save_pretrained and compares logits, loss and
# gradients with batchscale's, both ways; tests/test_lora_peer.py trains LoRA
# adapters against peft's. `make test` runs this before CTest. peft and
# accelerate go in without their dependencies: Debian's torch calls itself
# 1.13.0a0, which pip reads as older than peft's torch>=1.13 and would
# replace with PyPI's (several GB); everything else they need is here.
# Idempotent: quick when the pinned version is there. Where PyPI or venv
# cannot be had it prints one line and exits 0; the test then reports itself
# skipped with the reason. It never fails the build.
set -u
VENV=${BS_HF_VENV:-$HOME/.cache/batchscale/hf-venv}
PINS="transformers==4.36.2 Jinja2==3.1.4"  # Jinja2: peft's save_pretrained writes a model card from a template
NODEPS="peft==0.7.1 accelerate==0.25.0"
CHECK="import torch, transformers, safetensors, peft, jinja2; assert transformers.__version__ == '4.36.2' and peft.__version__ == '0.7.1'"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    exit 0
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "hf-venv: Debian's python3-torch is missing (scripts/install-deps.sh installs it); the Hugging Face peer test will be skipped"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ] && ! /usr/bin/python3 -m venv --system-site-packages "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    echo "hf-venv: cannot create $VENV with /usr/bin/python3 -m venv; the Hugging Face peer test will be skipped"
    exit 0
fi
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 1 --timeout 20 $PINS >/dev/null 2>&1 ||
   ! "$VENV/bin/python" -m pip install -q --no-deps --disable-pip-version-check --retries 1 --timeout 20 $NODEPS >/dev/null 2>&1 ||
   ! "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    echo "hf-venv: cannot install $PINS $NODEPS from PyPI (offline?); the Hugging Face peer tests will be skipped"
    exit 0
fi
echo "hf-venv: installed $PINS $NODEPS into $VENV"
