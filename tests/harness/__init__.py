"""tests/harness: helpers that several tests of one area share (a training run, a checkpoint reader, a
peer encoder). The harness proper is tests/bstest.py; a test imports these, never another test."""
