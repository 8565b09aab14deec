"""Run a student's code in a sandbox: Linux namespaces, a size-limited scratch space and bounded resources.

A sandboxed process is started with ``Sandbox.start(argv)``. The command that really runs is

    setpriv --pdeathsig KILL -- unshare [--user --map-root-user] --mount --net --pid --ipc --uts
        --fork --kill-child --mount-proc -- python -I -S autograder/run/sandbox_inside.py CONFIG -- argv

and :mod:`autograder.run.sandbox_inside`, run as a script with the standard library only, builds the
sandbox inside the new namespaces before it executes ``argv``; this module is the grader's side. What
is enforced where namespaces work (Linux; :func:`isolation_available` tries it once), within the
:class:`~autograder.bounds.Limits` of the notebook:

- Files: the process sees a new root (``pivot_root``) holding read-only binds of the system
  (``/usr``, a few files of ``/etc``), the Python installation, the course packages (``bertlab``,
  ``autograder``; without their compiled copies, and with the graded chapter's references replaced
  by stand-ins: :mod:`autograder.run.stand_ins`), ``/proc`` of its own PID namespace, ``/sys``, a
  handful of devices, and its scratch space. ``solutions/``, the gradebook, the output and submission
  folders, other students' files, ``$HOME`` and the rest of the machine do not exist in there.
- Writes: only the scratch space, one memory file system (tmpfs) of ``Limits.scratch_mb`` and
  ``Limits.scratch_files`` files, mounted inside the sandbox as its working folder, ``$HOME``,
  ``/tmp`` and ``/dev/shm``; each file at most ``Limits.file_size_mb``. Nothing is written on the
  grading machine's disk but the process's log (``Limits.file_size_mb`` at most). It all vanishes
  with the namespace.
- Privileges: the code runs without capabilities, so the mounts above are locked: they cannot be
  unmounted to uncover what they hide nor made writable. Where the grader runs as root, the code
  runs as an unprivileged host user of its own (:func:`student_uid`), not in a user namespace; else
  as uid 1000 of a nested user namespace.
- Network: a network namespace with only a loopback interface that is down: no host, not even the
  grading machine's own services (its abstract Unix sockets are in the old namespace too).
- Processes: a PID namespace (sees and signals only its own processes; all of them die when the
  first one ends) in its own session and process group; ``--pdeathsig`` and ``--kill-child`` end
  it when the grader dies. IPC and host name namespaces of its own.
- Devices: only null, zero, full, random and urandom; no GPU, so student code is graded on the CPU.
- Memory and processes (:func:`resource_bounds` says which bound is in force): with cgroup v2 (a
  cgroup folder with the memory and pids controllers that the grader may write: its own, or
  ``$AUTOGRADER_CGROUP``), each sandbox gets a cgroup whose ``memory.max`` is ``Limits.memory_mb``
  and ``pids.max`` is ``Limits.processes``: the bound of the whole process tree, memory files
  included. Without it: ``RLIMIT_AS`` (``Limits.memory_mb`` per process), ``RLIMIT_NPROC``
  (``Limits.processes`` processes and threads) and ``RLIMIT_NOFILE``; the system calls that make
  memory outside both (``memfd_create``, System V shared memory and message queues) are refused
  with a seccomp filter. The memory of the tree is then at most processes x memory_mb, plus the
  scratch space (a memory file system, which no process limit counts).
- CPU: all the processes of a sandbox together get ``Limits.threads`` cores on average: cgroup v2's
  ``cpu.max`` where the cgroup folder also delegates the cpu controller, else :class:`CpuShare`, a
  thread of the grader that stops them (SIGSTOP) while they have used more than that.
- Time: ``RLIMIT_CPU`` as a backstop; the wall-clock limits per cell and per notebook are enforced
  by the caller, which kills the process group (and with it the namespace).

The sandbox binds the grader's Python wherever it lives (a virtual environment or a clone under
``/tmp``, under ``$HOME``, a user site, a conda prefix), after its scratch space, so that its own
``/tmp`` covers nothing it binds. :func:`isolation_available` checks that a sandbox starts and
imports the course's packages and PyTorch; where it does not (macOS, containers that forbid
namespaces), ``autograder grade`` runs no student code unless told to (``--unsandboxed``). Such a
sandbox (``isolate=False``) has only the scratch folder (on disk, bounded per file only) as working
directory and ``$HOME``, a minimal environment, a session of its own and the resource limits: the
code can then read whatever the grading user can read, and reach the network.
"""

import functools
import itertools
import json
import os
import platform
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from autograder.bounds import (
    CGROUP_REMOVAL_SECONDS,
    CPU_BURST,
    CPU_PERIOD,
    MEMORY_MARGIN_MB,
    MEMORY_PERIOD,
    REAP_SECONDS,
    SANDBOX_PROBE_SECONDS,
    Limits,
)
import autograder.run.sandbox_inside as sandbox_inside

# Files of /etc that programs need (dynamic linker, user names, fonts, time zone); not shadow files.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
             "localtime", "fonts", "alternatives", "mime.types", "ssl")
DEVICES = ("null", "zero", "full", "random", "urandom")
SYSTEM_DIRECTORIES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
STUDENT_UID_BASE = 2_000_000  # host uids of the students' code when the grader runs as root
COURSE_PACKAGES = ("bertlab", "autograder")  # importable in the sandbox, read-only, from the grader's copy
WORK, HOME = "/sandbox/work", "/sandbox/home"  # in an isolated sandbox, both in its scratch space


@dataclass(frozen=True)
class SandboxOptions:
    """What every sandbox of a grading run gets besides its limits (see :class:`Sandbox`)."""

    isolate: bool  # whether it gets namespaces (else the scratch folder and the limits only)
    hide: tuple[Path, ...] = ()  # paths that stay invisible even inside a folder it binds
    share: tuple[Path, ...] = ()  # folders it may read (a dataset), bound read-only
    variables: Mapping[str, str] = field(default_factory=dict)  # added to its environment

    def new_sandbox(self, limits: Limits, files: Path | None = None, covers: tuple = ()) -> "Sandbox":
        """A sandbox with these options, ``limits``, the ``files`` its working folder starts with and the
        files of the course's packages it shows in place of others (``covers``)."""
        return Sandbox(limits, files=files, hide=self.hide, share=self.share, variables=self.variables,
                       isolate=self.isolate, covers=covers)


class Sandbox:
    """A scratch space and the recipe to start processes confined to it.

    Its working folder starts with the files of the folder ``files`` (an isolated sandbox copies them
    into its scratch space as each process starts, so they must not change meanwhile), or else with
    the files put in ``work`` before the first process starts. ``hide`` lists paths that must stay
    invisible even if they lie inside something the sandbox binds (the course's ``solutions/``, the
    output folder): they are covered by empty file systems. ``share`` lists folders the code may read
    (a dataset), bound read-only; ``variables`` adds to its environment. ``covers`` lists files of the
    course's packages and what the sandbox shows in their place (:class:`autograder.run.stand_ins.Cover`:
    the graded chapter's references withheld); the compiled copies of those packages (``__pycache__``)
    are always hidden. Use as a context manager:
    leaving it kills every process it started and deletes its folders and cgroup.
    """

    def __init__(self, limits: Limits = Limits(), *, files: Path | None = None, hide: tuple[Path, ...] = (),
                 share: tuple[Path, ...] = (), variables: dict[str, str] | None = None, isolate: bool | None = None,
                 covers: tuple = ()):
        self.limits = limits
        self.share = tuple(str(Path(path).resolve()) for path in share)
        self.variables = dict(variables or {})
        self.isolated = isolation_available()[0] if isolate is None else isolate
        self.root = Path(tempfile.mkdtemp(prefix="ag-"))
        self.work, self.home, self.runtime = self.root / "work", self.root / "home", self.root / "run"
        for folder in (self.work, self.home, self.runtime, self.root / ".root"):
            folder.mkdir()
        self.stage = self.work  # what the working folder starts with
        if files is not None and self.isolated:
            self.stage = Path(files)
        elif files is not None:  # the working folder itself, on disk
            shutil.copytree(files, self.work, dirs_exist_ok=True)
        compiled = compiled_copies(_package_directories()) if self.isolated else []
        self.hide = tuple(str(Path(path).resolve()) for path in [*hide, *compiled])
        self.covers = tuple([str(Path(cover.target).resolve()), str(Path(cover.source).resolve())] for cover in covers)
        self.uid = student_uid() if self.isolated and os.geteuid() == 0 else None
        bounds = resource_bounds()
        self.cgroup = _Cgroup(bounds, limits) if bounds.cgroup is not None else None
        self.processes: list[subprocess.Popen] = []
        roots = lambda: [process.pid for process in self.processes]  # noqa: E731
        self.cpu_share = None if bounds.cpu_max else CpuShare(roots, limits.threads)
        self.memory_bound = (None if bounds.cgroup is not None else
                             MemoryBound(roots, limits.memory_mb, limits.scratch_mb if self.isolated else None))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def config(self) -> dict:
        return {
            "isolated": self.isolated,
            "root": str(self.root),
            "stage": str(self.stage),
            "workdir": WORK if self.isolated else str(self.work),
            "home": HOME,
            "uid": self.uid,
            "plan": [*_mount_plan(self.share), *(["cover", *cover] for cover in self.covers)] if self.isolated
                    else [],
            "hide": list(self.hide),
            "limits": asdict(self.limits),
        }

    def command(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` inside this sandbox."""
        prelude = [sys.executable, "-I", "-S", str(Path(sandbox_inside.__file__).resolve()),
                   json.dumps(self.config()), "--"]
        if not self.isolated:
            return [*prelude, *argv]
        users = [] if self.uid is not None else ["--user", "--map-root-user"]
        return ["setpriv", "--pdeathsig", "KILL", "--", "unshare", *users, "--mount", "--net", "--pid", "--ipc",
                "--uts", "--fork", "--kill-child", "--mount-proc", "--", *prelude, *argv]

    def environment(self) -> dict[str, str]:
        """A minimal environment: nothing of the grader's (no database URL, no tokens) leaks in."""
        threads = str(self.limits.threads)
        home = HOME if self.isolated else str(self.home)
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "USER": "student",
            "LOGNAME": "student",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp" if self.isolated else str(self.runtime),
            "PYTHONPATH": _import_path(),
            **_user_site_variable(),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # figures become PNG outputs
            "MPLCONFIGDIR": f"{home}/.matplotlib",
            "IPYTHONDIR": f"{home}/.ipython",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "NBGRADER_EXECUTION": "autograde",
            **self.variables,
        }

    def start(self, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` in the sandbox, in a session of its own; extra arguments go to Popen."""
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        if self.cgroup is not None:
            popen_kwargs["preexec_fn"] = self.cgroup.join
        process = subprocess.Popen(
            self.command(argv), cwd=self.work, env=self.environment(), start_new_session=True, **popen_kwargs
        )
        self.processes.append(process)
        for watch in (self.cpu_share, self.memory_bound):
            if watch is not None:
                watch.start()
        return process

    def run(self, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` to completion in the sandbox (killed after ``timeout`` seconds); capture output."""
        process = self.start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill(process)
            stdout, stderr = process.communicate()
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def close(self) -> None:
        for watch in (self.cpu_share, self.memory_bound):
            if watch is not None:
                watch.stop()
        for process in self.processes:
            kill(process)
        self.processes.clear()
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.root, ignore_errors=True)


def kill(process: subprocess.Popen) -> None:
    """SIGKILL a sandboxed process, its process group and the first process of its PID namespace.

    The namespace's first process is killed by pid as well, in case the code left the process
    group; when it dies, the kernel ends every other process of the namespace.
    """
    if process.poll() is None:
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        for action in (lambda: os.killpg(process.pid, signal.SIGKILL),
                       *(lambda pid=pid: os.kill(int(pid), signal.SIGKILL) for pid in pids),
                       lambda: process.kill()):
            try:
                action()
            except (ProcessLookupError, PermissionError):
                pass
    try:
        process.wait(timeout=REAP_SECONDS)
    except subprocess.TimeoutExpired:
        pass


def interrupt(process: subprocess.Popen) -> None:
    """Send SIGINT to a sandboxed process group (a KeyboardInterrupt in the code it runs)."""
    try:
        os.killpg(process.pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        pass


_uids = itertools.count()


def student_uid() -> int:
    """A host uid for one sandbox's code when the grader runs as root: no other process has it, so
    that RLIMIT_NPROC counts that sandbox's processes only (and root's exemption from it is gone)."""
    return STUDENT_UID_BASE + (os.getpid() << 4) + next(_uids) % 16


@functools.cache
def isolation_available() -> tuple[bool, str]:
    """Whether sandboxes get namespaces here, and why not when they do not (tried once): a sandbox
    must start the grader's Python as an unprivileged user alone in its PID namespace, and that
    Python must import the course's packages and PyTorch, as a student process does."""
    if platform.system() != "Linux" or platform.machine() not in sandbox_inside.SYSCALLS:
        return False, f"namespaces are not supported on {platform.system()} {platform.machine()}"
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return False, "the util-linux tools unshare and setpriv are not installed"
    with Sandbox(isolate=True) as sandbox:
        probe = ("import os, torch, bertlab, autograder.run.wire; "
                 "print(os.getuid() != 0, sum(name.isdigit() for name in os.listdir('/proc')) < 5)")
        result = sandbox.run([sys.executable, "-c", probe], timeout=SANDBOX_PROBE_SECONDS)
    if result.returncode != 0 or result.stdout.split() != ["True", "True"]:
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return False, f"namespaces do not work here ({reason})"
    return True, "Linux namespaces"


# --------------------------------------------------------------------------------------------------
# Memory and processes of a whole sandbox: cgroup v2 where the grader may create cgroups
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """How the memory and the processes of a sandbox are bounded on this machine."""

    cgroup: Path | None  # the cgroup v2 folder under which each sandbox gets its cgroup, if any
    reason: str  # why there is none, or where it is
    cpu_max: bool = False  # whether that folder also delegates the cpu controller (cpu.max)

    def describe(self, limits: Limits) -> str:
        cpu = (f"; CPU: {limits.threads} core(s) for all the processes of a submission, "
               + ("by cgroup v2's cpu.max" if self.cpu_max else
                  f"by the grader, which stops them (SIGSTOP) while they are over it (averaged over {CPU_BURST:g} s)"))
        if self.cgroup is not None:
            return (f"cgroup v2 ({self.cgroup}): {limits.memory_mb} MB of memory and {limits.processes} processes "
                    f"and threads for all the processes of a submission{cpu}")
        root = " (the student's code runs as an unprivileged host user)" if os.geteuid() == 0 else ""
        return (f"per-process limits, since {self.reason}: {limits.memory_mb} MB of address space per process "
                f"(RLIMIT_AS), {limits.processes} processes and threads (RLIMIT_NPROC){root}, "
                f"{limits.open_files} open files; memfd_create and System V shared memory refused; and "
                f"{limits.memory_mb} MB for all the processes of a submission and its scratch space together, by the "
                f"grader, which kills them past it (looking every {MEMORY_PERIOD:g} s: up to {MEMORY_MARGIN_MB} MB "
                f"more between two looks){cpu}")


@functools.cache
def resource_bounds() -> Bounds:
    """The cgroup v2 folder where each sandbox can get a cgroup with the memory and pids
    controllers (``$AUTOGRADER_CGROUP``, else the grader's own cgroup), or why there is none."""
    requested = os.environ.get("AUTOGRADER_CGROUP")
    candidates = [Path(requested)] if requested else [path for path in [_own_cgroup()] if path is not None]
    for folder in candidates:
        controllers = folder / "cgroup.subtree_control"
        try:
            enabled = set(controllers.read_text().split())
        except OSError:
            continue
        if {"memory", "pids"} <= enabled and os.access(folder, os.W_OK):
            return Bounds(folder, str(folder), cpu_max="cpu" in enabled)
    where = f"$AUTOGRADER_CGROUP ({requested})" if requested else "the grader's cgroup"
    return Bounds(None, f"{where} does not delegate the memory and pids controllers of cgroup v2")


def _own_cgroup() -> Path | None:
    """The grader's cgroup v2 folder (from /proc/self/cgroup and the cgroup2 mount), if any."""
    try:
        line = next(line for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
        mounts = [line.split(" - ")[0].split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if " - cgroup2 " in line]
    except (OSError, StopIteration, IndexError):
        return None
    return Path(mounts[0]) / line.removeprefix("0::").lstrip("/") if mounts else None


class _Cgroup:
    """One sandbox's cgroup: its memory and process limits, joined by every process it starts."""

    def __init__(self, bounds: Bounds, limits: Limits):
        self.path = bounds.cgroup / f"autograder-{uuid.uuid4().hex}"
        self.path.mkdir()
        (self.path / "memory.max").write_text(str(limits.memory_mb * 1024 * 1024))
        if (self.path / "memory.swap.max").exists():
            (self.path / "memory.swap.max").write_text("0")
        (self.path / "pids.max").write_text(str(limits.processes))
        if bounds.cpu_max:
            period = 100_000  # microseconds
            (self.path / "cpu.max").write_text(f"{limits.threads * period} {period}")

    def join(self) -> None:
        """Called in the new process before it executes the sandbox's command."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        kill_file = self.path / "cgroup.kill"
        pause = 0.05  # seconds between two tries
        for _ in range(round(CGROUP_REMOVAL_SECONDS / pause)):
            try:
                if kill_file.exists():
                    kill_file.write_text("1")
                self.path.rmdir()
                return
            except OSError:
                time.sleep(pause)


# --------------------------------------------------------------------------------------------------
# The CPU of a whole sandbox, where no cgroup's cpu.max bounds it
# --------------------------------------------------------------------------------------------------


class _Watch:
    """A thread of the grader that looks at every process of a sandbox each ``period`` seconds (:meth:`look`)
    and, when stopped, lets go of them (:meth:`finish`). In a PID namespace every process of the sandbox
    descends from its first ones (``roots()``), whatever sessions it makes."""

    period = CPU_PERIOD

    def __init__(self, roots):
        self.roots = roots
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=type(self).__name__, daemon=True)

    def start(self) -> None:
        if not self._thread.is_alive() and not self._done.is_set():
            self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.period):
            self.look(descendants(self.roots()))
        self.finish()

    def look(self, pids: list[int]) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass


class CpuShare(_Watch):
    """Holds the processes of a sandbox to ``cores`` cores on average, as cgroup v2's ``cpu.max`` would.

    It looks every :data:`CPU_PERIOD` seconds at the CPU time of every process of the sandbox. Time is
    credit: ``cores`` seconds per second, at most :data:`CPU_BURST` seconds' worth banked. While the
    processes have used more than their credit they are all stopped (SIGSTOP, which no process can
    catch), stopped again at every look (a process that escaped counts what it used), and continued
    once the credit is back; no process may signal them all at once (``kill(-1, ...)`` is refused).
    A process that lives shorter than one look is counted when its parent reaps it (the parent's
    reaped children's time grows by the child's); of a process that was seen and then reaped, that
    growth is counted less what was counted of it already (:func:`cpu_used`). No process of the
    sandbox may have the kernel reap its children (a new disposition of SIGCHLD is refused), which
    would add their time to no process; an orphan goes to the first process of the namespace, which
    reaps it or keeps it as a zombie, whose time is in /proc.
    """

    def __init__(self, roots, cores: float):
        super().__init__(roots)
        self.cores = cores
        self.stopped_seconds = 0.0  # how long the processes were held, in all
        self.counted_seconds = 0.0  # the CPU time of the processes counted against their share, in all
        self._credit, self._seen, self._held = cores * CPU_BURST, {}, []
        self._before = time.monotonic()

    def look(self, pids: list[int]) -> None:
        now = time.monotonic()
        times = cpu_times(pids)
        used = cpu_used(self._seen, times)
        self.counted_seconds += used
        self._seen = times
        self._credit = min(self.cores * CPU_BURST, self._credit + self.cores * (now - self._before)) - used
        if self._held:
            self.stopped_seconds += now - self._before
        self._before = now
        if self._credit < 0:
            self._held = list(times)
            _signal_all(self._held, signal.SIGSTOP)
        elif self._held:
            _signal_all(self._held, signal.SIGCONT)
            self._held = []

    def finish(self) -> None:
        _signal_all(self._held, signal.SIGCONT)


class MemoryBound(_Watch):
    """Holds all the processes of a sandbox, with its scratch space, under ``memory_mb``, where no cgroup does.

    It looks every :data:`MEMORY_PERIOD` seconds: the proportional set size of every process (a page
    that n processes share counts 1/n for each, so forked children are not counted twice; the resident
    size where that cannot be read) and what the sandbox's scratch space holds (a memory file system,
    its ``/tmp`` and ``/dev/shm``, which no process's size counts). Over ``memory_mb``, every process is
    killed, and :meth:`take_exceeded` says why. The processes can exceed it by what they allocate
    between two looks (:data:`MEMORY_MARGIN_MB`, measured by ``tests/test_sandbox.py``).
    """

    period = MEMORY_PERIOD

    def __init__(self, roots, memory_mb: int, scratch_mb: int | None):
        super().__init__(roots)
        self.limit = memory_mb * 2**20
        self.scratch_bytes = scratch_mb * 2**20 if scratch_mb is not None else None  # its size: how it is told
        self.peak = 0  # the most it saw held, in bytes
        self._exceeded: str | None = None

    def look(self, pids: list[int]) -> None:
        held = sum(map(_proportional_size, pids)) + self._scratch_used(pids)
        self.peak = max(self.peak, held)
        if held > self.limit:
            self._exceeded = (f"it ran out of memory: its processes and its scratch space held {held / 2**20:,.0f} MB "
                              f"together, more than the limit of {self.limit / 2**20:,.0f} MB (--memory)")
            _signal_all(pids, signal.SIGKILL)

    def take_exceeded(self) -> str | None:
        """Why the processes were killed, if this bound killed them since the last call."""
        exceeded, self._exceeded = self._exceeded, None
        return exceeded

    def _scratch_used(self, pids: list[int]) -> int:
        """The bytes held by the scratch space, as its processes see its /tmp (one memory file system)."""
        if self.scratch_bytes is None:
            return 0
        for pid in reversed(pids):  # the last ones live in the sandbox's root
            try:
                found = os.statvfs(f"/proc/{pid}/root/tmp")
            except OSError:
                continue
            if found.f_blocks * found.f_frsize == self.scratch_bytes:
                return (found.f_blocks - found.f_bfree) * found.f_frsize
        return 0


def _proportional_size(pid: int) -> int:
    """A process's proportional set size in bytes (its resident size where that cannot be read; 0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _signal_all(pids: list[int], number: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process descended from them (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


class CpuTimes(NamedTuple):
    """What /proc says of a process's CPU time, in seconds, and its parent."""

    parent: int
    own: float  # utime + stime, its threads' included
    reaped: float  # cutime + cstime: of the children it has waited for, theirs included


def cpu_times(pids: list[int]) -> dict[int, CpuTimes]:
    """The CPU times of each process (gone ones are left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    times = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields:
            utime, stime, cutime, cstime = (int(value) / tick for value in fields[11:15])
            times[pid] = CpuTimes(int(fields[1]), utime + stime, cutime + cstime)
    return times


def cpu_used(before: dict[int, CpuTimes], now: dict[int, CpuTimes]) -> float:
    """The CPU seconds a tree of processes used between two looks (:func:`cpu_times`), each counted once.

    A living process counts what its own time and its reaped children's time grew by (all of it for a
    new process). A process of ``before`` that is gone was reaped, its time added to its parent's
    reaped time: what was counted of it already (``own + reaped``) comes off the growth of the reaped
    time of its nearest living ancestor (its parent, or the one who reaped the parent with it), never
    below zero, so that a child seen at one look and reaped before the next is not counted twice. A
    child that was never seen counts only through that growth.
    """
    counted_in: dict[int, float] = {}  # of a living process: the time of its gone descendants counted before
    for pid, times in before.items():
        if pid not in now:
            ancestor = times.parent
            while ancestor in before and ancestor not in now:
                ancestor = before[ancestor].parent
            counted_in[ancestor] = counted_in.get(ancestor, 0.0) + times.own + times.reaped
    used = 0.0
    for pid, times in now.items():
        last = before.get(pid, CpuTimes(times.parent, 0.0, 0.0))
        used += max(0.0, times.own - last.own)
        used += max(0.0, times.reaped - last.reaped - counted_in.get(pid, 0.0))
    return used


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command's name (state, ppid, ...), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


# --------------------------------------------------------------------------------------------------
# What the sandbox's root holds
# --------------------------------------------------------------------------------------------------


def _mount_plan(share: tuple[str, ...]) -> list[list[str]]:
    """What the sandbox's root holds: ["bind" | "symlink" | "tmpfs", path, argument]; the scratch
    space is added by the sandbox itself (:func:`_build_root`)."""
    plan = []
    for name in SYSTEM_DIRECTORIES:
        path = Path("/", name)
        if path.is_symlink():
            plan.append(["symlink", str(path), os.readlink(path)])
        elif path.is_dir():
            plan.append(["bind", str(path), ""])
    plan += [["bind", f"/etc/{name}", ""] for name in ETC_FILES if os.path.lexists(f"/etc/{name}")]
    plan += [["bind", f"/dev/{name}", ""] for name in DEVICES]
    plan += [["symlink", "/dev/fd", "/proc/self/fd"], ["symlink", "/dev/stdin", "/proc/self/fd/0"],
             ["symlink", "/dev/stdout", "/proc/self/fd/1"], ["symlink", "/dev/stderr", "/proc/self/fd/2"]]
    plan += [["bind", "/proc", ""], ["bind", "/sys", ""]]
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, *_site_directories(), *_package_directories()}
    python = sorted(str(Path(path).resolve()) for path in python if Path(path).is_dir())
    for path in python:
        if not any(path != other and path.startswith(other + os.sep) for other in python):
            plan.append(["bind", path, ""])
    plan += [["bind", path, ""] for path in share if os.path.isdir(path)]
    return sorted(plan, key=lambda entry: entry[1].count("/"))


def compiled_copies(packages: list[str]) -> list[Path]:
    """The ``__pycache__`` folders under the folders ``packages``, which the sandbox hides: a compiled
    copy of a withheld module would hold the reference's code (:mod:`autograder.run.stand_ins`)."""
    return sorted(path for package in packages for path in Path(package).rglob("__pycache__") if path.is_dir())


def _site_directories() -> list[str]:
    """The grader's package folders: its site folders, and every folder of its ``sys.path`` that holds
    installed packages (one a ``.pth`` file adds, e.g. another environment's)."""
    installed = [path for path in sys.path if {"site-packages", "dist-packages"} & set(Path(path).parts)]
    return [*site.getsitepackages(), site.getusersitepackages(), *installed]


def _package_directories() -> list[str]:
    """Where the grader's own copies of the course's packages are (the repository's folders for an
    editable install, or for a checkout run from its root)."""
    import importlib.util

    folders = []
    for name in COURSE_PACKAGES:
        spec = importlib.util.find_spec(name)
        folders += [path for path in (spec.submodule_search_locations or []) if os.path.isdir(path)] if spec else []
    return folders


def _user_site_variable() -> dict[str, str]:
    """PYTHONUSERBASE of the grader's user site (``pip install --user``), when it has one: a sandboxed
    Python has another $HOME, where it would look for it in vain."""
    import site

    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        return {"PYTHONUSERBASE": site.getuserbase()}
    return {}


def _import_path() -> str:
    """PYTHONPATH for sandboxed processes: the folders holding the course's packages, so that they
    import the grader's copies however those were found (an editable install's finder may point
    elsewhere, and a checkout run from its root is found through the working directory). In the
    sandbox these folders hold nothing but the packages."""
    roots = dict.fromkeys(str(Path(path).resolve().parent) for path in _package_directories())
    return os.pathsep.join(roots)
