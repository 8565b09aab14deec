"""The sandbox that student code runs in (autograder/run/sandbox.py): what it can see, write, reach and use.

Each test runs a short Python program in a sandbox and checks what it could do. The isolation tests
need Linux user namespaces and are skipped where they are not available; the resource limits are
checked everywhere.
"""

import errno
import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from grading_helpers import FORK_CHAINS, alive, descendants

from autograder.bounds import Limits
from autograder.run.sandbox import Sandbox, isolation_available, resource_bounds

REPO = Path(__file__).resolve().parents[1]
ISOLATED, WHY = isolation_available()
needs_namespaces = pytest.mark.skipif(not ISOLATED, reason=f"no sandbox namespaces here: {WHY}")


def run(sandbox: Sandbox, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a Python program in the sandbox; fail the test with its stderr if it crashed."""
    result = sandbox.run([sys.executable, "-c", textwrap.dedent(code)], timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(Limits(memory_mb=1024, file_size_mb=1, scratch_mb=8)) as box:
        yield box


@needs_namespaces
def test_sees_the_python_installation_and_the_course_packages_only(sandbox, tmp_path):
    secret = tmp_path / "gradebook.db"
    secret.write_text("grades")
    result = run(sandbox, f"""
        import os, bertlab.attention, autograder.checks.framework
        for path in [{str(REPO / 'solutions')!r}, {str(REPO / 'tests')!r}, {str(REPO / '.git')!r},
                     {str(secret)!r}, {str(Path.home() / '.bashrc')!r}, '/etc/shadow', '/run']:
            print(path, os.path.exists(path))
    """)
    assert all(line.endswith(" False") for line in result.stdout.splitlines()), result.stdout


@needs_namespaces
def test_hidden_paths_are_masked_inside_bound_folders():
    hidden = REPO / "bertlab" / "__init__.py"
    with Sandbox(hide=(hidden,)) as box:
        result = run(box, f"print(repr(open({str(hidden)!r}).read()))")
    assert result.stdout.strip() == "''"


@needs_namespaces
def test_writes_only_to_its_scratch_space_in_memory_which_close_deletes():
    target = REPO / "bertlab" / "sandbox_was_here.txt"
    with Sandbox() as box:
        (box.work / "data.txt").write_text("staged")  # the chapter's files, copied in
        result = run(box, f"""
            import os
            print(open('data.txt').read())
            for path in [{str(target)!r}, '/usr/sandbox_was_here', os.environ['HOME'] + '/notes.txt',
                         '/tmp/scratch.txt', 'in_working_directory.txt']:
                try:
                    open(path, 'w').write('x')
                    print('written')
                except OSError as error:
                    print(error.errno)
        """)
        assert not (box.work / "in_working_directory.txt").exists()  # in the sandbox's tmpfs, not on disk
        root = box.root
    assert result.stdout.split() == ["staged", str(errno.EROFS), str(errno.EROFS), "written", "written", "written"]
    assert not target.exists()
    assert not root.exists()


@needs_namespaces
def test_no_network_not_even_the_grading_machine(sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = run(sandbox, f"""
            import socket
            for address in [('127.0.0.1', {port}), ('8.8.8.8', 53)]:
                try:
                    socket.create_connection(address, timeout=3)
                    print('connected')
                except OSError as error:
                    print('refused', error)
        """)
    assert "connected" not in result.stdout and result.stdout.count("refused") == 2


@needs_namespaces
def test_cannot_see_or_signal_the_graders_processes(sandbox):
    result = run(sandbox, f"""
        import os
        try:
            os.kill({os.getpid()}, 0)
            print('visible')
        except ProcessLookupError:
            print('invisible')
        print(sum(name.isdigit() for name in os.listdir('/proc')))
    """)
    visible, processes = result.stdout.split()
    assert visible == "invisible" and int(processes) < 5


@needs_namespaces
def test_mounts_cannot_be_undone_even_with_a_new_user_namespace(sandbox):
    result = run(sandbox, f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.unshare(0x10000000 | 0x20000) == 0  # a user and mount namespace of its own
        print('umount', libc.umount2(b'/tmp', 2))
        print('remount', libc.mount(None, {str(REPO / 'bertlab').encode()!r}, None, ctypes.c_ulong(0x20 | 0x1000),
                                    None))
        try:
            open({str(REPO / 'bertlab' / 'x')!r}, 'w')
            print('write', 0)
        except OSError:
            print('write', -1)
    """)
    assert result.stdout.split() == ["umount", "-1", "remount", "-1", "write", "-1"]


def test_environment_does_not_leak_the_graders_secrets(sandbox, monkeypatch):
    monkeypatch.setenv("GRADEBOOK_PASSWORD", "hunter2")
    result = run(sandbox, "import os; print(sorted(os.environ))")
    assert "GRADEBOOK_PASSWORD" not in result.stdout
    assert "'NBGRADER_EXECUTION'" in result.stdout


def test_memory_limit(sandbox):
    result = run(sandbox, """
        try:
            block = bytearray(2 * 1024 ** 3)
            print('allocated')
        except MemoryError:
            print('MemoryError')
    """)
    assert result.stdout.strip() == "MemoryError"


def test_file_size_limit(sandbox):
    result = run(sandbox, """
        try:
            open('big.bin', 'wb').write(b'x' * 2 * 1024 ** 2)
            print('written')
        except OSError as error:
            print(error.strerror)
    """)
    assert result.stdout.strip() == "File too large"


def test_closing_kills_everything_it_started():
    program = """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
        print('started', flush=True)
        time.sleep(600)
    """
    with Sandbox() as box:
        process = box.start([sys.executable, "-c", textwrap.dedent(program)], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "started"
        started = descendants(process.pid)
        assert len(started) >= 2
    time.sleep(0.5)
    assert not [pid for pid in started if alive(pid)]


@needs_namespaces
def test_the_student_s_code_ends_with_the_process_that_started_the_sandbox():
    """Killing the sandbox's own first process alone (as a job's end may) ends the student's code too:
    the namespace's first process dies with its parent, even after it changed user."""
    with Sandbox() as box:
        process = box.start([sys.executable, "-c", "import time\nprint('started', flush=True)\ntime.sleep(600)"],
                            stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "started"
        started = descendants(process.pid)
        os.kill(process.pid, signal.SIGKILL)  # not its process group, not the namespace
        deadline = time.monotonic() + 10
        while [pid for pid in started if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in started if alive(pid)]




def test_interrupt_reaches_the_code():
    with Sandbox() as box:
        process = box.start([sys.executable, "-c", "import time\ntry:\n    print('ready', flush=True)\n"
                             "    time.sleep(600)\nexcept KeyboardInterrupt:\n    print('interrupted')"],
                            stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "ready"
        os.killpg(process.pid, signal.SIGINT)
        assert process.stdout.readline().strip() == "interrupted"


def test_without_namespaces_limits_and_scratch_folder_still_apply():
    with Sandbox(Limits(memory_mb=1024), isolate=False) as box:
        result = run(box, """
            import os
            print(os.getcwd())
            try:
                bytearray(2 * 1024 ** 3)
            except MemoryError:
                print('MemoryError')
        """)
        assert result.stdout.split() == [str(box.work), "MemoryError"]


def test_a_sandbox_is_isolated_exactly_when_namespaces_work():
    with Sandbox() as box:
        assert box.isolated is ISOLATED  # a bool: without namespaces, no unshare in the command
        assert ("unshare" in box.command(["true"])) is ISOLATED


# --------------------------------------------------------------------------------------------------
# Bounds of the whole sandbox: its scratch space, its processes, memory outside any process
# --------------------------------------------------------------------------------------------------


@needs_namespaces
def test_scratch_space_is_bounded_in_size_and_files():
    with Sandbox(Limits(scratch_mb=8, scratch_files=100, file_size_mb=64)) as box:
        result = run(box, """
            import errno, os
            def fill(path):
                try:
                    with open(path, 'wb') as file:
                        for _ in range(64):
                            file.write(b'x' * 2**20)
                    return 'written'
                except OSError as error:
                    return errno.errorcode[error.errno]
            print(fill('big.bin'), fill('/tmp/big.bin'), fill('/dev/shm/big.bin'))
            for name in ('big.bin', '/tmp/big.bin', '/dev/shm/big.bin'):
                os.remove(name) if os.path.exists(name) else None
            made = 0
            try:
                for number in range(1000):
                    open(f'/tmp/{number}', 'w').close()
                    made += 1
            except OSError as error:
                print(errno.errorcode[error.errno], made < 100)
        """)
    assert result.stdout.split() == ["ENOSPC", "ENOSPC", "ENOSPC", "ENOSPC", "True"]


@needs_namespaces
def test_processes_and_threads_are_bounded():
    with Sandbox(Limits(processes=20)) as box:
        result = run(box, """
            import os, threading, time
            children = []
            try:
                for _ in range(100):
                    pid = os.fork()
                    if pid == 0:
                        time.sleep(30)
                        os._exit(0)
                    children.append(pid)
            except OSError as error:
                print('fork refused after', len(children) < 20, flush=True)
            threads = 0
            try:
                for _ in range(100):
                    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
                    threads += 1
            except RuntimeError:
                print('thread refused', flush=True)
            os._exit(0)
        """)
    assert result.stdout.split() == ["fork", "refused", "after", "True", "thread", "refused"]


@needs_namespaces
def test_memory_outside_processes_is_refused():
    with Sandbox() as box:
        result = run(box, """
            import ctypes, os
            try:
                os.memfd_create('x')
                print('memfd')
            except OSError as error:
                print(error.errno)
            libc = ctypes.CDLL(None, use_errno=True)
            print(libc.shmget(0, 2**30, 0o1000 | 0o600), ctypes.get_errno())
            print(libc.msgget(0, 0o1000 | 0o600), ctypes.get_errno())
        """)
    assert result.stdout.split() == [str(errno.EPERM), "-1", str(errno.EPERM), "-1", str(errno.EPERM)]


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="the grader runs as root only on some machines")
def test_a_root_grader_runs_student_code_as_an_unprivileged_user_of_its_own():
    with Sandbox() as first, Sandbox() as second:
        uids = [run(box, "import os; print(os.getuid(), os.geteuid(), os.getgroups())").stdout.strip()
                for box in (first, second)]
    assert uids[0] != uids[1] and all(uid.split()[0] == uid.split()[1] != "0" for uid in uids), uids


def test_the_bound_in_force_is_named():
    bounds = resource_bounds()
    description = bounds.describe(Limits(memory_mb=1000, processes=10))
    if bounds.cgroup is not None:
        assert "cgroup v2" in description and "1000 MB" in description
    else:
        assert "RLIMIT_AS" in description and "RLIMIT_NPROC" in description
        assert "1000 MB for all the processes of a submission and its scratch space together" in description


def test_a_cgroup_is_used_only_where_memory_and_pids_are_delegated(tmp_path, monkeypatch):
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory\n")
    monkeypatch.setenv("AUTOGRADER_CGROUP", str(tmp_path))
    resource_bounds.cache_clear()
    try:
        assert resource_bounds().cgroup is None and "AUTOGRADER_CGROUP" in resource_bounds().reason
        (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")
        resource_bounds.cache_clear()
        assert resource_bounds().cgroup == tmp_path
    finally:
        resource_bounds.cache_clear()


def test_interrupt_reaches_the_code_even_when_the_grader_ignores_it():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a grader started with `&`
    try:
        test_interrupt_reaches_the_code()
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------------------------------
# Wherever the grader's Python lives: the sandbox works, or grading refuses to run student code
# --------------------------------------------------------------------------------------------------

# Run by another Python than the suite's: the sandbox must start there and import what a student process
# imports; every folder of that Python's sys.path must be visible inside (a conda environment is one
# more prefix of this kind, bound like a virtual environment's).
PROBE = textwrap.dedent("""
    import json, os, sys
    from autograder.run.sandbox import Sandbox, isolation_available
    isolated, why = isolation_available()
    folders = [path for path in sys.path if path and os.path.isdir(path)]
    code = ("import json, os, sys, torch, bertlab.attention, autograder.run.wire, " + sys.argv[1] + "; "
            "print(json.dumps([sys.prefix, [path for path in " + repr(folders) + " if not os.path.isdir(path)]]))")
    with Sandbox() as box:
        result = box.run([sys.executable, "-c", code], timeout=120)
    print(json.dumps({"isolated": isolated, "why": why, "status": result.returncode,
                      "inside": result.stdout.strip(), "error": result.stderr[-2000:], "prefix": sys.prefix}))
""")


def probe_sandbox(python: str, course: Path, module: str = "json", **environment) -> dict:
    """Start a sandbox from ``python`` with the course's packages of ``course`` on its path; what it saw."""
    result = subprocess.run([python, "-c", PROBE, module], capture_output=True, text=True, timeout=600,
                            cwd=course, env={**os.environ, "PYTHONPATH": str(course), **environment})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def make_venv(folder: Path) -> str:
    """A virtual environment at ``folder`` that sees this Python's packages (PyTorch among them), whether
    this Python is a virtual environment's or not: a .pth file adds its site folders."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=300)
    python = str(folder / "bin" / "python")
    site_folder = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    outer = [path for path in site.getsitepackages() if os.path.isdir(path)]
    (Path(site_folder) / "outer_packages.pth").write_text("".join(f"{path}\n" for path in outer))
    return python


def assert_works(seen: dict, prefix: Path) -> None:
    assert seen["isolated"], seen["why"]
    assert seen["status"] == 0, seen["error"]
    inside_prefix, invisible = json.loads(seen["inside"])
    assert inside_prefix == seen["prefix"] == str(prefix) and invisible == []


@pytest.fixture
def scratch_under_tmp():
    """A folder directly under /tmp, where the sandbox mounts its own /tmp (pytest's tmp_path is there too,
    but this does not depend on it)."""
    folder = Path(tempfile.mkdtemp(prefix="ag-python-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_namespaces
def test_works_from_a_virtual_environment_and_a_clone_under_tmp(scratch_under_tmp):
    """The sandbox's /tmp, mounted over the grader's, must not cover the interpreter or the course."""
    clone = scratch_under_tmp / "clone"
    for package in ("bertlab", "autograder"):
        shutil.copytree(REPO / package, clone / package, ignore=shutil.ignore_patterns("__pycache__", "course_bert"))
    python = make_venv(clone / ".venv")  # the README's layout: a venv inside the clone
    assert_works(probe_sandbox(python, clone), clone / ".venv")


@needs_namespaces
def test_works_from_a_virtual_environment_under_home():
    folder = Path(tempfile.mkdtemp(prefix=".ag-venv-", dir=Path.home()))
    try:
        assert_works(probe_sandbox(make_venv(folder / "venv"), REPO), folder / "venv")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@needs_namespaces
def test_works_with_packages_installed_in_the_user_site(scratch_under_tmp):
    """``pip install --user`` puts packages under $HOME/.local, which the sandbox's $HOME is not."""
    user_base = scratch_under_tmp / "user-base"
    environment = {"PYTHONUSERBASE": str(user_base)}
    folder = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                            capture_output=True, text=True, env={**os.environ, **environment},
                            check=True).stdout.strip()
    Path(folder).mkdir(parents=True)
    (Path(folder) / "ag_user_site_probe.py").write_text("VALUE = 1\n")
    if not site.ENABLE_USER_SITE:
        pytest.skip("this Python does not use a user site")
    assert_works(probe_sandbox(sys.executable, REPO, "ag_user_site_probe", **environment), Path(sys.prefix))


# --------------------------------------------------------------------------------------------------
# The CPU share of a sandbox
# --------------------------------------------------------------------------------------------------

SPINNERS = """
import os, sys, time
for _ in range(12):  # each in a session of its own, as a fork bomb that hides from its process group
    if os.fork() == 0:
        os.setsid()
        end = time.monotonic() + {seconds}
        while time.monotonic() < end:
            pass
        os._exit(0)
print("spinning", flush=True)
for _ in range(12):
    os.wait()
"""
COUNTER = ("import sys, time\nend, count = time.monotonic() + float(sys.argv[1]), 0\n"
           "while time.monotonic() < end:\n    count += 1\nprint(count)")


def count_loops(seconds: float) -> int:
    """How far a busy loop outside any sandbox counts in ``seconds`` (another student's work)."""
    return int(subprocess.run([sys.executable, "-c", COUNTER, str(seconds)], capture_output=True, text=True,
                              check=True).stdout)


def test_a_sandbox_spinning_many_processes_gets_its_share_of_the_cpu_not_more():
    """Twelve busy processes, each in a session of its own, would leave a process outside one
    thirteenth of each core; held to one core on average, they leave it about half of a core of
    two. Measured side by side: the outside loop alone, then beside the sandbox."""
    from autograder.bounds import CPU_BURST

    if resource_bounds().cpu_max:
        pytest.skip("cgroup v2's cpu.max bounds the CPU here")
    seconds, spinners = 4 * CPU_BURST, 12
    alone = count_loops(seconds)
    with Sandbox(Limits(threads=1)) as box:
        started = box.start([sys.executable, "-c", SPINNERS.format(seconds=seconds + 3 * CPU_BURST)],
                            stdout=subprocess.PIPE, text=True)
        assert started.stdout.readline().strip() == "spinning"
        time.sleep(2 * CPU_BURST)  # the banked credit spent
        beside = count_loops(seconds)
        held = box.cpu_share.stopped_seconds
    cores = os.cpu_count() or 1
    running = min(1.0, 1 / (cores * spinners / (spinners + 1)))  # the share of time the spinners run
    expected = min(1.0, running * cores / (spinners + 1) + (1 - running))  # the outside loop's cores
    assert held > 0
    assert beside >= 0.6 * expected * alone, (beside / alone, expected)


REAPED_CHILD = """
import os, time
pid = os.fork()
if pid == 0:  # a child that spins for 1.5 s of CPU: seen by several looks, then reaped
    end = time.process_time() + 1.5
    while time.process_time() < end:
        pass
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(3 * {period})  # looks after the reaping
print(os.times().children_user + os.times().children_system, flush=True)
"""


def test_a_child_seen_and_then_reaped_is_counted_once():
    """A child's time is counted while it runs, then added to its parent's when the parent reaps it:
    the share counts it once (it counted it twice before), beside the exact figure from the parent."""
    from autograder.bounds import CPU_PERIOD
    from autograder.run.sandbox import CpuShare

    process = subprocess.Popen([sys.executable, "-c", REAPED_CHILD.format(period=CPU_PERIOD)],
                               stdout=subprocess.PIPE, text=True)
    share = CpuShare(lambda: [process.pid], cores=64)  # never holds it: only counts
    share.start()
    children = float(process.stdout.read())
    process.wait()
    share.stop()
    assert 1.4 <= children < 2.5
    assert share.counted_seconds < children + 0.5, (share.counted_seconds, children)  # once, with the parent's own
    assert share.counted_seconds > 0.9 * children


CHAINS = FORK_CHAINS + """
while True:  # the orphans come to this process, the first of the namespace, which reaps them
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.01)
"""


@needs_namespaces
def test_chains_of_short_processes_are_counted_however_they_are_reparented():
    """Six chains of processes that each work a few hundredths of a second, fork the next and end: each
    lives shorter than a look, and is re-parented to the namespace's first process. Their time is
    counted all the same (the first process reaps them; it may not have the kernel reap them instead),
    against the sum of what each link says it used."""
    if resource_bounds().cpu_max:
        pytest.skip("cgroup v2's cpu.max bounds the CPU here")
    with Sandbox(Limits(threads=1, processes=32)) as box:
        started = box.start([sys.executable, "-c", CHAINS], stdout=subprocess.PIPE, text=True)
        assert started.stdout.readline().strip() == "refused"
        time.sleep(6)
        counted = box.cpu_share.counted_seconds
        used = 0.0
        os.set_blocking(started.stdout.fileno(), False)
        for line in started.stdout:
            used += float(line)
    assert used > 1.0, used
    assert counted >= 0.8 * used, (counted, used)


@needs_namespaces
def test_no_process_lifts_the_share_s_stop_for_all_the_others(sandbox):
    result = run(sandbox, """
        import os, signal
        try:
            os.kill(-1, signal.SIGCONT)
            print("sent")
        except PermissionError:
            print("refused")
        os.kill(os.getpid(), signal.SIGCONT)  # one process by its pid: allowed
        print(signal.getsignal(signal.SIGCHLD))
    """)
    assert result.stdout.split() == ["refused", "0"]  # SIG_DFL


HOARD = """
import os, sys, time
for number in range(4):
    if os.fork() == 0:  # forked children, each with a block of its own, every page written
        block = bytearray({child_mb} * 2**20)
        print("child", number, flush=True)
        time.sleep(60)
        os._exit(0)
    time.sleep(0.3)
for megabytes in range(0, {shm_mb}, 50):  # a memory file system, which no process's size counts
    with open(f"/dev/shm/hoard-{{megabytes}}", "wb") as file:  # files of 50 MB, each under the file size limit
        for _ in range(50):
            file.write(bytes(2**20))
print("held", flush=True)
time.sleep(60)
"""


@needs_namespaces
def test_all_the_processes_of_a_sandbox_and_its_scratch_space_are_held_under_its_memory():
    """Without cgroup v2, four forked children of 300 MB each and 300 MB in /dev/shm (1.5 GB, each
    process well under its own limit) are killed once they hold 1 GB together; the bound never saw
    more than 1 GB plus its margin. Beside it, an honest sandbox that holds 300 MB runs to its end."""
    from autograder.bounds import MEMORY_MARGIN_MB

    if resource_bounds().cgroup is not None:
        pytest.skip("cgroup v2's memory.max bounds the memory here")
    limits = Limits(memory_mb=1024, processes=16, scratch_mb=512)
    with Sandbox(limits) as hoarder, Sandbox(limits) as honest:
        beside = honest.start([sys.executable, "-c", "block = bytearray(300 * 2**20)\nimport time\ntime.sleep(4)\n"
                                                     "print('done', flush=True)"], stdout=subprocess.PIPE, text=True)
        started = hoarder.start([sys.executable, "-c", HOARD.format(child_mb=300, shm_mb=300)],
                                stdout=subprocess.PIPE, text=True)
        printed = started.stdout.read()  # until every process of the sandbox is gone
        assert started.wait(timeout=60) != 0
        assert "held" not in printed, printed
        assert "ran out of memory" in hoarder.memory_bound.take_exceeded()
        assert hoarder.memory_bound.peak <= (1024 + MEMORY_MARGIN_MB) * 2**20, hoarder.memory_bound.peak / 2**20
        assert beside.stdout.read().strip() == "done"
        assert honest.memory_bound.take_exceeded() is None and honest.memory_bound.peak > 250 * 2**20
