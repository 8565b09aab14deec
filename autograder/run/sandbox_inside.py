"""The program that runs inside a sandbox's new namespaces (:mod:`autograder.run.sandbox` starts it as
``python -I -S autograder/run/sandbox_inside.py CONFIG -- argv``): it builds the new root, drops privileges,
refuses a few system calls, sets the resource limits, and executes ``argv`` (:func:`enter`).

It runs as a script with the standard library only, before anything of the course can be imported:
CONFIG (JSON, written by :meth:`autograder.run.sandbox.Sandbox.config`) says everything it needs.
"""

import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import sys
from dataclasses import dataclass

SANDBOX_UID = 1000  # the student's uid inside a nested user namespace

SYSCALLS = {
    "x86_64": {"pivot_root": 155, "mount_setattr": 442, "memfd_create": 319, "shmget": 29, "msgget": 68,
               "rt_sigaction": 13, "kill": 62},
    "aarch64": {"pivot_root": 41, "mount_setattr": 442, "memfd_create": 279, "shmget": 194, "msgget": 186,
                "rt_sigaction": 134, "kill": 129},
}


@dataclass(frozen=True)
class Refusal:
    """A system call the sandbox refuses (EPERM): always, or when its arguments match.

    ``equal`` holds (argument, value) pairs that must all hold (compared on the argument's low 32
    bits, an ``int`` of C); ``nonzero`` is an argument (a pointer) that must not be NULL."""

    name: str
    equal: tuple[tuple[int, int], ...] = ()
    nonzero: int | None = None


SIGCHLD = 17  # on x86_64 and aarch64
REFUSALS = (
    # memory that no limit of a process counts
    Refusal("memfd_create"), Refusal("shmget"), Refusal("msgget"),
    # a new disposition of SIGCHLD (SIG_IGN, SA_NOCLDWAIT): children reaped by the kernel add their CPU
    # time to no process, and would escape the CPU share (CpuShare); asking the disposition is allowed
    Refusal("rt_sigaction", equal=((0, SIGCHLD),), nonzero=1),
    # kill(-1, ...): every process the caller may signal at once (a SIGCONT that lifts the CPU share)
    Refusal("kill", equal=((0, 0xFFFFFFFF),)),
)
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 0x1, 0x2, 0x4, 0x1000, 0x4000
MNT_DETACH, AT_RECURSIVE = 0x2, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2


class _MountAttributes(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _SocketFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _FilterProgram(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SocketFilter))]


class _Kernel:
    """The few system calls the sandbox needs, raising OSError on failure."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.machine = platform.machine()
        self.numbers = SYSCALLS[self.machine]

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

    def die_with_parent(self) -> None:
        """SIGKILL this process when its parent ends (``unshare``, which ends with the grader's job)."""
        self._check(self.libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                                    ctypes.c_ulong(0), ctypes.c_ulong(0)), "pdeathsig")

    def refuse(self, refusals: tuple[Refusal, ...]) -> None:
        """A seccomp filter: the system calls of ``refusals`` fail with EPERM where their arguments
        match (and so do the x32 ones of x86_64); a system call of another architecture kills the process."""
        program = _filter_program(self.machine, self.numbers, refusals)
        filters = (_SocketFilter * len(program))(*(_SocketFilter(*instruction) for instruction in program))
        zero, one = ctypes.c_ulong(0), ctypes.c_ulong(1)
        self._check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, one, zero, zero, zero), "no_new_privs")
        self._check(self.libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER),
                                    ctypes.byref(_FilterProgram(len(program), filters)), zero, zero), "seccomp")


def _filter_program(machine: str, numbers: dict[str, int], refusals: tuple[Refusal, ...]) -> list[tuple]:
    """The BPF program of :meth:`_Kernel.refuse`, as (code, jump if true, jump if false, value)."""
    load, equal, at_least, give = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    allow, refuse, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # RET values: ALLOW, ERRNO(EPERM), KILL

    def low(argument: int) -> int:  # where seccomp_data holds the low 32 bits of an argument (little-endian)
        return 16 + 8 * argument

    # Jumps name labels ("deny", or the end of a rule), made relative below.
    program: list[tuple] = [(load, 0, 0, 4), (equal, 1, 0, AUDIT_ARCH[machine]), (give, 0, 0, kill)]
    if machine == "x86_64":
        program += [(load, 0, 0, 0), (at_least, "deny", 0, 0x40000000)]
    labels = {}
    for index, refusal in enumerate(refusals):
        end = f"rule {index}"
        program += [(load, 0, 0, 0), (equal, 0, end, numbers[refusal.name])]
        for argument, value in refusal.equal:
            program += [(load, 0, 0, low(argument)), (equal, 0, end, value)]
        if refusal.nonzero is not None:
            program += [(load, 0, 0, low(refusal.nonzero)), (equal, 0, "deny", 0),
                        (load, 0, 0, low(refusal.nonzero) + 4), (equal, end, 0, 0)]
        program += [(give, 0, 0, refuse)]
        labels[end] = len(program)
    program += [(give, 0, 0, allow)]
    labels["deny"] = len(program)
    program += [(give, 0, 0, refuse)]
    return [(code, *(labels[jump] - position - 1 if isinstance(jump, str) else jump for jump in (true, false)), value)
            for position, (code, true, false, value) in enumerate(program)]


def _scratch_space(kernel: _Kernel, new_root: str, config: dict) -> list[str]:
    """Mount the sandbox's one tmpfs, copy the staged files into its working folder, and bind its
    parts at the working folder, $HOME, /tmp and /dev/shm. Returns those mount points."""
    limits, uid = config["limits"], config["uid"]
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    scratch = new_root + "/.scratch"
    os.makedirs(scratch)
    kernel.mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
                 f"mode=0755,size={limits['scratch_mb']}m,nr_inodes={limits['scratch_files']}{owner}")
    shutil.copytree(config["stage"], scratch + "/work")
    targets = {"work": config["workdir"], "home": config["home"], "tmp": "/tmp", "shm": "/dev/shm"}
    for name, target in targets.items():
        os.makedirs(f"{scratch}/{name}", exist_ok=True)
        os.chmod(f"{scratch}/{name}", 0o1777 if name in ("tmp", "shm") else 0o755)
        if uid is not None:
            for folder, _, files in os.walk(f"{scratch}/{name}"):
                for path in [folder, *(os.path.join(folder, file) for file in files)]:
                    os.chown(path, uid, uid)
        os.makedirs(new_root + target, exist_ok=True)
        kernel.mount(f"{scratch}/{name}", new_root + target, None, MS_BIND)
    kernel.unmount(scratch)  # the binds keep the file system alive
    return [new_root + target for target in targets.values()]


def _build_root(config: dict) -> None:
    """Make a new root from the mount plan and the scratch space, hide paths, make it read-only,
    switch to it and drop privileges."""
    kernel = _Kernel()
    new_root = os.path.join(config["root"], ".root")
    kernel.mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    # The scratch space first: what the plan binds may lie under its mount points (a virtual
    # environment or a clone under /tmp), and a later mount would cover it.
    writable = _scratch_space(kernel, new_root, config)
    for kind, path, argument in config["plan"]:
        target = new_root + path
        if kind == "symlink":
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(argument, target)
            continue
        if kind == "cover":  # a file of a package bound above, shown as another
            kernel.mount(argument, target, None, MS_BIND)
            continue
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        kernel.mount(path, target, None, MS_BIND | MS_REC)
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
    if config["uid"] is None:
        # A nested user namespace: uid 1000 without capabilities, and every mount above locked.
        kernel.unshare(CLONE_NEWUSER | CLONE_NEWNS)
        for name, text in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_UID} 0 1"), ("gid_map", f"{SANDBOX_UID} 0 1")):
            with open(f"/proc/self/{name}", "w") as file:
                file.write(text)
    # Read-only, and locked so: root-owned files such as /proc/sysrq-trigger are the sandbox's own
    # files as far as permissions go (it runs as the grading user, mapped).
    kernel.set_attributes("/proc", MOUNT_ATTR_RDONLY, 0, recursive=True)
    kernel.refuse(REFUSALS)
    if config["uid"] is not None:  # root: become a user of its own, without capabilities
        os.setgroups([])
        os.setresgid(config["uid"], config["uid"], config["uid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
    # A change of user clears the parent-death signal (unshare --kill-child's): set it again, so that the
    # namespace, whose first process this is, ends with the job that started it, however that job ends.
    kernel.die_with_parent()


def enter(config: dict, argv: list[str]) -> None:
    """Inside the new namespaces: set the limits, build the sandbox and execute ``argv``."""
    limits = config["limits"]
    megabyte = 1024 * 1024
    cpu_seconds = int(2 * limits["notebook_timeout"] * max(1, limits["threads"])) + 60
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * megabyte,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_mb"] * megabyte,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file size limit fails, not kills
    # A grader started in the background has SIGINT ignored, and a Python that inherits that never raises
    # KeyboardInterrupt: the interrupt that ends a cell past its time limit would not reach the code.
    for number in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)
    if config["isolated"]:
        _build_root(config)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)  # counted for the final user
    os.chdir(config["workdir"])
    os.execv(argv[0], argv)


if __name__ == "__main__":
    separator = sys.argv.index("--")
    enter(json.loads(sys.argv[1]), sys.argv[separator + 1:])
