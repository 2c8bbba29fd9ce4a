"""testhosts.py: the test hosts of hosts.sh from Python: a context manager
that makes N hosts and removes them (processes, namespaces, /etc/netns
entries) when the block ends, also by an exception, and first sweeps hosts
left by a test that was killed. Tests that cannot have hosts (no root, no
namespaces) exit 77 with the reason, which CTest counts as skipped."""
import os
import subprocess
import sys

HOSTS_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts.sh")
SKIP = 77


def hosts_sh(*args, check=True, timeout=60):
    p = subprocess.run([HOSTS_SH] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"hosts.sh {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def skip_unless_possible():
    """Exit 77 (skipped, with the reason) where namespaces cannot be made."""
    if os.geteuid() != 0:
        print("skipped: test hosts need root (network namespaces)", file=sys.stderr)
        sys.exit(SKIP)
    probe = TestHosts(1, ident=os.getpid() % 100000 + 100000)
    p = hosts_sh("up", probe.ident, 1, check=False)
    hosts_sh("down", probe.ident, check=False)
    if p.returncode != 0:
        print(f"skipped: {p.stderr.strip()}", file=sys.stderr)
        sys.exit(SKIP)


class TestHosts:
    def __init__(self, count, ident=None):
        self.count = count
        self.ident = ident if ident is not None else os.getpid()
        self.addresses = []

    def __enter__(self):
        hosts_sh("sweep", check=False)
        p = hosts_sh("up", self.ident, self.count, check=False)
        if p.returncode != 0:
            hosts_sh("down", self.ident, check=False)
            raise AssertionError(f"cannot make {self.count} test hosts: {p.stderr}")
        self.addresses = p.stdout.split()
        return self

    def __exit__(self, *exc):
        hosts_sh("down", self.ident, check=False)
        return False

    def reset(self):
        """Down and up again: a fresh set after a test that broke the hosts (a lost link leaves stuck daemons)."""
        self.__exit__(None, None, None)
        self.__enter__()

    def exec_args(self, host, args):
        return [HOSTS_SH, "exec", str(self.ident), str(host)] + list(args)

    def mpirun_args(self, ranks, args, slots=2):
        """mpirun across the hosts (`slots` ranks per host), running args."""
        return ["env", f"BS_SLOTS={slots}", HOSTS_SH, "mpirun", str(self.ident), "-np", str(ranks),
                "-x", "OMP_NUM_THREADS"] + list(args)

    def shape(self, host, spec):
        return hosts_sh("shape", self.ident, host, spec, check=False)

    def link(self, host, state):
        hosts_sh("link", self.ident, host, state)

    def namespaces(self):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in out.splitlines() if line.startswith(f"bs{self.ident}")]
