"""cluster.py: a one-node SLURM cluster on this machine for tests: Debian's
munged, slurmctld and slurmd, all in a private directory (their own munge
key and socket, state, spool, logs, pid files; ports picked free on
127.0.0.1), root as SlurmUser, no cgroups (proctrack/linuxproc, task/none),
no accounting. Clients find it through SLURM_CONF in `env`. Credentials
expire after 5 s (cred_expire; 120 s by default): a requeued job cannot start
again before its old credential expires, so this is how long SLURM holds it.

    with SlurmCluster() as c:          # raises Unavailable(why) if it cannot start
        subprocess.run(["sbatch", ...], env=c.env)

Every wait is bounded; leaving the block (also on an exception) cancels the
jobs, stops the three daemons by their pid files and removes the directory."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")


class Unavailable(Exception):
    """SLURM cannot run here; the message says why."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, limit_s, what):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what} within {limit_s} s")


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


CONF = """ClusterName=bstest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/sock,cred_expire=5
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
JobRequeue=1
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __enter__(self):
        if os.geteuid() != 0:
            raise Unavailable("not root: the test cluster runs slurmd and munged as root")
        missing = [p for p in DAEMONS + ("sbatch", "scontrol", "scancel", "sinfo") if not shutil.which(p)]
        if missing:
            raise Unavailable(f"missing {', '.join(missing)} (Debian: slurmctld slurmd slurm-client munge; "
                              "scripts/install-deps.sh installs them)")
        self.dir = tempfile.mkdtemp(prefix="bs-slurm-")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        d = self.dir
        for sub in ("munge", "state", "spool"):
            os.makedirs(os.path.join(d, sub), mode=0o700)
        with open(os.path.join(d, "munge", "key"), "wb") as f:
            f.write(os.urandom(128))
        os.chmod(os.path.join(d, "munge", "key"), 0o600)
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(host=socket.gethostname().split(".")[0], d=d, ctld_port=free_port(),
                                d_port=free_port(), cpus=os.cpu_count()))
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self._daemon(["munged", "--force", f"--socket={d}/munge/sock", f"--key-file={d}/munge/key",
                      f"--log-file={d}/munge/log", f"--pid-file={d}/munge/pid", f"--seed-file={d}/munge/seed"],
                     "munge/log")
        self._daemon(["slurmctld", "-f", self.conf], "slurmctld.log")
        self._daemon(["slurmd", "-f", self.conf], "slurmd.log")
        try:
            wait_until(lambda: self.node_state() == "idle", 30, "the node did not become idle")
        except TimeoutError as e:
            raise Unavailable(f"{e}; node state '{self.node_state()}'; {self.log_tail('slurmd.log')}") from e

    def _daemon(self, cmd, log):
        p = subprocess.run(cmd, capture_output=True, text=True, env=getattr(self, "env", None), timeout=30)
        if p.returncode != 0:
            raise Unavailable(f"{cmd[0]} did not start ({p.returncode}): {(p.stderr or p.stdout).strip()} "
                              f"{self.log_tail(log)}")

    def log_tail(self, name, lines=3):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return " | ".join(f.read().splitlines()[-lines:])
        except OSError:
            return f"(no {name})"

    def node_state(self):
        p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env, timeout=10)
        return p.stdout.strip()

    def job(self, job_id):
        """scontrol's fields of a job as a dict (JobState, Restarts, Reason, ...)."""
        p = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True,
                           env=self.env, timeout=10)
        return dict(w.split("=", 1) for w in p.stdout.split() if "=" in w)

    def __exit__(self, *exc):
        if getattr(self, "env", None):
            subprocess.run(["scancel", "--full", "--user=root"], capture_output=True, env=self.env, timeout=10)
        for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/pid"):
            self._stop(os.path.join(self.dir, pid_file))
        shutil.rmtree(self.dir, ignore_errors=True)

    @staticmethod
    def _stop(pid_file):
        try:
            with open(pid_file) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not alive(pid), 10, "")
        except (ProcessLookupError, TimeoutError):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
