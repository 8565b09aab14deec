"""The gradebook in PostgreSQL, as instructors.md documents it: ``autograder grade --db
postgresql://user:password@host/database`` with the driver of ``pip install "bertlab[postgres]"``.

A real server is started for the test (initdb and pg_ctl in a temporary folder, on a free port of
127.0.0.1, as an unprivileged user: PostgreSQL refuses to run as root); the test is skipped where
Debian's ``postgresql`` is not installed. A class (an honest student, a blank one) is graded into it
and its grades are read back with nbgrader's API and ``nbgrader export``. A wrong password and a
port where no server listens are each named in one line, without the password.
"""

import contextlib
import io
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from grading_helpers import ADD, DOUBLE, build_course, put, with_cells

from autograder import cli
from tests.conftest import free_port

pytest.importorskip("psycopg", reason='the PostgreSQL driver is not installed (pip install "bertlab[postgres]")')

REPO = Path(__file__).resolve().parents[1]
USER, DATABASE = "grader", "gradebook"
LIMITS = ["--timeout", "20", "--notebook-timeout", "300", "--memory", "3072"]


def server_binaries() -> Path | None:
    """The folder of PostgreSQL's initdb and pg_ctl: on PATH, else Debian's newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    folders = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda path: int(path.parent.name)
                     if path.parent.name.isdigit() else 0)
    return next((folder for folder in reversed(folders) if (folder / "initdb").exists()), None)


def _as_server_user() -> tuple[list[str], pwd.struct_passwd | None]:
    """The command prefix that runs the server's programs as an unprivileged user (none needed when
    this is not root), and that user."""
    if os.geteuid() != 0:
        return [], None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            user = pwd.getpwnam(name)
            return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"], user
    pytest.skip("running as root with no unprivileged user (postgres, nobody) to run PostgreSQL as")


@pytest.fixture(scope="module")
def server():
    """A PostgreSQL server of its own: (host, port, password), with the database ``gradebook``."""
    import psycopg

    binaries = server_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL's server (initdb, pg_ctl) is not installed: apt-get install postgresql")
    prefix, user = _as_server_user()
    folder = Path(tempfile.mkdtemp(prefix="bertlab-postgres-"))
    password, port = secrets.token_hex(12), free_port()
    (folder / "password").write_text(password)
    if user is not None:
        for path in (folder, folder / "password"):
            os.chown(path, user.pw_uid, user.pw_gid)
    data, log = folder / "data", folder / "server.log"
    environment = {**os.environ, "LC_ALL": "C"}

    def run(*command):
        subprocess.run([*prefix, *map(str, command)], check=True, capture_output=True, env=environment, cwd=folder,
                       timeout=300)

    try:
        run(binaries / "initdb", "-D", data, "-U", USER, "--pwfile", folder / "password", "--auth-host=scram-sha-256",
            "--auth-local=trust", "-E", "UTF8")
        run(binaries / "pg_ctl", "-D", data, "-l", log, "-w", "-t", "120", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start")
        with psycopg.connect(host="127.0.0.1", port=port, user=USER, password=password, dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        yield "127.0.0.1", port, password
    except subprocess.CalledProcessError as error:
        pytest.fail(f"PostgreSQL did not start: {error.stderr.decode(errors='replace')}\n"
                    f"{log.read_text() if log.exists() else ''}")
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            run(binaries / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    submissions = tmp_path_factory.mktemp("submissions")
    put(submissions, "honest/01_tiny/01_tiny.ipynb", with_cells(released["01_tiny"], add=ADD, double=DOUBLE))
    put(submissions, "blank/01_tiny/01_tiny.ipynb", released["01_tiny"])
    return root, submissions


def _grade(course, out: Path, url: str) -> tuple[int, str, str]:
    root, submissions = course
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = cli.main(["grade", str(submissions), "--out", str(out), "--root", str(root), "--db", url,
                           "--jobs", "2", *LIMITS])
    return status, stdout.getvalue(), stderr.getvalue()


def test_a_class_graded_into_postgresql_is_read_back_by_nbgrader(server, course, tmp_path):
    from nbgrader.api import Gradebook

    host, port, password = server
    url = f"postgresql://{USER}:{password}@{host}:{port}/{DATABASE}"
    status, printed, errors = _grade(course, tmp_path / "out", url)
    assert status == 0, printed + errors
    assert password not in printed + errors and f"postgresql://{USER}:***@{host}:{port}/{DATABASE}" in printed
    assert "- honest, 01_tiny: 3 / 3" in printed and "- blank, 01_tiny: 0 / 3; blank: test_add, test_double" in printed
    with Gradebook(url) as gradebook:
        assert gradebook.find_submission("01_tiny", "honest").score == 3
        assert gradebook.find_submission("01_tiny", "blank").score == 0
    exported = tmp_path / "exported.csv"
    subprocess.run([sys.executable, "-m", "nbgrader", "export", "--db", url, "--to", str(exported)], cwd=tmp_path,
                   check=True, capture_output=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    rows = [line.split(",") for line in exported.read_text().splitlines()]
    scores = {row[3]: float(row[9]) for row in rows[1:] if row[0] == "01_tiny"}
    assert scores == {"honest": 3.0, "blank": 0.0}


def test_a_wrong_password_is_named_in_one_line_without_it(server, course, tmp_path):
    host, port, _ = server
    wrong = "not-the-password-" + secrets.token_hex(4)
    status, printed, errors = _grade(course, tmp_path / "out", f"postgresql://{USER}:{wrong}@{host}:{port}/{DATABASE}")
    assert status == 2 and wrong not in printed + errors
    [line] = errors.splitlines()
    assert f"(host {host}, port {port}, database {DATABASE}, user {USER})" in line
    assert "password authentication failed" in line and "db upgrade" not in line


def test_a_server_that_cannot_be_reached_is_named_in_one_line_without_the_password(course, tmp_path):
    port, password = free_port(), "secret-" + secrets.token_hex(4)  # nothing listens there
    status, printed, errors = _grade(course, tmp_path / "out", f"postgresql://{USER}:{password}@127.0.0.1:{port}/x")
    assert status == 2 and password not in printed + errors
    [line] = errors.splitlines()
    assert line.startswith(f"autograder grade: cannot use the gradebook (host 127.0.0.1, port {port}, database x, "
                           f"user {USER}): ") and "refused" in line
