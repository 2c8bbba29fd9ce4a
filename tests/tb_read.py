"""tb_read.py DIR: TensorBoard's own reading of the event files in DIR, as
JSON on stdout: {"scalars": {tag: [[step, value], ...]}, "records": N,
"crc_ok": bool}. Runs in the test venv (tensorboard from PyPI); used by
test_ops_tensorboard.py. The records' framing is checked with TensorBoard's
masked CRC-32C, the values come from its EventAccumulator."""
import glob
import json
import os
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c


def check_framing(path):
    """Record count and whether every length and payload CRC matches."""
    with open(path, "rb") as f:
        raw = f.read()
    pos, n, ok = 0, 0, True
    while pos < len(raw):
        head = raw[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (head_crc,) = struct.unpack("<I", raw[pos + 8:pos + 12])
        payload = raw[pos + 12:pos + 12 + length]
        (crc,) = struct.unpack("<I", raw[pos + 12 + length:pos + 16 + length])
        ok = ok and head_crc == masked_crc32c(head) and crc == masked_crc32c(payload) and len(payload) == length
        pos += 16 + length
        n += 1
    return n, ok and pos == len(raw)


def main(directory):
    files = glob.glob(os.path.join(directory, "events.out.tfevents.*"))
    records, crc_ok = 0, True
    for path in files:
        n, ok = check_framing(path)
        records, crc_ok = records + n, crc_ok and ok
    acc = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    json.dump({"files": len(files), "records": records, "crc_ok": crc_ok, "scalars": scalars}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
