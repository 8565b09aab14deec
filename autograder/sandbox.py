"""Run a student's code in a sandbox: a scratch folder, resource limits and Linux namespaces.

A sandboxed process is started with ``Sandbox.start(argv)``. The command that really runs is

    setpriv --pdeathsig KILL -- unshare --user --map-root-user --mount --net --pid --ipc --uts
        --fork --kill-child --mount-proc -- python -I -S autograder/sandbox.py CONFIG -- argv

and this file, run as a script with the standard library only, builds the sandbox inside the new
namespaces before it executes ``argv`` (:func:`enter`). What is enforced where user namespaces work
(Linux; :func:`isolation_available` tries it once):

- Files: the process sees a new root (``pivot_root``) holding read-only binds of the system
  (``/usr``, a few files of ``/etc``), the Python installation, the course packages (``bertlab``,
  ``autograder``), ``/proc`` of its own PID namespace, ``/sys``, a handful of devices, and its scratch
  folder. ``solutions/``, the gradebook, the output and submission folders, other students' files,
  ``$HOME`` and the rest of the machine do not exist in there.
- Writes: only the scratch folder (host disk, each file at most ``Limits.file_size_mb``), ``/tmp``
  and ``/dev/shm`` (memory, ``Limits.tmp_size_mb`` each). The scratch folder is deleted by
  ``Sandbox.close``; the two memory file systems vanish with the namespace.
- Privileges: the code runs as uid 1000 of a nested user namespace, without capabilities, so the
  mounts above are locked: they cannot be unmounted to uncover what they hide nor made writable.
- Network: a network namespace with only a loopback interface that is down: no host, not even the
  grading machine's own services (its abstract Unix sockets are in the old namespace too).
- Processes: a PID namespace (sees and signals only its own processes; all of them die when the
  first one ends) in its own session and process group; ``--pdeathsig`` and ``--kill-child`` end
  it when the grader dies. IPC and host name namespaces of its own.
- Devices: only null, zero, full, random and urandom; no GPU, so student code is graded on the CPU.
- Memory: ``RLIMIT_AS``, the address space of each process; Python with torch, IPython and
  matplotlib imported reserves about 0.8 GB of it before the student's code runs.
- Time: ``RLIMIT_CPU`` as a backstop; the wall-clock limits per cell and per notebook are enforced
  by the caller, which kills the process group (and with it the namespace).

Without user namespaces (macOS, containers that forbid them) only the scratch folder as working
directory and ``$HOME``, a minimal environment, a session of its own and the resource limits apply:
the code can then read whatever the grading user can read, and reach the network.
"""

import ctypes
import functools
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

# Files of /etc that programs need (dynamic linker, user names, fonts, time zone); not shadow files.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts",
             "localtime", "fonts", "alternatives", "mime.types", "ssl")
DEVICES = ("null", "zero", "full", "random", "urandom")
SYSTEM_DIRECTORIES = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
SANDBOX_UID = 1000  # the student's uid inside the sandbox
COURSE_PACKAGES = ("bertlab", "autograder")  # importable in the sandbox, read-only, from the grader's copy


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed notebook."""

    cell_timeout: float = 60.0  # seconds per cell, and per call of a student's function
    notebook_timeout: float = 600.0  # seconds for one execution of a whole notebook
    memory_mb: int = 4096  # address space per process (RLIMIT_AS)
    file_size_mb: int = 64  # largest file it may write (RLIMIT_FSIZE)
    tmp_size_mb: int = 256  # size of its /tmp and of its /dev/shm
    threads: int = 1  # torch / OpenMP threads


# --------------------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------------------


class Sandbox:
    """A scratch folder and the recipe to start processes confined to it.

    ``hide`` lists paths that must stay invisible even if they lie inside something the sandbox
    binds (the course's ``solutions/``, the output folder): they are covered by empty file systems.
    ``share`` lists folders the code may read (a dataset), bound read-only; ``variables`` adds to
    its environment. Use as a context manager: leaving it kills every process it started and
    deletes the scratch folder.
    """

    def __init__(self, limits: Limits = Limits(), *, hide: tuple[Path, ...] = (), share: tuple[Path, ...] = (),
                 variables: dict[str, str] | None = None, isolate: bool | None = None):
        self.limits = limits
        self.share = tuple(str(Path(path).resolve()) for path in share)
        self.variables = dict(variables or {})
        self.isolated = isolation_available()[0] if isolate is None else isolate
        # Short path: kernels' Unix sockets live in here, and their paths may not exceed 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="ag-"))
        self.work, self.home, self.runtime = self.root / "work", self.root / "home", self.root / "run"
        for folder in (self.work, self.home, self.runtime, self.root / ".root"):
            folder.mkdir()
        self.hide = tuple(str(Path(path).resolve()) for path in hide)
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def config(self) -> dict:
        return {
            "isolated": self.isolated,
            "root": str(self.root),
            "workdir": str(self.work),
            "plan": _mount_plan(self.root, self.share) if self.isolated else [],
            "hide": list(self.hide),
            "limits": asdict(self.limits),
        }

    def command(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` inside this sandbox."""
        prelude = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), json.dumps(self.config()), "--"]
        if not self.isolated:
            return [*prelude, *argv]
        return ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--user", "--map-root-user", "--mount",
                "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc", "--",
                *prelude, *argv]

    def environment(self) -> dict[str, str]:
        """A minimal environment: nothing of the grader's (no database URL, no tokens) leaks in."""
        threads = str(self.limits.threads)
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "USER": "student",
            "LOGNAME": "student",
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp" if self.isolated else str(self.runtime),
            "PYTHONPATH": _import_path(),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(self.home / ".matplotlib"),
            "IPYTHONDIR": str(self.home / ".ipython"),
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTER_CONFIG_DIR": str(self.home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(self.home / ".jupyter-data"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "NBGRADER_EXECUTION": "autograde",
            **self.variables,
        }

    def start(self, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` in the sandbox, in a session of its own; extra arguments go to Popen."""
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(
            self.command(argv), cwd=self.work, env=self.environment(), start_new_session=True, **popen_kwargs
        )
        self.processes.append(process)
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
        for process in self.processes:
            kill(process)
        self.processes.clear()
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
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def interrupt(process: subprocess.Popen) -> None:
    """Send SIGINT to a sandboxed process group (a KeyboardInterrupt in the code it runs)."""
    try:
        os.killpg(process.pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        pass


@functools.cache
def isolation_available() -> tuple[bool, str]:
    """Whether sandboxes get namespaces here, and why not when they do not (tried once)."""
    if platform.system() != "Linux" or platform.machine() not in _SYSCALLS:
        return False, f"namespaces are not supported on {platform.system()} {platform.machine()}"
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return False, "the util-linux tools unshare and setpriv are not installed"
    with Sandbox(isolate=True) as sandbox:
        probe = "import os; print(os.getuid(), sum(name.isdigit() for name in os.listdir('/proc')) < 5)"
        result = sandbox.run([sys.executable, "-I", "-c", probe], timeout=60)
    if result.returncode != 0 or result.stdout.split() != [str(SANDBOX_UID), "True"]:
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return False, f"user namespaces do not work here ({reason})"
    return True, "Linux namespaces"


def _mount_plan(scratch: Path, share: tuple[str, ...]) -> list[list[str]]:
    """What the sandbox's root holds: ["bind" | "bind-rw" | "symlink" | "tmpfs", path, argument]."""
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
    plan += [["bind", "/proc", ""], ["bind", "/sys", ""], ["tmpfs", "/tmp", ""], ["tmpfs", "/dev/shm", ""]]
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, *_site_directories(), *_package_directories()}
    python = sorted(str(Path(path).resolve()) for path in python if Path(path).is_dir())
    for path in python:
        if not any(path != other and path.startswith(other + os.sep) for other in python):
            plan.append(["bind", path, ""])
    plan += [["bind", path, ""] for path in share if os.path.isdir(path)]
    plan.append(["bind-rw", str(scratch), ""])
    return sorted(plan, key=lambda entry: entry[1].count("/"))


def _site_directories() -> list[str]:
    import site  # not imported at the top: the sandbox's side runs this file with -S

    return [*site.getsitepackages(), site.getusersitepackages()]


def _package_directories() -> list[str]:
    """Where the grader's own copies of the course's packages are (the repository's folders for an
    editable install, or for a checkout run from its root)."""
    import importlib.util

    folders = []
    for name in COURSE_PACKAGES:
        spec = importlib.util.find_spec(name)
        folders += [path for path in (spec.submodule_search_locations or []) if os.path.isdir(path)] if spec else []
    return folders


def _import_path() -> str:
    """PYTHONPATH for sandboxed processes: the folders holding the course's packages, so that they
    import the grader's copies however those were found (an editable install's finder may point
    elsewhere, and a checkout run from its root is found through the working directory). In the
    sandbox these folders hold nothing but the packages."""
    roots = dict.fromkeys(str(Path(path).resolve().parent) for path in _package_directories())
    return os.pathsep.join(roots)


# --------------------------------------------------------------------------------------------------
# The sandbox's side: build the new root, drop privileges, set limits, execute the command
# --------------------------------------------------------------------------------------------------

_SYSCALLS = {"x86_64": {"pivot_root": 155, "mount_setattr": 442}, "aarch64": {"pivot_root": 41, "mount_setattr": 442}}
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 0x1, 0x2, 0x4, 0x1000, 0x4000
MNT_DETACH, AT_RECURSIVE = 0x2, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000


class _MountAttributes(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _Kernel:
    """The few system calls the sandbox needs, raising OSError on failure."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.numbers = _SYSCALLS[platform.machine()]

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{what}: {os.strerror(error)}")

    def mount(self, source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        self._check(self.libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                                    ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")

    def set_attributes(self, path: str, set_flags: int, clear_flags: int, recursive: bool) -> None:
        attributes = _MountAttributes(set_flags, clear_flags, 0, 0)
        self._check(self.libc.syscall(self.numbers["mount_setattr"], -100, path.encode(),
                                      AT_RECURSIVE if recursive else 0, ctypes.byref(attributes),
                                      ctypes.sizeof(attributes)), f"mount_setattr {path}")

    def pivot_root(self, new_root: str, put_old: str) -> None:
        self._check(self.libc.syscall(self.numbers["pivot_root"], new_root.encode(), put_old.encode()), "pivot_root")

    def unmount(self, target: str) -> None:
        self._check(self.libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")

    def unshare(self, flags: int) -> None:
        self._check(self.libc.unshare(flags), "unshare")


def _build_root(config: dict) -> None:
    """Make a new root from the mount plan, hide paths, make it read-only and switch to it."""
    kernel = _Kernel()
    new_root = os.path.join(config["root"], ".root")
    tmp_size = config["limits"]["tmp_size_mb"]
    kernel.mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    writable = []
    for kind, path, argument in config["plan"]:
        target = new_root + path
        if kind == "symlink":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(argument, target)
            continue
        if kind == "tmpfs":
            os.makedirs(target, exist_ok=True)
            kernel.mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_size}m")
            writable.append(target)
            continue
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        # The scratch folder is bound alone (it holds the new root itself); the rest with submounts.
        kernel.mount(path, target, None, MS_BIND | (0 if kind == "bind-rw" else MS_REC))
        if kind == "bind-rw":
            writable.append(target)
    for path in config["hide"]:
        target = new_root + path
        if os.path.isdir(target):
            kernel.mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k")
        elif os.path.lexists(target):
            kernel.mount(new_root + "/dev/null", target, None, MS_BIND)
    kernel.set_attributes(new_root, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, recursive=True)
    for target in [*writable, new_root + "/proc"]:  # /proc only until the user maps below are written
        kernel.set_attributes(target, 0, MOUNT_ATTR_RDONLY, recursive=False)
    os.chdir(new_root)
    kernel.pivot_root(".", ".")  # the old root now sits on top of the new one ...
    kernel.unmount(".")  # ... and is gone
    os.chdir("/")
    # A nested user namespace: uid 1000 without capabilities, and every mount above locked.
    kernel.unshare(CLONE_NEWUSER | CLONE_NEWNS)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_UID} 0 1"), ("gid_map", f"{SANDBOX_UID} 0 1")):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)
    # Read-only, and locked so: root-owned files such as /proc/sysrq-trigger are the sandbox's own
    # files as far as permissions go (it runs as the grading user, mapped).
    kernel.set_attributes("/proc", MOUNT_ATTR_RDONLY, 0, recursive=True)


def enter(config: dict, argv: list[str]) -> None:
    """Inside the new namespaces: build the sandbox, set the limits and execute ``argv``."""
    if config["isolated"]:
        _build_root(config)
    limits = config["limits"]
    megabyte = 1024 * 1024
    cpu_seconds = int(2 * limits["notebook_timeout"] * max(1, limits["threads"])) + 60
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * megabyte,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_mb"] * megabyte,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file size limit fails, not kills
    os.chdir(config["workdir"])
    os.execv(argv[0], argv)


if __name__ == "__main__":
    separator = sys.argv.index("--")
    enter(json.loads(sys.argv[1]), sys.argv[separator + 1:])
