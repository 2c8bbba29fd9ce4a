#!/bin/sh
# install-test-peers.sh: installs the tokenizers nobody here wrote (tiktoken
# and Hugging Face tokenizers, from PyPI) into the bench virtual environment,
# creating it if missing. The tokenizer tests and bench/bench_tokenizer.py
# compare our GPT-2 BPE against them. Idempotent and quick when they are
# already there. Prints the environment's python on its last line.
# They are peers for tests and benchmarks only, never a dependency of the
# product; they read the vocabulary from local files (no download at run time).
set -eu
VENV=${BS_BENCH_VENV:-$HOME/.cache/batchscale/bench-venv}
if [ ! -x "$VENV/bin/python" ]; then
    echo "install-test-peers: creating $VENV" >&2
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import tiktoken, tokenizers, numpy" 2>/dev/null; then
    echo "install-test-peers: installing tiktoken, tokenizers and numpy into $VENV (once)" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check tiktoken tokenizers numpy >&2
fi
echo "$VENV/bin/python"
