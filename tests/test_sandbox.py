"""The sandbox that student code runs in (autograder/sandbox.py): what it can see, write, reach and use.

Each test runs a short Python program in a sandbox and checks what it could do. The isolation tests
need Linux user namespaces and are skipped where they are not available; the resource limits are
checked everywhere.
"""

import errno
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.sandbox import Limits, Sandbox, isolation_available

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
    with Sandbox(Limits(memory_mb=1024, file_size_mb=1, tmp_size_mb=8)) as box:
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
def test_writes_only_to_its_scratch_folder_which_close_deletes():
    target = REPO / "bertlab" / "sandbox_was_here.txt"
    with Sandbox() as box:
        result = run(box, f"""
            import os
            for path in [{str(target)!r}, '/usr/sandbox_was_here', os.environ['HOME'] + '/notes.txt',
                         '/tmp/scratch.txt', 'in_working_directory.txt']:
                try:
                    open(path, 'w').write('x')
                    print('written')
                except OSError as error:
                    print(error.errno)
        """)
        assert (box.work / "in_working_directory.txt").exists()
        root = box.root
    assert result.stdout.split() == [str(errno.EROFS), str(errno.EROFS), "written", "written", "written"]
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
        print('remount', libc.mount(None, {str(REPO / 'bertlab').encode()!r}, None, ctypes.c_ulong(0x20 | 0x1000), None))
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
        descendants = _descendants(process.pid)
        assert len(descendants) >= 2
    time.sleep(0.5)
    assert not [pid for pid in descendants if _alive(pid)]


def _descendants(pid: int) -> list[int]:
    found, stack = [], [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            children = [int(child) for child in (task / "children").read_text().split()]
            found += children
            stack += children
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


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
