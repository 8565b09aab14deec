"""Grading on a Dask cluster (autograder/cluster.py): ``autograder grade --engine dask``.

The tiny course of tests/grading_helpers.py is graded by both engines, and the grades must be the same;
a LocalCluster listens on loopback only; a cluster that cannot be used safely (a remote scheduler
without TLS, options that do not go together), a missing Dask and a worker whose grader differs are
refused in one line, before any job; a worker killed mid-job takes its job's sandbox with it, and the
job is graded once, on the worker that took its place; an interrupted run keeps what it graded and leaves
no process behind. The clusters here are LocalClusters on 127.0.0.1.

The end of a run writes the whole class into the gradebook in bulk (autograder/report/gradebook.py): what it
writes is what nbgrader's own API writes, result by result, and an unchanged class writes nothing.
"""

import contextlib
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from tests.conftest import free_port, wait_until_listening
from grading_helpers import (ADD, CHAPTERS, DOUBLE, SOFTMAX, alive, assert_one_job_at_a_time, build_course, descendants,
                             nbgrader_export_csv, notebooks, put, records, with_cells)

from autograder import cli
from autograder.bounds import Limits
from autograder.core import results
from autograder.core.results import Certainty, Cause, NotebookResult, ReferenceCopy, Status
from autograder.grade import Engine, grade

distributed = pytest.importorskip("distributed", reason='Dask is not installed (pip install -e ".[cluster]")')

from autograder import cluster  # noqa: E402
from autograder.cluster import ClusterOptions, Identity, TlsFiles, check_address, local_cluster, refusal  # noqa: E402

LIMITS = Limits(cell_timeout=20, notebook_timeout=300, memory_mb=3072)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny course, and a class of four: full marks, blank, unreadable, and a softmax checked by the
    real check (the reference withheld from the sandbox by stand-ins, made on the worker)."""
    root = tmp_path_factory.mktemp("course")
    released = build_course(root)
    submissions = tmp_path_factory.mktemp("submissions")
    put(submissions, "honest/01_tiny/01_tiny.ipynb", with_cells(released["01_tiny"], add=ADD, double=DOUBLE))
    put(submissions, "blank/01_tiny/01_tiny.ipynb", released["01_tiny"])
    put(submissions, "broken/01_tiny/01_tiny.ipynb", "{not a notebook")
    put(submissions, "honest/03_tiny/03_tiny.ipynb", with_cells(released["03_tiny"], softmax=SOFTMAX))
    return root, submissions, released


@pytest.fixture(scope="module")
def graded_here(tiny, tmp_path_factory):
    """The class graded by the local engine."""
    root, submissions, _ = tiny
    out = tmp_path_factory.mktemp("local")
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, seed=1)
    assert report.failures == []
    return out


def _grades(out: Path) -> dict:
    return {key: (test.status, test.points, test.cause, test.message) for key, test in records(out).items()}


def test_a_class_graded_on_a_local_dask_cluster_gets_the_grades_of_the_local_engine(tiny, graded_here, tmp_path):
    root, submissions, _ = tiny
    out = tmp_path / "dask"
    report = grade(submissions, out, jobs=2, limits=LIMITS, course_root=root, seed=1, engine=Engine.DASK)
    assert report.failures == [] and report.graded == 4
    assert _grades(out) == _grades(graded_here)
    assert {key: result.seed for key, result in notebooks(out).items() if result.origin} == {
        ("honest", "01_tiny"): 1, ("blank", "01_tiny"): 1, ("broken", "01_tiny"): 1, ("honest", "03_tiny"): 1}
    assert (out / "grades.csv").read_text() == (graded_here / "grades.csv").read_text()
    for student, chapter in (("honest", "01_tiny"), ("blank", "01_tiny"), ("honest", "03_tiny")):
        assert (out / "feedback" / student / chapter / f"{chapter}.html").stat().st_mode & 0o777 == 0o644
        graded = out / ".work" / "course" / "autograded" / student / chapter / f"{chapter}.ipynb"
        assert graded.stat().st_mode & 0o777 == 0o600 and nbformat.read(graded, as_version=4).cells
    assert "LocalCluster of 2 worker(s) on this machine (127.0.0.1)" in report.engine
    assert any(note.startswith("memory, processes and CPU on the Dask workers: ") for note in report.notes)
    assert not (out / ".work" / "jobs").exists()  # nothing of a job's folder reaches the instructor's machine
    times = report.times  # when the cluster was reached, admitted its workers and ran each job, on which
    assert times.began < times.connected < times.admitted <= min(job.started for job in times.jobs)
    assert len(times.jobs) == 4 and times.refreshes >= 1
    assert_one_job_at_a_time(times, slots=2)
    assert 0 < times.worker_cpu_seconds < times.cpu_seconds  # the workers' own, within all but the jobs'


def test_a_local_cluster_s_workers_warm_up_as_they_start_and_keep_dask_s_periodic_work_rare():
    from distributed import Client

    def state():
        import gc

        import dask

        return (os.getpid(), gc.get_freeze_count() > 0, dask.config.get("distributed.worker.profile.enabled"),
                dask.config.get("distributed.admin.tick.interval"))

    with local_cluster(1) as started, Client(started) as client:
        deadline = time.monotonic() + 240
        while not (found := next(iter(client.run(state).values())))[1] and time.monotonic() < deadline:
            time.sleep(0.5)  # no job, no admission: the worker warms up as it starts
        pid, frozen, profiled, tick = found
        servers = [child for child in descendants(pid)
                   if b"multiprocessing.forkserver" in Path(f"/proc/{child}/cmdline").read_bytes()]
        assert frozen and len(servers) == 1  # its job server started, the grader's import kept off the collector
        assert (profiled, tick) == (False, "1s")  # no stack sampling every 10 ms, no look at its loop every 20 ms


def _listening(pids: set[int]) -> set[str]:
    """The local addresses of the TCP sockets on which the processes ``pids`` listen."""
    inodes = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                address, port = fields[1].split(":")
                host = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(address) == 8 else address
                inodes[fields[9]] = f"{host}:{int(port, 16)}"
    found = set()
    for pid in pids:
        for descriptor in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(descriptor) if descriptor.is_symlink() else ""
            if target.startswith("socket:[") and target[8:-1] in inodes:
                found.add(inodes[target[8:-1]])
    return found


def test_a_local_cluster_listens_on_loopback_only():
    from distributed import Client

    with local_cluster(2) as started, Client(started) as client:
        workers = client.scheduler_info()["workers"]
        pids = {os.getpid(), *client.run(os.getpid).values()}
        listening = _listening(pids)
        daemonic = client.run(lambda: __import__("multiprocessing").current_process().daemon)
    assert started.scheduler_address.startswith("tcp://127.0.0.1:") and len(workers) == 2
    assert all(address.startswith("tcp://127.0.0.1:") and info["nanny"].startswith("tcp://127.0.0.1:")
               for address, info in workers.items())
    assert len(listening) >= 5 and {address.split(":")[0] for address in listening} == {"127.0.0.1"}, listening
    assert set(daemonic.values()) == {False}  # so that they can start the jobs' processes


def _certificates(folder: Path, name: str) -> TlsFiles:
    """A certificate authority of its own and a certificate it signed (openssl)."""
    folder.mkdir()

    def openssl(*argv):
        subprocess.run(["openssl", *argv], cwd=folder, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}-ca", "-keyout",
            "ca-key.pem", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", "key.pem", "-out", "cert.csr")
    openssl("x509", "-req", "-in", "cert.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-days", "1",
            "-out", "cert.pem")
    return TlsFiles(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")


def test_a_local_cluster_given_tls_files_admits_only_peers_certified_by_its_authority(tmp_path):
    from distributed import Client

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    ours = cluster.DaskEngine(ClusterOptions(tls=_certificates(tmp_path / "course", "grading")), 1)
    theirs = cluster.DaskEngine(ClusterOptions(tls=_certificates(tmp_path / "other", "intruder")), 1)
    assert ours.description.endswith("on this machine (127.0.0.1) over TLS")
    with local_cluster(1, ours.security) as started, Client(started, security=ours.security) as client:
        assert started.scheduler_address.startswith("tls://127.0.0.1:")
        assert list(client.run(os.getpid).values()) != [os.getpid()]
        with pytest.raises((OSError, TimeoutError)):
            Client(started.scheduler_address, security=theirs.security, timeout=10)


@pytest.mark.parametrize("argv, words", [
    (["--engine", "dask", "--scheduler", "tcp://10.1.2.3:8786"], "reached without TLS"),
    (["--engine", "dask", "--scheduler", "10.1.2.3:8786"], "reached without TLS"),
    (["--engine", "dask", "--scheduler", "tcp://grader.example.org:8786"], "--insecure-network"),
    (["--engine", "dask", "--scheduler", "tcp://10.1.2.3:8786", "--tls-ca", "ca.pem", "--tls-cert", "c.pem",
      "--tls-key", "k.pem"], "are for a tls:// scheduler"),
    (["--engine", "dask", "--scheduler", "tls://10.1.2.3:8786", "--tls-ca", "ca.pem", "--tls-cert", "c.pem",
      "--tls-key", "k.pem"], "--tls-ca ca.pem: no such file"),
    (["--engine", "dask", "--scheduler", "tls://10.1.2.3:8786", "--tls-ca", "ca.pem"], "go together"),
    (["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler: only with --engine dask"),
    (["--insecure-network"], "--insecure-network: only with --engine dask"),
])
def test_a_cluster_that_cannot_be_used_safely_is_refused_before_connecting(argv, words, tmp_path, monkeypatch, capsys):
    def connect(*args, **kwargs):
        raise AssertionError("no connection may be tried")

    monkeypatch.setattr(distributed, "Client", connect)
    monkeypatch.chdir(tmp_path)
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), *argv])
    error = capsys.readouterr().err
    assert status == 2 and words in error and len(error.strip().splitlines()) == 1, error
    assert not (tmp_path / "out").exists()


def test_an_unencrypted_network_is_accepted_only_when_asked_and_named_in_the_summary():
    options = ClusterOptions("tcp://10.1.2.3:8786", insecure_network=True)
    check_address(options)
    check_address(ClusterOptions("tcp://127.0.0.1:8786"))  # this machine's loopback needs no TLS
    check_address(ClusterOptions("tls://10.1.2.3:8786", TlsFiles(Path("ca"), Path("cert"), Path("key"))))
    description = cluster.DaskEngine(options, 1).description
    assert description.startswith("WARNING") and "UNENCRYPTED" in description and "--insecure-network" in description


def test_without_dask_the_error_is_one_line_that_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    status = cli.main(["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "out"), "--engine", "dask"])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1
    assert 'needs Dask distributed, which is not installed: pip install -e ".[cluster]"' in error


def _identity(**changes) -> Identity:
    ours = Identity("grader", "a" * 64, {"autograder/grade.py": "1", "bertlab/attention.py": "2"},
                    {"python": "3.11.7", "torch": "2.13.0"}, None, 2, None)
    return Identity(**{**ours.__dict__, **changes})


@pytest.mark.parametrize("changes, words", [
    ({}, None),
    ({"sources": "b" * 64,
      "files": {"autograder/grade.py": "9", "bertlab/attention.py": "2", "autograder/new.py": "3"}},
     "its grader and reference sources differ from yours (autograder/grade.py, autograder/new.py)"),
    ({"versions": {"python": "3.11.7", "torch": "2.12.0"}}, "it runs torch 2.12.0 (yours: 2.13.0)"),
    ({"sandbox": "namespaces do not work here (EPERM)"}, "its sandbox cannot start: namespaces do not work here"),
    ({"forks": "it is a daemonic process"}, "it is a daemonic process"),
    ({"host": "node07", "cpus": 64}, None),  # another machine, the same grader
])
def test_a_worker_is_refused_for_what_differs_from_the_instructor_s_grader(changes, words):
    why = refusal(_identity(**changes), _identity(), isolated=True)
    assert why == words if words is None else words in why


def test_a_worker_whose_grader_differs_is_named_and_gets_no_job(tiny, tmp_path, monkeypatch, capsys):
    root, submissions, _ = tiny
    changed = {**cluster.source_digests(), "autograder/grade.py": "0" * 64}
    monkeypatch.setattr(cluster, "source_digests", lambda: changed)  # the instructor's side only
    monkeypatch.setattr(cluster, "grader_sources", lambda: "0" * 64)
    status = cli.main(["grade", str(submissions), "--out", str(tmp_path / "out"), "--root", str(root),
                       "--engine", "dask", "--jobs", "1"])
    error = capsys.readouterr().err.splitlines()[-1]  # after the line that says what will be graded
    assert status == 2
    assert error.startswith("autograder grade: no worker of the Dask cluster can grade: tcp://127.0.0.1:")
    assert "its grader and reference sources differ from yours (autograder/grade.py)" in error
    assert not list((tmp_path / "out" / ".work" / "results").glob("*/*.json"))


def _sandboxes(out: Path) -> set[int]:
    """The processes that start a sandbox of a run into ``out`` (their command line holds the folders
    the sandbox hides)."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().decode(errors="replace") if entry.name.isdigit() else ""
        except OSError:
            continue
        if "autograder/run/sandbox_inside.py" in line and str(out) in line:
            found.add(int(entry.name))
    return found




def test_a_worker_killed_mid_job_takes_its_sandbox_along_and_the_job_is_graded_once_by_another(tiny, tmp_path):
    from distributed import Client

    root, _, released = tiny
    slow = with_cells(released["01_tiny"], add=ADD, double=DOUBLE)
    slow.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(6)"))
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    put(submissions, "slow/01_tiny/01_tiny.ipynb", slow)
    killed = {}
    with local_cluster(1) as started, Client(started) as client:
        def kill_the_worker_mid_job():
            deadline = time.monotonic() + 240
            while not _sandboxes(out) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)  # the student's process started in the sandbox
            worker = next(address for address, keys in client.processing().items() if keys)
            pid = client.run(os.getpid, workers=[worker])[worker]
            killed["tree"] = descendants(pid)  # the job's process, its sandbox, the student's process
            killed["sandbox"] = _sandboxes(out)
            os.kill(pid, signal.SIGKILL)
            time.sleep(3)
            killed["left"] = set(filter(alive, killed["tree"]))

        killer = threading.Thread(target=kill_the_worker_mid_job, daemon=True)
        killer.start()
        report = grade(submissions, out, limits=LIMITS, course_root=root, seed=1, engine=Engine.DASK,
                       cluster=ClusterOptions(started.scheduler_address))
        killer.join(timeout=10)
    assert killed["sandbox"] <= killed["tree"] and len(killed["tree"]) >= 4  # forkserver, job, sandbox, student
    assert killed["left"] == set()  # the job's process and its whole sandbox died with the worker
    assert report.graded == 1 and report.failures == []  # graded once, on the worker that replaced it
    assert {key: (test.status, test.points) for key, test in records(out).items()} == {
        ("slow", "01_tiny", "test_add"): ("passed", 1), ("slow", "01_tiny", "test_double"): ("passed", 2)}
    assert notebooks(out)["slow", "01_tiny"].seed == 1
    assert not set(filter(alive, _sandboxes(out)))


def test_an_interrupted_dask_run_keeps_what_it_graded_and_leaves_no_sandbox(tiny, tmp_path):
    root, _, released = tiny
    slow = with_cells(released["01_tiny"], add=ADD, double=DOUBLE)
    slow.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(60)"))  # running at the Ctrl-C
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    put(submissions, "ann/01_tiny/01_tiny.ipynb", "{not a notebook")  # graded at once
    put(submissions, "ben/01_tiny/01_tiny.ipynb", slow)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out), "--root", str(root),
               "--engine", "dask", "--jobs", "2"]
    # In a terminal's foreground, as tests/test_grading.py's interrupted run: Ctrl-C reaches the whole group.
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not (_sandboxes(out) and list((out / ".work" / "results").glob("*/*.json"))) and time.monotonic() < deadline:
        time.sleep(0.2)
    running = descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130 and "interrupted; what was graded is saved" in stderr
    assert "Traceback" not in stderr  # the LocalCluster's workers leave Ctrl-C to the grader
    time.sleep(2)
    assert not set(filter(alive, running))  # the cluster, the jobs' processes and their sandboxes are gone
    assert list(notebooks(out)) == [("ann", "01_tiny")]  # what was graded is kept, whole
    (submissions / "ben" / "01_tiny" / "01_tiny.ipynb").write_text("[]")  # quick to grade this time
    report = grade(submissions, out, limits=Limits(), course_root=root)  # the CLI's limits; here, the local engine
    assert (report.graded, report.reused) == (1, 1)


def _result(student: str, chapter: str, points: dict, timestamp: str = "2026-11-20T10:00:00+01:00", copies=()):
    tests = tuple(results.TestResult(name, got, 2.0 if name == "test_double" else 1.0,
                             Status.PASSED if got else Status.ERROR, "", Cause.NONE if got else Cause.CRASH)
                  for name, got in points.items())
    return NotebookResult(student, chapter, tests, origin=f"{student}.ipynb", timestamp=timestamp, copies=copies)


def _gradebook_rows(db_url: str) -> dict:
    """What the gradebook holds of the class: students, submissions, grades and comments, by name."""
    from sqlalchemy import create_engine, text

    queries = {
        "students": "SELECT id FROM student",
        "submissions": "SELECT s.student_id, a.name, s.timestamp, s.extension FROM submitted_assignment s "
                       "JOIN assignment a ON a.id = s.assignment_id",
        "notebooks": "SELECT s.student_id, n.name, sn.flagged, sn.late_submission_penalty FROM submitted_notebook sn "
                     "JOIN submitted_assignment s ON s.id = sn.assignment_id JOIN notebook n ON n.id = sn.notebook_id",
        "grades": "SELECT s.student_id, n.name, c.name, g.auto_score, g.manual_score, g.extra_credit, "
                  "g.needs_manual_grade FROM grade g JOIN base_cell c ON c.id = g.cell_id "
                  "JOIN submitted_notebook sn ON sn.id = g.notebook_id JOIN notebook n ON n.id = sn.notebook_id "
                  "JOIN submitted_assignment s ON s.id = sn.assignment_id",
        "comments": "SELECT s.student_id, n.name, c.name, m.auto_comment, m.manual_comment FROM comment m "
                    "JOIN base_cell c ON c.id = m.cell_id JOIN submitted_notebook sn ON sn.id = m.notebook_id "
                    "JOIN notebook n ON n.id = sn.notebook_id JOIN submitted_assignment s ON s.id = sn.assignment_id",
    }
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return {name: sorted(map(tuple, connection.execute(text(query)))) for name, query in queries.items()}
    finally:
        engine.dispose()


def test_the_class_reaches_the_gradebook_as_nbgrader_s_api_writes_it_and_an_unchanged_class_writes_nothing(tmp_path):
    from nbgrader.api import Gradebook

    from autograder.core import nbgrader_adapter
    from autograder.report import gradebook

    build_course(tmp_path / "course")
    shutil.copytree(tmp_path / "course" / "solutions", tmp_path / "generation" / "source")
    urls = {}
    for way in ("api", "bulk"):
        nbgrader_adapter.create_gradebook(tmp_path / f"{way}.db")
        urls[way] = f"sqlite:///{tmp_path / f'{way}.db'}"
        nbgrader_adapter.register_chapters(tmp_path / "generation", urls[way], list(CHAPTERS))
    names = {name: name for name in CHAPTERS}
    flag = (ReferenceCopy("add", "it uses bertlab's add", Certainty.CERTAIN, withheld=True),)
    first = [_result("alice", "01_tiny", {"test_add": 1.0, "test_double": 2.0}, copies=flag),
             _result("bob", "01_tiny", {"test_add": 0.0, "test_double": 2.0}),
             _result("bob", "03_tiny", {"test_softmax": 2.0}, "2026-11-21T08:30:00"),
             _result("carol", "02_tiny", {"test_negate": 0.0})]
    second = [_result("alice", "01_tiny", {"test_add": 1.0, "test_double": 0.0}, "2026-11-22T09:00:00+00:00"),
              first[1], _result("bob", "03_tiny", {"test_softmax": 0.0}, "2026-11-21T08:30:00"), first[3],
              _result("dave", "02_tiny", {"test_negate": 1.0}, copies=(ReferenceCopy("negate", "suspected"),))]
    for written in (first, second):
        with Gradebook(urls["api"]) as book:
            for result in written:
                nbgrader_adapter.store_grades(book, result, result.chapter)
        assert gradebook.write_grades(urls["bulk"], written, names) == []
        assert _gradebook_rows(urls["bulk"]) == _gradebook_rows(urls["api"])
        for way in ("api", "bulk"):  # an instructor's score, which the grader's later runs keep, for review
            with Gradebook(urls[way]) as book:
                book.find_grade("test_add", "01_tiny", "01_tiny", "bob").manual_score = 0.5
                book.db.commit()
    before = (tmp_path / "bulk.db").read_bytes()
    assert gradebook.write_grades(urls["bulk"], second, names) == []
    assert (tmp_path / "bulk.db").read_bytes() == before  # nothing rewritten
    assert gradebook.write_grades(urls["bulk"], [_result("eve", "04_none", {})], names) == [
        "eve/04_none: not written to the gradebook: it knows no notebook None of chapter 04_none"]
    exports = {}
    for way, export in (("api", nbgrader_export_csv), ("bulk", gradebook.export_csv)):
        export(urls[way], tmp_path / f"{way}.csv", second)
        assert (tmp_path / f"{way}.csv").stat().st_mode & 0o777 == 0o600
        exports[way] = [*csv.reader(io.StringIO((tmp_path / f"{way}.csv").read_text()))]
    assert exports["bulk"][0] == exports["api"][0] and sorted(exports["bulk"]) == sorted(exports["api"])
    assert len(exports["bulk"]) == 1 + 3 * 4  # every chapter for every student
    assert [row[7] for row in exports["bulk"] if row[0] == "01_tiny" and row[3] == "bob"] == ["2.5"]  # 0.5 by hand


def _guide_block(after: str, language: str = "bash") -> str:
    """The first block of ``language`` in instructors.md after the line that starts with ``after``, its
    shell lines continued with a backslash joined."""
    guide = (REPO / "instructors.md").read_text()
    fence = f"```{language}\n"
    start = guide.index(fence, guide.index(after)) + len(fence)
    block = guide[start:guide.index("```", start)]
    return block.replace("\\\n", " ") if language == "bash" else block


#: A stand-in for Slurm's commands on this machine: ``sbatch`` starts the job script in a session of its own
#: (the script is copied first: dask-jobqueue deletes it once ``sbatch`` returns) and prints its job id,
#: which ``scancel`` ends with the session's processes.
FAKE_SLURM = {
    "sbatch": 'cp "$1" "$SLURM_JOBS/job.$$.sh"\n'
              'setsid bash "$SLURM_JOBS/job.$$.sh" > "$SLURM_JOBS/job.$$.log" 2>&1 < /dev/null &\n'
              'echo $! >> "$SLURM_JOBS/jobs"\n'
              'echo "Submitted batch job $!"\n',
    "scancel": 'kill -TERM -- "-$1" 2>/dev/null || true\n',
}


def _ended(session: int, seconds: float) -> bool:
    """Whether no process of the session (process group) ``session`` is left, waiting up to ``seconds``."""
    def members() -> list[int]:  # running or sleeping, not zombies (which a container's init may not reap)
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
            except OSError:  # ended meanwhile
                continue
            if int(group) == session and state != "Z":
                found.append(int(stat.parent.name))
        return found

    deadline = time.monotonic() + seconds
    while members():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def test_the_guide_s_slurm_example_grades_the_class_over_tls(tiny, graded_here, tmp_path):
    """The Slurm example of instructors.md, run as printed (with this environment, 2 workers of one job
    for 8 of 20, 4 GB) against Slurm's commands played on this machine (:data:`FAKE_SLURM`): its
    workers join over TLS, started by the job script's prologue, and the class gets the local engine's
    grades."""
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    root, submissions, _ = tiny
    subprocess.run(["bash", "-e", "-c", _guide_block("Keep the key files readable")], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    example = _guide_block("### A Slurm cluster", "python")
    for printed, here in (("/shared/course/.venv", sys.prefix), ("cores=8, processes=8", "cores=2, processes=2"),
                          ('memory="48GB"', 'memory="4GB"'), ("scale(jobs=20)", "scale(jobs=1)")):
        assert printed in example, printed
        example = example.replace(printed, here)
    slurm = tmp_path / "slurm-bin"
    slurm.mkdir()
    for command, script in FAKE_SLURM.items():
        (slurm / command).write_text("#!/bin/bash\n" + script)
        (slurm / command).chmod(0o755)
    environment = {**os.environ, "SLURM_JOBS": str(tmp_path),
                   "PATH": os.pathsep.join([str(slurm), str(Path(sys.executable).parent), os.environ["PATH"]])}
    login_node = subprocess.Popen([sys.executable, "-c", example], cwd=tmp_path, env=environment, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    try:
        address = login_node.stdout.readline().strip()
        assert address.startswith("tls://"), address
        grader = TlsFiles(tmp_path / "ca.pem", tmp_path / "grader.pem", tmp_path / "grader-key.pem")
        out = tmp_path / "out"
        report = grade(submissions, out, limits=LIMITS, course_root=root, seed=1, engine=Engine.DASK,
                       cluster=ClusterOptions(address, tls=grader))
        login_node.communicate("\n", timeout=120)  # Enter: the cluster cancels its job (scancel)
    finally:
        if login_node.poll() is None:
            os.killpg(login_node.pid, signal.SIGKILL)
        jobs = [int(job) for job in (tmp_path / "jobs").read_text().split()] if (tmp_path / "jobs").is_file() else []
        left = [job for job in jobs if not _ended(job, seconds=30)]  # scancel ends each job's session
        for job in left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job, signal.SIGKILL)
    assert login_node.returncode == 0 and len(jobs) == 1 and left == []
    assert report.failures == [] and report.graded == 4
    assert _grades(out) == _grades(graded_here)


def test_the_guide_s_plain_machines_example_grades_the_class_over_tls(tiny, graded_here, tmp_path):
    """The certificate authority, `dask scheduler` and `dask worker` of instructors.md, run as printed on
    this machine (127.0.0.1 for 10.0.0.1, a free port, 2 workers for 8): the class gets the local engine's
    grades, and a client without the course's certificates is turned away."""
    from distributed import Client

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    root, submissions, _ = tiny
    subprocess.run(["bash", "-e", "-c", _guide_block("Keep the key files readable")], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    port = free_port()
    commands = (_guide_block("### Plain machines").replace("10.0.0.1", "127.0.0.1").replace("8786", str(port))
                .replace("--nworkers 8", "--nworkers 2").strip().splitlines())
    assert [command.split()[:2] for command in commands] == [["dask", "scheduler"],
                                                            ["DASK_DISTRIBUTED__WORKER__DAEMON=False", "dask"]]
    environment = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    processes = []
    try:
        scheduler = commands[0]
        for command in commands:
            processes.append(subprocess.Popen(["bash", "-c", command], cwd=tmp_path, env=environment,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                              start_new_session=True))
            if command is scheduler:
                wait_until_listening(port)  # before the workers look for it; grade() waits for the workers
        address = f"tls://127.0.0.1:{port}"
        grader = TlsFiles(tmp_path / "ca.pem", tmp_path / "grader.pem", tmp_path / "grader-key.pem")
        out = tmp_path / "out"
        report = grade(submissions, out, limits=LIMITS, course_root=root, seed=1, engine=Engine.DASK,
                       cluster=ClusterOptions(address, tls=grader))
        intruder = cluster.DaskEngine(ClusterOptions(tls=_certificates(tmp_path / "other", "intruder")), 1)
        with pytest.raises((OSError, TimeoutError)):
            Client(address, security=intruder.security, timeout=10)
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    assert report.failures == [] and report.graded == 4
    assert address in report.engine
    assert _grades(out) == _grades(graded_here)
