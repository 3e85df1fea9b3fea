"""A real, single-host Slurm cluster for tests (standard library only).

Brings up, as root, without systemd or cgroups:

* ``munged`` running as user ``munge`` with its own key, socket, pid, log and
  seed files under a private temp dir (the system munge is never touched);
* ``slurmctld`` and three emulated nodes ``n1..n3`` (one ``slurmd -N nK`` each,
  on its own port on 127.0.0.1), all in the foreground as our direct children,
  so we know every pid we started.

Usage from Python::

    from support.slurm_cluster import SlurmCluster
    with SlurmCluster() as cluster:              # start() + wait_ready()
        job = cluster.sbatch("#!/bin/bash\\nhostname\\n", "--array=0-3")
        tasks = cluster.wait_job(job, timeout=60)  # {0: TaskState(...), ...}

and from the command line::

    python tests/support/slurm_cluster.py up   [--dir DIR]   # prints `export SLURM_CONF=...`
    python tests/support/slurm_cluster.py down [--dir DIR]
    python tests/support/slurm_cluster.py env  [--dir DIR]

Slurm layout (see /work/shared/docs/test-infrastructure.md): proctrack/linuxproc,
task/none, no accounting, select/cons_tres + CR_Core, JobRequeue=1, preemption
by partition priority with REQUEUE: partition ``main`` (default, GraceTime=0)
and ``urgent`` (higher PriorityTier; a job there requeues a running ``main`` task).
Each node claims 2 CPUs (SlurmdParameters=config_overrides, so slurmd believes the
config rather than the hardware): 3 x 2 = 6 "CPUs" on a 2-core machine.

Gotchas met while making this work (Slurm 22.05.8 / munge 0.5.15, Debian 12):

* ``tempfile.mkdtemp`` gives mode 0700 owned by root; munged (user ``munge``)
  must traverse the base dir, so the base dir is chmod 0755 and the munge dir
  is owned by munge.  The socket's directory must be mode 0711.  The key file
  must be owned by munge, mode 0400.  munged logs "Unauthorized credential for
  client UID=0" at Info level during normal operation: harmless.
* slurmd logs "can not load PMIx library" errors at start: harmless (MpiDefault=none).
* ``State=DOWN`` in ``scontrol update`` needs a ``Reason=``.
* ``ReturnToService=2`` would silently bring an admin-DOWNed node back at its
  next registration (a node-loss test then sees the task rerun on the "lost"
  node and ``State=RESUME`` fails with "Invalid node state"); we use 1.
* With default scheduler intervals a requeued task sat in PENDING (BeginTime)
  ~27 s until the backfill pass (bf_interval=30); ``sched_interval=2,bf_interval=2``
  brings requeue → rerun down to cred_expire+1 = ~11 s.  Slurm won't restart a
  requeued job before ``cred_expire`` seconds (AuthInfo; default here 10).
* The very first job after start-up is scheduled ~3 s after slurmctld starts
  (controller start-up delay); later submissions start in ~0.05 s.
* A pending, not yet split array shows as one record with ``ArrayTaskId=0-3``
  (or ``1-3``, ``0,2``, ``4-11%2``); ``job_states`` expands such ranges.
* Finished jobs stay visible to ``scontrol show job`` for MinJobAge seconds;
  raised to 3600 so ``wait_job`` can read final states/exit codes without
  accounting (there is no sacct here).
* slurmctld forks a helper ``slurmctld: slurmscriptd`` (it dies with slurmctld).
  Killing slurmd does not kill running jobs' ``slurmstepd``: ``stop()`` first
  scancels everything and waits for the steps to end, then terminates the
  daemons (slurmd, slurmctld, munged, by pid) and finally sweeps any leftover
  slurm*/munged process carrying this cluster's marker variable in its
  environment (so only descendants of our daemons, never by name).
* Daemons are started with PR_SET_PDEATHSIG=SIGTERM (unless started by the CLI
  ``up``), so a crashed/killed test process does not leave slurmctld/slurmd
  behind.  munged ignores it (it survives its parent); it is tiny and idle.
  Popen(user=...) would clear the death signal (credential change), so the
  user switch for munged is done in our own preexec hook, before the prctl.
* CPUs per node is free with ``SlurmdParameters=config_overrides``: checked
  with 3 x 4 "CPUs" on the 2-core VM (12 array tasks RUNNING at once).
* Two clusters (two test sessions) can run side by side: ports are probed free
  (slurmctld port P, slurmd ports P+1..P+3) and all paths are per temp dir.

Timings measured on the 2-core dev VM: apt-get update + install slurm-wlm munge
5-8 s; cluster up (munged + slurmctld + 3 slurmd, all nodes idle) ~0.3 s; first
4-task array submitted → all COMPLETED ~2.8 s (start-up scheduling delay), next
ones ~0.3 s; ``scontrol requeue`` → rerun (SLURM_RESTART_COUNT=1) ~11 s; node
DOWN → task rerun on another node ~11 s; RESUME → node idle ~1 s; preemption by
a job in ``urgent``: it runs within ~2 s, the preempted ``main`` task is requeued;
stop ~0.3 s.  Fresh machine → `.ci/run -k slurm_cluster` finished: 66-91 s
(pip ~40-60 s, apt ~5-8 s, three tests ~20 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

REQUIRED_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo", "scancel")

MARKER_VAR = "SHARDWRIGHT_SLURM_CLUSTER"

FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
# NODE_FAIL and PREEMPTED are final only when the job is not requeued; with
# JobRequeue=1 they normally turn into PENDING again, so wait_job treats them as
# final only if they stay for `transient_grace` seconds.
TRANSIENT_FINAL_STATES = frozenset({"NODE_FAIL", "PREEMPTED"})


class SlurmClusterError(RuntimeError):
    pass


def missing_binaries() -> list[str]:
    """Names of the Slurm/munge programs that are not installed."""
    extra = [p for p in ("/usr/sbin", "/sbin", "/usr/local/sbin") if p not in os.environ.get("PATH", "")]
    path = os.pathsep.join([os.environ.get("PATH", "")] + extra)
    return [b for b in REQUIRED_BINARIES if shutil.which(b, path=path) is None]


def _which(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])
    found = shutil.which(name, path=path)
    if not found:
        raise SlurmClusterError(f"{name} not found (install with: apt-get install slurm-wlm munge)")
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _find_port_block(count: int, start: int = 17000, stop: int = 30000) -> int:
    """First port p >= start (stepping by 10) such that p..p+count-1 are free."""
    offset = (os.getpid() % 200) * 10  # spread concurrent test sessions apart
    candidates = list(range(start + offset, stop, 10)) + list(range(start, start + offset, 10))
    for base in candidates:
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise SlurmClusterError("no free block of ports for slurmctld/slurmd")


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    # Note: a credential change (Popen(user=...)) after prctl clears the setting,
    # so _spawn switches user inside this preexec hook, before the prctl.
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:
        pass


def expand_ids(spec: str) -> list[int]:
    """'0-3' -> [0,1,2,3]; '1,3-4' -> [1,3,4]; '0-7:2' -> [0,2,4,6]; '[0-3%2]' ok."""
    spec = spec.strip().strip("[]")
    spec = spec.split("%", 1)[0]
    out: list[int] = []
    for part in spec.split(","):
        if not part:
            continue
        step = 1
        if ":" in part:
            part, s = part.split(":", 1)
            step = int(s)
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1, step))
        else:
            out.append(int(part))
    return out


def parse_scontrol_record(line: str) -> dict[str, str]:
    """Parse one `scontrol -o show ...` line into a dict.

    Values may contain spaces only in a few fields (Command, WorkDir, Reason...);
    we split on ' Key=' boundaries so such values survive.
    """
    fields: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s[A-Za-z][A-Za-z0-9_:/]*=|$)", line.strip()):
        fields[m.group(1)] = m.group(2)
    return fields


@dataclasses.dataclass
class TaskState:
    """State of one job (or one array task) as `scontrol show job` reports it."""

    job_id: str  # "123_2" for array tasks, "123" otherwise
    task_id: int | None
    state: str  # JobState, e.g. COMPLETED, FAILED, PENDING, RUNNING
    exit_code: int  # exit status of the batch script (ExitCode=N:S -> N)
    signal: int  # terminating signal (ExitCode=N:S -> S)
    nodes: str  # NodeList ("(null)" -> "")
    batch_host: str
    restarts: int
    reason: str
    raw: dict[str, str] = dataclasses.field(repr=False, default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES


class SlurmCluster:
    """A running (or startable) single-host Slurm cluster. See module docstring."""

    def __init__(
        self,
        base_dir: os.PathLike | None = None,
        nodes: int = 3,
        cpus_per_node: int = 2,
        cred_expire: int = 10,
        extra_conf: str = "",
        die_with_parent: bool = True,
    ) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="shardwright-slurm-")).resolve()
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.cpus_per_node = cpus_per_node
        self.cred_expire = cred_expire
        self.extra_conf = extra_conf
        # PR_SET_PDEATHSIG: if the Python process that started the daemons dies
        # without stop() (kill -9, crash), they get SIGTERM instead of lingering.
        # The CLI `up` turns this off so the cluster outlives it.
        self.die_with_parent = die_with_parent
        self.conf_path = self.base_dir / "etc" / "slurm.conf"
        self.munge_socket = self.base_dir / "munge" / "sock" / "munge.socket"
        self.shared_dir = self.base_dir / "shared"  # handy scratch dir visible to all "nodes"
        self.log_dir = self.base_dir / "log"
        self.state_file = self.base_dir / "cluster.json"
        self.ctld_port: int | None = None
        self.slurmd_port: int | None = None
        self.pids: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------ env
    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses that talk to this cluster (sbatch, squeue...)."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf_path)
        env["PATH"] = os.pathsep.join([env.get("PATH", ""), "/usr/sbin", "/sbin"])
        env[MARKER_VAR] = str(self.base_dir)
        # Don't let a surrounding allocation leak into our clients.
        for k in list(env):
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del env[k]
        return env

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        if os.geteuid() != 0:
            raise SlurmClusterError("the test Slurm cluster must be started as root")
        missing = missing_binaries()
        if missing:
            raise SlurmClusterError(f"missing binaries: {', '.join(missing)} (apt-get install slurm-wlm munge)")
        try:
            self._write_files()
            self._start_munge()
            self._start_slurm()
            self._save_state()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_files(self) -> None:
        b = self.base_dir
        b.mkdir(parents=True, exist_ok=True)
        os.chmod(b, 0o755)  # munged (user munge) must traverse it
        for d in ("etc", "state", "spool", "log", "run", "shared"):
            (b / d).mkdir(exist_ok=True)
        os.chmod(self.shared_dir, 0o1777)
        munge = pwd.getpwnam("munge")
        mdir = b / "munge"
        (mdir / "sock").mkdir(parents=True, exist_ok=True)
        for d in (mdir, mdir / "sock"):
            os.chown(d, munge.pw_uid, munge.pw_gid)
        os.chmod(mdir, 0o700)
        os.chmod(mdir, 0o711)
        os.chmod(mdir / "sock", 0o711)
        key = mdir / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
            os.chown(key, munge.pw_uid, munge.pw_gid)

        nn = len(self.node_names)
        self.ctld_port = _find_port_block(nn + 1)
        self.slurmd_port = self.ctld_port + 1
        host = socket.gethostname().split(".")[0]
        c = self.cpus_per_node
        nodes = f"n[1-{nn}]" if nn > 1 else "n1"
        ports = f"{self.slurmd_port}-{self.slurmd_port + nn - 1}" if nn > 1 else str(self.slurmd_port)
        conf = f"""\
# Generated by tests/support/slurm_cluster.py -- single-host test cluster
ClusterName=shardwright
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
CommunicationParameters=NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket},cred_expire={self.cred_expire}
CredType=cred/munge
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool/%n
SlurmctldPidFile={b}/run/slurmctld.pid
SlurmdPidFile={b}/run/slurmd.%n.pid
SlurmctldLogFile={b}/log/slurmctld.log
SlurmdLogFile={b}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=1
JobRequeue=1
MinJobAge=3600
KillWait=5
SlurmdTimeout=60
SlurmctldTimeout=30
InactiveLimit=0
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName={nodes} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports} CPUs={c} Boards=1 SocketsPerBoard=1 CoresPerSocket={c} ThreadsPerCore=1 RealMemory=2048 State=UNKNOWN
PartitionName=main Nodes={nodes} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=0 PreemptMode=REQUEUE
PartitionName=urgent Nodes={nodes} Default=NO MaxTime=INFINITE State=UP PriorityTier=100 GraceTime=0 PreemptMode=OFF
{self.extra_conf}
"""
        self.conf_path.write_text(conf)

    def _daemon_env(self) -> dict[str, str]:
        env = self.env
        env[MARKER_VAR] = str(self.base_dir)
        return env

    def _spawn(self, name: str, argv: list[str], user: str | None = None, cwd: str | None = None) -> None:
        out = open(self.log_dir / f"{name}.out", "ab")
        pw = pwd.getpwnam(user) if user else None

        def preexec() -> None:
            if pw is not None:
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
            if self.die_with_parent:
                _set_pdeathsig()

        try:
            p = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._daemon_env(),
                start_new_session=True,
                close_fds=True,
                preexec_fn=preexec,
                cwd=cwd,
            )
        finally:
            out.close()
        self._procs[name] = p
        self.pids[name] = p.pid

    def _start_munge(self) -> None:
        mdir = self.base_dir / "munge"
        self._spawn(
            "munged",
            [
                _which("munged"),
                "-F",
                f"--key-file={mdir / 'munge.key'}",
                f"--socket={self.munge_socket}",
                f"--pid-file={mdir / 'munged.pid'}",
                f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'munged.seed'}",
                "--num-threads=4",
            ],
            user="munge",
            cwd=str(mdir),
        )
        deadline = time.monotonic() + 15
        while not self.munge_socket.exists():
            if self._procs["munged"].poll() is not None:
                raise SlurmClusterError(
                    "munged exited:\n" + self._tail(self.log_dir / "munged.out") + self._tail(mdir / "munged.log")
                )
            if time.monotonic() > deadline:
                raise SlurmClusterError("munged socket did not appear")
            time.sleep(0.05)

    def _start_slurm(self) -> None:
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf_path)], cwd=str(self.base_dir))
        # slurmd registers with slurmctld; start the nodes once the controller answers.
        self._wait(lambda: self._run_ok("scontrol", "ping", want="UP"), 20, "slurmctld did not come up", "slurmctld")
        for n in self.node_names:
            (self.base_dir / "spool" / n).mkdir(exist_ok=True)
            self._spawn(
                f"slurmd-{n}", [_which("slurmd"), "-D", "-N", n, "-f", str(self.conf_path)], cwd=str(self.base_dir)
            )

    def _run_ok(self, *args: str, want: str = "") -> bool:
        try:
            r = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0 and want in r.stdout

    def _wait(self, pred, timeout: float, msg: str, *watch: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if pred():
                return
            for name, p in self._procs.items():
                if p.poll() is not None and (not watch or name in watch or name.startswith("slurmd")):
                    raise SlurmClusterError(f"{name} exited with {p.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"{msg} within {timeout}s:\n{self.logs()}")
            time.sleep(0.1)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every node is idle (or mixed/allocated) and the controller answers."""

        def ready() -> bool:
            states = self.node_states()
            # A trailing "*" means "not responding": not ready yet.
            return len(states) == len(self.node_names) and all(s in ("idle", "mix", "alloc") for s in states.values())

        self._wait(ready, timeout, "nodes did not become idle")

    def _save_state(self) -> None:
        self.state_file.write_text(
            json.dumps(
                {
                    "base_dir": str(self.base_dir),
                    "conf": str(self.conf_path),
                    "pids": self.pids,
                    "ctld_port": self.ctld_port,
                    "nodes": self.node_names,
                    "own_dir": self._own_dir,
                },
                indent=1,
            )
        )

    @classmethod
    def attach(cls, base_dir: os.PathLike) -> SlurmCluster:
        """A handle on a cluster started earlier (e.g. by `slurm_cluster.py up`)."""
        data = json.loads((Path(base_dir) / "cluster.json").read_text())
        c = cls(base_dir=data["base_dir"], nodes=len(data["nodes"]))
        c.pids = {k: int(v) for k, v in data["pids"].items()}
        c.ctld_port = data["ctld_port"]
        c._own_dir = data.get("own_dir", False)
        return c

    def stop(self, remove_dir: bool | None = None) -> None:
        """Cancel all jobs, stop the daemons we started (by pid), remove the temp dir."""
        if self.pids and self.conf_path.exists() and self._alive("slurmctld"):
            try:
                subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=15)
                subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True, timeout=15)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and self._marked_pids(prefixes=("slurmstepd",)):
                    time.sleep(0.2)
            except Exception:
                pass
        # Nodes first, then the controller, then munge.
        order = [n for n in self.pids if n.startswith("slurmd-")] + ["slurmctld", "munged"]
        for name in order:
            self._terminate(name)
        # Anything still carrying our marker (slurmstepd, job processes) was started by us.
        for pid in self._marked_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.pids.clear()
        self._procs.clear()
        if remove_dir is None:
            remove_dir = self._own_dir
        if remove_dir and self.base_dir.exists():
            shutil.rmtree(self.base_dir, ignore_errors=True)
        elif self.state_file.exists():
            self.state_file.unlink()

    def _is_ours(self, pid: int) -> bool:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return f"{MARKER_VAR}={self.base_dir}".encode() in environ.split(b"\0")

    def _alive(self, name: str) -> bool:
        pid = self.pids.get(name)
        if pid is None:
            return False
        p = self._procs.get(name)
        if p is not None:
            return p.poll() is None
        return self._is_ours(pid)

    def _terminate(self, name: str, timeout: float = 10.0) -> None:
        pid = self.pids.get(name)
        if pid is None:
            return
        p = self._procs.get(name)
        if p is None and not self._is_ours(pid):
            return  # pid reused by something else: not ours to kill
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if p is not None:
                if p.poll() is not None:
                    return
            elif not Path(f"/proc/{pid}").exists() or not self._is_ours(pid):
                return
            time.sleep(0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if p is not None:
            p.wait(5)

    def _marked_pids(self, prefixes: Iterable[str] = ("slurm", "munged")) -> list[int]:
        """Descendants of our daemons (slurmstepd, slurmscriptd) found by the marker var."""
        prefixes = tuple(prefixes)
        skip = set()
        pid = os.getpid()
        while pid > 1:  # never ourselves nor an ancestor
            skip.add(pid)
            try:
                pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) not in skip and self._is_ours(int(d)):
                # Only processes whose environment came from our daemons: slurmstepd.
                # Job processes get the *submitter's* env; they die with their step.
                try:
                    comm = Path(f"/proc/{d}/comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith(prefixes):
                    out.append(int(d))
        return out

    # -------------------------------------------------------------- helpers
    def run(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a Slurm client command (scontrol, squeue, sinfo...) against this cluster."""
        r = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise SlurmClusterError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def scontrol(self, *args: str, check: bool = True) -> str:
        return self.run("scontrol", *args, check=check).stdout

    def sbatch(self, script_text: str, *args: str, cwd: os.PathLike | None = None) -> str:
        """Submit `script_text` (a batch script; a `#!/bin/bash` line is added if missing).

        Extra sbatch options go in `args`, e.g. ``"--array=0-3"``, ``"-o", "out_%a.log"``.
        Runs in `cwd` (default: ``self.shared_dir``). Returns the job id (str).
        """
        if not script_text.startswith("#!"):
            script_text = "#!/bin/bash\n" + script_text
        cwd = str(cwd or self.shared_dir)
        r = subprocess.run(
            ["sbatch", "--parsable", f"--chdir={cwd}", *args],
            input=script_text,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=cwd,
        )
        if r.returncode != 0:
            raise SlurmClusterError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def job_records(self, job_id: str) -> list[dict[str, str]]:
        """Raw `scontrol -o show job JOB` records (one per array task / pending range)."""
        r = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        if r.returncode != 0:
            if "Invalid job id" in r.stderr:
                return []
            raise SlurmClusterError(f"scontrol show job {job_id}: {r.stderr.strip()}")
        return [parse_scontrol_record(line) for line in r.stdout.splitlines() if line.strip()]

    def job_states(self, job_id: str) -> dict[int | None, TaskState]:
        """Current state of every task of `job_id` ({task_id: TaskState}; key None for a plain job).

        `job_id` may be an array job id ("12"), one task ("12_3") or a plain job id.
        """
        out: dict[int | None, TaskState] = {}
        for rec in self.job_records(job_id):
            ec, _, sig = rec.get("ExitCode", "0:0").partition(":")
            nodes = rec.get("NodeList", "")
            common = dict(
                state=rec.get("JobState", "UNKNOWN"),
                exit_code=int(ec or 0),
                signal=int(sig or 0),
                nodes="" if nodes == "(null)" else nodes,
                batch_host=rec.get("BatchHost", ""),
                restarts=int(rec.get("Restarts", "0") or 0),
                reason=rec.get("Reason", ""),
                raw=rec,
            )
            tid = rec.get("ArrayTaskId")
            if tid is None:
                out[None] = TaskState(job_id=rec.get("JobId", str(job_id)), task_id=None, **common)
            else:
                aj = rec.get("ArrayJobId", str(job_id))
                for t in expand_ids(tid):
                    out[t] = TaskState(job_id=f"{aj}_{t}", task_id=t, **common)
        return out

    def wait_job(
        self, job_id: str, timeout: float = 120.0, poll: float = 0.25, transient_grace: float = 30.0
    ) -> dict[int | None, TaskState]:
        """Wait until every task of `job_id` has ended; return {task_id: TaskState}.

        Ended = COMPLETED/FAILED/CANCELLED/TIMEOUT/... . NODE_FAIL and PREEMPTED count
        as ended only if the task stays there `transient_grace` seconds (otherwise
        it is being requeued). Raises TimeoutError with the current states.
        """
        deadline = time.monotonic() + timeout
        transient_since: dict[int | None, float] = {}
        states: dict[int | None, TaskState] = {}
        while True:
            states = self.job_states(job_id)
            now = time.monotonic()
            done = bool(states)
            for tid, st in states.items():
                if st.state in FINAL_STATES:
                    continue
                if st.state in TRANSIENT_FINAL_STATES:
                    t0 = transient_since.setdefault(tid, now)
                    if now - t0 >= transient_grace:
                        continue
                else:
                    transient_since.pop(tid, None)
                done = False
            if done:
                return states
            if now > deadline:
                summary = ", ".join(
                    f"{t}:{s.state}({s.reason})"
                    for t, s in sorted(states.items(), key=lambda kv: -1 if kv[0] is None else kv[0])
                )
                raise TimeoutError(f"job {job_id} not finished after {timeout}s: {summary or 'no records'}")
            time.sleep(poll)

    def wait_state(self, job_task: str, states: Iterable[str], timeout: float = 60.0, poll: float = 0.2) -> TaskState:
        """Wait until the single job/task `job_task` ("12_3" or "12") is in one of `states`."""
        want = set(states)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            recs = self.job_states(job_task)
            if len(recs) == 1:
                last = next(iter(recs.values()))
                if last.state in want:
                    return last
            time.sleep(poll)
        raise TimeoutError(f"{job_task} not in {sorted(want)} after {timeout}s (last: {last})")

    def requeue(self, job_task: str, hold: bool = False) -> None:
        """`scontrol requeue JOB[_TASK]`: SIGTERM the running task, rerun it later.

        The rerun starts after cred_expire seconds, with SLURM_RESTART_COUNT=1.
        """
        self.scontrol("requeuehold" if hold else "requeue", str(job_task))

    def cancel(self, job_task: str, *args: str) -> None:
        """`scancel [args] JOB[_TASK]` (e.g. args=("-b", "-s", "USR1") to signal the batch shell)."""
        self.run("scancel", *args, str(job_task))

    def set_node_state(self, node: str, state: str, reason: str = "shardwright test") -> None:
        """`scontrol update NodeName=node State=state` (DOWN/DRAIN need a reason; RESUME/IDLE don't)."""
        args = ["update", f"NodeName={node}", f"State={state}"]
        if state.upper() in ("DOWN", "DRAIN", "FAIL", "FAILING"):
            args.append(f"Reason={reason}")
        self.scontrol(*args)

    def node_states(self) -> dict[str, str]:
        """{node: sinfo state}, e.g. {'n1': 'idle', 'n2': 'down*', 'n3': 'mixed'}."""
        r = self.run("sinfo", "-h", "-N", "-p", "main", "-o", "%N %t", check=False)
        out: dict[str, str] = {}
        if r.returncode == 0:
            for line in r.stdout.splitlines():
                parts = line.split()
                if len(parts) == 2:
                    out[parts[0]] = parts[1]
        return out

    def squeue(self, *args: str) -> str:
        return self.run("squeue", *args).stdout

    def logs(self, lines: int = 30) -> str:
        """Tail of every daemon log (for failure messages)."""
        chunks = []
        for f in sorted(self.log_dir.glob("*")) + [self.base_dir / "munge" / "munged.log"]:
            chunks.append(f"--- {f.name}\n{self._tail(f, lines)}")
        return "\n".join(chunks)

    @staticmethod
    def _tail(path: Path, lines: int = 30) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        except OSError:
            return ""

    def exports(self) -> str:
        return f"export SLURM_CONF={self.conf_path}\n"


# ---------------------------------------------------------------------- CLI
def _default_dir() -> Path:
    return Path(tempfile.gettempdir()) / "shardwright-slurm-cluster"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Single-host Slurm test cluster (root only).")
    ap.add_argument("action", choices=["up", "down", "env", "status"])
    ap.add_argument("--dir", type=Path, default=_default_dir(), help="cluster directory (default: %(default)s)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--cpus-per-node", type=int, default=2)
    a = ap.parse_args(argv)
    state = a.dir / "cluster.json"
    if a.action == "up":
        if state.exists():
            c = SlurmCluster.attach(a.dir)
            if c._alive("slurmctld"):
                print(f"# already up in {a.dir}", file=sys.stderr)
                print(c.exports(), end="")
                return 0
            c.stop(remove_dir=True)
        if a.dir.exists():
            shutil.rmtree(a.dir)
        t0 = time.monotonic()
        c = SlurmCluster(base_dir=a.dir, nodes=a.nodes, cpus_per_node=a.cpus_per_node, die_with_parent=False)
        c._own_dir = True
        c.start()
        c._save_state()
        # The Popen objects die with us; the daemons live on in their own sessions.
        c._procs.clear()
        print(
            f"# slurm cluster up in {time.monotonic() - t0:.1f}s: {a.dir} (stop: python {sys.argv[0]} down)",
            file=sys.stderr,
        )
        print(c.exports(), end="")
        return 0
    if not state.exists():
        print(f"no cluster in {a.dir}", file=sys.stderr)
        return 0 if a.action == "down" else 1
    c = SlurmCluster.attach(a.dir)
    if a.action == "down":
        c.stop(remove_dir=True)
        print(f"# slurm cluster in {a.dir} stopped", file=sys.stderr)
    elif a.action == "env":
        print(c.exports(), end="")
    else:
        print(c.run("sinfo", "-N", check=False).stdout + c.run("squeue", check=False).stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
