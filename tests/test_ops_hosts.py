"""test_ops_hosts.py: the network-namespace test hosts (tests/hosts/, issue 20
part 1). Two hosts: OpenMPI starts 4 ranks across them through the rsh
agent, two on each, each host under its own name; a host's processes and
namespaces are gone after the block, also when it ends by an exception; tc
limits a link's rate (tbf: the shaped transfer is no faster than the rate,
the unshaped one far faster); netem's delay (`--netem`) where the kernel has
it, else skipped with the reason. Skipped (77) without root or namespaces."""
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts"))
import testhosts  # noqa: E402
from testhosts import TestHosts  # noqa: E402

PY = "/usr/bin/python3"
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5001)); s.listen(1); s.settimeout(30)
print("listening", flush=True)
c, _ = s.accept(); c.settimeout(30)
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    c.sendall(b[:1]) if b.endswith(b"!") else None
"""
CLIENT = """
import socket, sys, time
c = socket.create_connection(("host1", 5001), timeout=30)
data = b"x" * (1 << 16)
t = time.monotonic()
for _ in range(int(sys.argv[1]) // len(data)):
    c.sendall(data)
c.sendall(b"!")
c.recv(1)  # the server has read everything
print(time.monotonic() - t)
"""


class Hosts(unittest.TestCase):
    def test_mpirun_across_two_hosts(self):
        with TestHosts(2) as h:
            self.assertEqual(len(h.addresses), 2)
            p = subprocess.run(h.mpirun_args(4, ["sh", "-c", "echo rank $OMPI_COMM_WORLD_RANK on $(hostname)"]),
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(sorted(p.stdout.split("\n")[:-1]), ["rank 0 on host0", "rank 1 on host0",
                                                                 "rank 2 on host1", "rank 3 on host1"])

    def test_cleanup_also_on_failure(self):
        hosts = TestHosts(2)
        with self.assertRaises(RuntimeError):
            with hosts as h:
                sleeper = subprocess.Popen(h.exec_args(1, ["sleep", "300"]))
                time.sleep(0.2)
                self.assertEqual(len(h.namespaces()), 3)  # two hosts and the switch
                raise RuntimeError("a failing test")
        self.assertEqual(hosts.namespaces(), [])
        self.assertEqual(sleeper.wait(timeout=10), -9, "the host's process ended with it")
        self.assertFalse(os.path.exists(f"/etc/netns/bs{hosts.ident}h0"))

    def transfer_seconds(self, h, nbytes):
        server = subprocess.Popen(h.exec_args(1, [PY, "-c", SERVER]), stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(server.stdout.readline().strip(), "listening")
            p = subprocess.run(h.exec_args(0, [PY, "-c", CLIENT, str(nbytes)]), capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            return float(p.stdout)
        finally:
            server.kill()
            server.wait()
            server.stdout.close()

    def test_rate_shaping(self):
        nbytes, mbit = 2 << 20, 20
        with TestHosts(2) as h:
            free = nbytes * 8 / 1e6 / self.transfer_seconds(h, nbytes)
            p = h.shape(1, f"rate {mbit}mbit")
            self.assertEqual(p.returncode, 0, p.stderr)
            shaped = nbytes * 8 / 1e6 / self.transfer_seconds(h, nbytes)
        print(f"host0 -> host1: {free:.0f} Mbit/s unshaped, {shaped:.1f} Mbit/s shaped to {mbit}", file=sys.stderr)
        self.assertLess(shaped, mbit * 1.1)  # tbf lets nothing through faster (one 32 kbit burst aside)
        self.assertGreater(free, 3 * mbit)


def netem_delay():
    """--netem: a 20 ms delay on host1's link makes a TCP handshake from host0 take 40 ms or more."""
    with TestHosts(2) as h:
        p = h.shape(1, "delay 20ms")
        if p.returncode == testhosts.SKIP:
            print(f"skipped: {p.stderr.strip()}", file=sys.stderr)
            return testhosts.SKIP
        code = ("import socket, time\nt = time.monotonic()\ntry:\n    socket.create_connection(('host1', 9), 5)\n"
                "except ConnectionRefusedError:\n    pass\nprint(time.monotonic() - t)")
        out = subprocess.run(h.exec_args(0, [PY, "-c", code]), capture_output=True, text=True, timeout=30).stdout
        rtt = float(out)
        print(f"handshake with 20 ms each way: {rtt * 1e3:.1f} ms", file=sys.stderr)
        return 0 if rtt >= 0.040 else 1


if __name__ == "__main__":
    testhosts.skip_unless_possible()
    if sys.argv[1:] == ["--netem"]:
        sys.exit(netem_delay())
    unittest.main()
