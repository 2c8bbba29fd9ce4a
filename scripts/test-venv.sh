#!/bin/sh
# test-venv.sh: the Python environment of the numeric references that
# Debian does not package: ml_dtypes (fp8 e4m3fn and bfloat16 casts, written
# by the JAX team) and numpy, pinned, from PyPI. tests/test_cc_formats.py
# compares our codecs with them bit for bit; tensorboard (pinned too) reads
# back the event files of --tensorboard. `make test` runs this before
# CTest. Idempotent: quick when the pinned versions are already there.
#
# The environment lives in $BS_TEST_VENV (default
# ~/.cache/batchscale/test-venv) and is made by the `python3` first on PATH
# (or $BS_TEST_PYTHON3): Debian's /usr/bin/python3 may lack venv and pip.
# Where PyPI or venv cannot be had it prints one line and exits 0: the tests
# that need it then report themselves as skipped, with the reason, in CTest's
# summary. It never fails the build. Silent when there is nothing to do.
set -u
VENV=${BS_TEST_VENV:-$HOME/.cache/batchscale/test-venv}
PYTHON3=${BS_TEST_PYTHON3:-python3}
PINS="ml_dtypes==0.6.0 numpy==2.4.6"
CHECK="import ml_dtypes, numpy; assert ml_dtypes.__version__ == '0.6.0' and numpy.__version__ == '2.4.6'"

# TensorBoard's own event reader checks the event files of --tensorboard
# (tests/test_ops_tensorboard.py); installed apart, so that without it only
# that test skips.
TB_PINS="tensorboard==2.21.0"
TB_CHECK="import tensorboard; assert tensorboard.__version__ == '2.21.0'"
install_tensorboard() {
    "$VENV/bin/python" -c "$TB_CHECK" 2>/dev/null && return 0
    if "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 1 --timeout 10 $TB_PINS >/dev/null 2>&1 &&
       "$VENV/bin/python" -c "$TB_CHECK" 2>/dev/null; then
        echo "test-venv: installed $TB_PINS into $VENV"
    else
        echo "test-venv: cannot install $TB_PINS from PyPI (offline?); the TensorBoard reader test will be skipped"
    fi
}

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    install_tensorboard
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON3" -m venv "$VENV" >/dev/null 2>&1; then
        rm -rf "$VENV"
        echo "test-venv: cannot create $VENV with '$PYTHON3 -m venv' (set BS_TEST_PYTHON3 to a python with venv); the ml_dtypes tests will be skipped"
        exit 0
    fi
fi
if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 1 --timeout 10 $PINS >/dev/null 2>&1 ||
   ! "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
    echo "test-venv: cannot install $PINS from PyPI (offline?); the ml_dtypes tests will be skipped"
    exit 0
fi
echo "test-venv: installed $PINS into $VENV"
install_tensorboard

