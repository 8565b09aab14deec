"""Grade on a Dask cluster: ``autograder grade --engine dask [--scheduler ADDRESS]`` (instructors.md,
"Grading a large class"). Dask distributed is the optional extra ``cluster``: ``pip install -e ".[cluster]"``.

The jobs are the local engine's (:mod:`autograder.grade`). A Dask task (:func:`grade_parcel`) is a thin
wrapper: on a worker it starts the same fresh job process as the local engine
(:class:`autograder.job.JobProcess`, with a main thread of its own, where the job's time limits work),
which grades the student in the same sandbox, with this worker's paths (:func:`unpack`). No student code
runs in a Dask worker's process. What travels:

- to the worker, a :class:`Parcel`: the job without the instructor's paths, the submission's bytes, the
  chapter's folder of ``solutions/`` as bytes, and the instructor's private paths, which the sandboxes
  hide on that machine too (with the worker's own Dask folder and TLS files);
- back, the result, the feedback page and the graded notebook (:class:`autograder.job.Finished`):
  only the instructor's process signs and writes them, and writes the gradebook, ``results.json`` and
  ``grades.csv``. Workers never read the output folder, the gradebook or the key that signs the results.

**Same grader everywhere.** Before a worker gets a job, the instructor's process compares what the worker
says of itself (:class:`Identity`: the digest of the grader's and the reference's sources that every
fingerprint holds, the versions of what decides a grade, whether its sandbox starts and whether it can
start a job's process) with its own, and refuses a worker that differs, naming it and what differs
(:func:`refusal`). An admitted worker is given a Dask resource of this run, one unit per thread, which
every task asks for (:func:`_admit`): a worker that joins later gets no job before it is checked
(:class:`_Workers`). At most ``IN_FLIGHT_PER_SLOT`` jobs per admitted thread are in the cluster at a time,
so that the instructor's memory does not grow with the class.

**Faults.** A job's process ends with the Dask worker that started it, its sandboxes with it
(:func:`work_parcel`). Dask runs the task of a worker that died again on another one, with the same seed,
and its result is counted once; after ``distributed.scheduler.allowed-failures`` such deaths (3 by
default) the job is a ``grader error``, graded again by the next run.

**Security.** Dask's messages are pickles: whoever can connect to the scheduler can run code as the
grader. A ``LocalCluster`` listens on 127.0.0.1 only (:func:`local_cluster`); a scheduler on another machine
must be reached over mutual TLS (``tls://``, with :class:`TlsFiles` or Dask's configuration), unless the
instructor accepts an unencrypted network (``insecure_network``), which the summary then names
(:func:`check_address`, before any connection). The students' code runs in a network namespace that
reaches nothing, the scheduler included.
"""

import asyncio
import contextlib
import gc
import importlib.metadata
import ipaddress
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import platform
import secrets
import select
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from autograder.bounds import IN_FLIGHT_PER_SLOT, SCHEDULER_SECONDS, WORKERLESS_SECONDS, Limits
from autograder.collect import error_line
from autograder.core import ROOT, GradingError, JobFolder, JobTimes, Report, RunTimes
from autograder.job import (
    Finished, Job, JobProcess, grader_sources, job_seconds, jobs_done, kill_descendants, sandbox_options,
    source_digests, work, worker_context)
from autograder.run.sandbox import SandboxOptions, isolation_available, resource_bounds
from autograder.run.stand_ins import Withholding, withhold

EXTRA = 'pip install -e ".[cluster]"'  # what installs Dask distributed for the grader
# With Python's, the versions that decide a grade besides the grader's and the reference's sources: the
# numbers the checks compare, the weights and vocabularies read, how notebooks and cells are read.
GRADE_PACKAGES = ("torch", "numpy", "tokenizers", "safetensors", "ipython", "nbformat")
REFRESH_SECONDS = 2.0  # between two looks for workers that joined (each is checked before it gets a job)
ENCRYPTED = ("tls", "wss")  # the protocols of Dask's that authenticate and encrypt (with TLS certificates)
# A LocalCluster's Dask configuration besides its workers' not being daemonic: its periodic work made rarer. Its
# tasks only wait for their job's process, and its processes share the machine's cores with the jobs (the CPU they
# take is in benchmarks/grading.py's table of where the time goes).
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.daemon": False,  # a daemonic process cannot start the job's processes
    "distributed.worker.profile.enabled": False,  # a worker's thread sampled every 10 ms, for the dashboard
    "distributed.admin.tick.interval": "1s",  # each process's check of its event loop (blocked?), every 20 ms
    "distributed.worker.memory.monitor-interval": "1s",  # the nannies' look at their workers' memory, every 100 ms
    "distributed.admin.system-monitor.interval": "5s",  # each process's CPU, memory and network, every 500 ms
}


@dataclass(frozen=True)
class TlsFiles:
    """Mutual TLS with the cluster: the certificate authority that signed every certificate of the
    cluster, and this machine's certificate and private key (PEM files)."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterOptions:
    """Which Dask cluster grades, and how it is reached."""

    scheduler: str | None = None  # a running scheduler's address; None: a LocalCluster of --jobs workers here
    tls: TlsFiles | None = None  # else Dask's configuration (distributed.comm.tls) for a tls:// scheduler
    insecure_network: bool = False  # accept a scheduler on another machine reached without TLS


def require_distributed() -> None:
    """Raise :class:`GradingError` in one line when Dask distributed is not installed."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise GradingError(f"--engine dask needs Dask distributed, which is not installed: {EXTRA}") from None


def _protocol_and_host(address: str) -> tuple[str, str]:
    """The protocol (Dask's default: tcp) and the host of a scheduler's address."""
    protocol, separator, rest = address.partition("://")
    if not separator:
        protocol, rest = "tcp", address
    return protocol.lower(), urlsplit(f"//{rest}").hostname or ""


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (an address, or ``localhost``; no name is resolved)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(options: ClusterOptions) -> None:
    """Refuse, before any connection, a cluster that cannot be used safely: a scheduler on another
    machine reached without TLS (unless ``insecure_network``), or TLS files for a plain address."""
    if options.scheduler is None:
        return
    protocol, host = _protocol_and_host(options.scheduler)
    if options.tls is not None and protocol not in ENCRYPTED:
        raise GradingError(f"--tls-ca, --tls-cert and --tls-key are for a tls:// scheduler, "
                           f"not {options.scheduler}")
    if protocol not in ENCRYPTED and not _loopback(host) and not options.insecure_network:
        raise GradingError(f"--scheduler {options.scheduler} is another machine's, reached without TLS, and whoever "
                           "can connect to a Dask scheduler can run code as you: use tls://... with --tls-ca, "
                           "--tls-cert and --tls-key (or Dask's distributed.comm.tls configuration), or pass "
                           "--insecure-network on a network that only the grading machines reach")


def _security(options: ClusterOptions):
    """The Dask ``Security`` of the run: mutual TLS from ``options.tls`` or Dask's configuration for a
    tls:// cluster (a LocalCluster given TLS files uses them for every role), else none."""
    from distributed.security import Security

    tls = options.tls
    if tls is not None:
        for path, option in ((tls.ca, "--tls-ca"), (tls.cert, "--tls-cert"), (tls.key, "--tls-key")):
            if not path.is_file():
                raise GradingError(f"{option} {path}: no such file")
        roles = {f"tls_{role}_{kind}": str(path) for role in ("client", "scheduler", "worker")
                 for kind, path in (("cert", tls.cert), ("key", tls.key))}
        return Security(require_encryption=True, tls_ca_file=str(tls.ca), **roles)
    if options.scheduler is None or _protocol_and_host(options.scheduler)[0] not in ENCRYPTED:
        return None
    security = Security(require_encryption=True)
    if not (security.tls_ca_file and security.tls_client_cert and security.tls_client_key):
        raise GradingError(f"--scheduler {options.scheduler} needs --tls-ca, --tls-cert and --tls-key, or Dask's "
                           "distributed.comm.tls configuration (ca-file, client.cert, client.key)")
    return security


def _key_files(security) -> tuple[str, ...]:
    """The files of a Dask ``Security``'s certificates and keys (not those it holds in memory)."""
    if security is None:
        return ()
    values = (getattr(security, name, None) for name in type(security).__slots__ if name.startswith("tls_"))
    return tuple(value for value in values if isinstance(value, str) and os.path.isfile(value))


# --------------------------------------------------------------------------------------------------
# Same grader everywhere
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """What a machine says of itself that decides whether it grades as the instructor's would."""

    host: str
    sources: str  # autograder.job.grader_sources(): the digest every fingerprint holds
    files: dict[str, str]  # autograder.job.source_digests(): the digest of each source file
    versions: dict[str, str]  # Python's and GRADE_PACKAGES'
    sandbox: str | None  # why the sandbox cannot start here; None where it can
    cpus: int
    forks: str | None  # why this process cannot start a job's process; None where it can


_PROBING = threading.Lock()  # a worker's warm-up and its admission share one first start of its sandbox


def identity() -> Identity:
    """This process's :class:`Identity`."""
    versions = {"python": platform.python_version()}
    for name in GRADE_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    with _PROBING:
        isolated, how = isolation_available()
    forks = ("it is a daemonic process, which cannot start a job's process: start it with "
             "DASK_DISTRIBUTED__WORKER__DAEMON=False (distributed.worker.daemon: False)"
             if multiprocessing.current_process().daemon else None)
    return Identity(socket.gethostname(), grader_sources(), source_digests(), versions, None if isolated else how,
                    os.cpu_count() or 1, forks)


def refusal(theirs: Identity, ours: Identity, isolated: bool) -> str | None:
    """Why a worker of identity ``theirs`` may not grade for the instructor of identity ``ours`` (whose
    students' code runs ``isolated`` in namespaces, or not), in one line; None when it may."""
    problems = []
    if theirs.sources != ours.sources:
        files = sorted(name for name in theirs.files.keys() | ours.files.keys()
                       if theirs.files.get(name) != ours.files.get(name))
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        problems.append(f"its grader and reference sources differ from yours ({shown or 'the grader version'})")
    versions = [f"{name} {theirs.versions.get(name, 'unknown')} (yours: {version})"
                for name, version in ours.versions.items() if theirs.versions.get(name) != version]
    if versions:
        problems.append(f"it runs {', '.join(versions)}")
    if isolated and theirs.sandbox:
        problems.append(f"its sandbox cannot start: {theirs.sandbox}")
    if theirs.forks:
        problems.append(theirs.forks)
    return "; ".join(problems) or None


# --------------------------------------------------------------------------------------------------
# On a worker
# --------------------------------------------------------------------------------------------------

_ADMITTED: dict[str, int] = {}  # in a Dask worker's process: the runs it was admitted to, with each job's threads


async def _introduce() -> Identity:
    """A worker's :class:`Identity`, found off its event loop (its sandbox's first start takes seconds)."""
    return await asyncio.to_thread(identity)


async def _admit(token: str, threads: int, limits: Limits, *, dask_worker) -> str:
    """Admit a worker to the run ``token``: its jobs get ``threads`` cores each, it gets the run's resource
    (one unit per thread) that every task of the run asks for, and its job processes' server starts
    ahead of its first job. Returns how it bounds a job's memory, processes and CPU."""
    from distributed.core import Status

    _ADMITTED[token] = threads
    threading.Thread(target=_start_job_server, name="autograder-job-server", daemon=True).start()
    await dask_worker.set_resources(**{token: dask_worker.state.nthreads})
    if dask_worker.status == Status.running:  # tasks that wait for the resource get a worker when one joins
        dask_worker.status = Status.paused  # or resumes, not when one gets it: this one resumes
        dask_worker.status = Status.running
    return resource_bounds().describe(replace(limits, threads=threads))


def _start_job_server() -> None:
    """The server the job processes are forked from, which imports the grader once (as the local engine's);
    where it runs already, nothing."""
    worker_context()
    multiprocessing.forkserver.ensure_running()


def warm_up() -> None:
    """What a LocalCluster's worker does as it starts, in a thread of its own (:mod:`autograder.cluster_preload`),
    while the instructor prepares the course: it starts its job server, and finds what it says of itself
    (:func:`identity`: its sandbox's first start takes seconds), which its admission then asks. What it imported
    for it (the grader, PyTorch) is left alone by the garbage collector (``gc.freeze``), as in a job's process:
    without, the worker's end, which the cluster's close waits for, took seconds more (benchmarks/grading.py,
    "after the last job")."""
    _start_job_server()
    identity()
    gc.freeze()


@dataclass(frozen=True)
class Parcel:
    """One job as it travels to a Dask worker."""

    job: Job  # without the instructor's paths (:func:`pack`): the worker gives it its own (:func:`unpack`)
    submission: bytes  # as collected
    chapter: tuple[tuple[str, bytes], ...]  # the chapter's folder of solutions/: each file's path in it, its bytes
    hide: tuple[str, ...]  # the instructor's private paths (output and submissions folders, TLS files)


def grade_parcel(parcel: Parcel, token: str) -> tuple[Finished | None, str | None, JobTimes]:
    """The Dask task of one job, on a worker admitted to the run ``token``: the job in a fresh process of
    its own (:func:`work_parcel`), within its time limit, in a scratch folder of the worker's Dask folder;
    ``(what it left, None)`` or ``(None, why it failed)``, with when it ran on this worker's thread."""
    from distributed import get_worker

    worker = get_worker()
    threads = _ADMITTED.get(token)
    if threads is None:
        raise RuntimeError(f"the worker {worker.address} was not admitted to this run")
    root = Path(worker.local_directory) / "autograder"
    root.mkdir(exist_ok=True)
    hide = (*parcel.hide, worker.local_directory, *_key_files(worker.security))
    with tempfile.TemporaryDirectory(prefix="job-", dir=root) as scratch:
        process = JobProcess(worker_context(), work_parcel, (parcel, scratch, threads, hide, os.getpid()),
                             JobFolder(Path(scratch) / "job"), job_seconds(parcel.job.limits),
                             f"{worker.address} {threading.current_thread().name}")
        return *process.wait(), process.times


def work_parcel(parcel: Parcel, scratch: str, threads: int, hide: tuple[str, ...], worker: int, connection) -> None:
    """A Dask job's process: it ends, with its sandboxes, as soon as the Dask worker's process ``worker``
    does (:func:`_end_with`), and grades the parcel's job with this machine's paths (:func:`unpack`) as
    the local engine's worker does (:func:`autograder.job.work`), the unpacking counted in its setup."""
    began = time.perf_counter()
    _end_with(worker)
    work(unpack(parcel, Path(scratch), threads, hide), connection, began)


def _end_with(pid: int) -> None:
    """End this process and every process it started (its sandboxes) when the process ``pid`` ends (now,
    when it already has)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)

    def watch() -> None:
        select.select([handle], [], [])
        kill_descendants(os.getpid())
        os._exit(1)

    threading.Thread(target=watch, name="end-with-the-dask-worker", daemon=True).start()


def unpack(parcel: Parcel, scratch: Path, threads: int, hide: tuple[str, ...]) -> Job:
    """The parcel's job with this machine's paths, under ``scratch``: the chapter's folder, its files but
    the notebook (as :func:`autograder.grade._prepare_course` lays them out), the submission, the job's
    folder and the stand-ins of the chapter's references, made from this machine's course packages; the
    sandbox's options resolved here, ``hide`` hidden too; ``threads`` cores a job."""
    job = parcel.job
    source, files, submitted = scratch / "source", scratch / "files", scratch / "submission.bin"
    for name, data in parcel.chapter:
        path = source / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    shutil.copytree(source, files, ignore=shutil.ignore_patterns("*.ipynb"))
    submitted.write_bytes(parcel.submission)
    folder = JobFolder(scratch / "job")
    folder.root.mkdir()
    isolated = job.sandbox.isolate
    withholding = (withhold(job.chapter.name, job.chapter.exercises, scratch / "stand-ins") if isolated
                   else Withholding())
    return replace(job, folder=folder, submitted=str(submitted), chapter_source=str(source), chapter_files=str(files),
                   limits=replace(job.limits, threads=threads), withholding=withholding,
                   sandbox=sandbox_options(ROOT, isolated, tuple(map(Path, hide))))


# --------------------------------------------------------------------------------------------------
# The instructor's side
# --------------------------------------------------------------------------------------------------


def pack(job: Job, hide: tuple[str, ...], chapters: dict[str, tuple[tuple[str, bytes], ...]]) -> Parcel:
    """The parcel of ``job``: its paths left out, the bytes they hold in; ``chapters`` keeps each chapter's
    folder, read once."""
    if job.chapter.name not in chapters:
        folder = Path(job.chapter_source)
        chapters[job.chapter.name] = tuple((path.relative_to(folder).as_posix(), path.read_bytes())
                                           for path in sorted(folder.rglob("*")) if path.is_file())
    bare = replace(job, folder=JobFolder(Path()), submitted="", chapter_source="", chapter_files="",
                   sandbox=SandboxOptions(job.sandbox.isolate), withholding=Withholding())
    return Parcel(bare, Path(job.submitted).read_bytes(), chapters[job.chapter.name], hide)


class _Workers:
    """The cluster's workers as this run knows them: each checked when first seen, then admitted (it
    holds the run's resource, as the scheduler says) or refused (named in the notes, with why)."""

    def __init__(self, client, token: str, isolated: bool, limits: Limits, report: Report):
        self.client, self.token, self.isolated, self.limits, self.report = client, token, isolated, limits, report
        self.times = report.times
        self.ours = identity()
        self.refused: dict[tuple[str, str], str] = {}  # (address, Dask folder) of a worker's process -> why
        self.bounds: dict[str, str] = {}  # how each admitted worker bounds a job
        self.admitted: set[str] = set()  # the addresses of the admitted workers alive, at the last look
        self.slots = 0  # threads of the admitted workers alive

    def refresh(self) -> None:
        """Check the workers that joined since the last look, admit those that may grade; count the
        threads of the workers admitted (and the look, in the run's times)."""
        started = time.perf_counter()
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        admitted = {address for address, info in workers.items() if self.token in info.get("resources", {})}
        new = [address for address, info in workers.items()
               if address not in admitted and (address, info.get("local_directory")) not in self.refused]
        if new:
            passed = {}
            for address, answer in self.client.run(_introduce, workers=new, on_error="return").items():
                theirs = answer if isinstance(answer, Identity) else None
                why = (f"it cannot say what it runs ({error_line(answer)})" if theirs is None
                       else refusal(theirs, self.ours, self.isolated))
                if why:
                    self._refuse(address, workers[address], why, theirs)
                else:
                    passed[address] = theirs
            threads = Counter()
            for address in [*admitted, *passed]:
                threads[workers[address]["host"]] += workers[address]["nthreads"]
            for address, theirs in passed.items():  # a job's share: its machine's cores over its admitted threads
                share = max(1, theirs.cpus // threads[workers[address]["host"]])
                answer = self.client.run(_admit, self.token, share, self.limits, workers=[address],
                                         on_error="return").get(address)
                if isinstance(answer, str):
                    admitted.add(address)
                    self.bounds[address] = answer
                else:
                    self._refuse(address, workers[address], f"it could not be admitted ({error_line(answer)})", theirs)
        self.slots = sum(workers[address]["nthreads"] for address in admitted)
        self.admitted = admitted
        self.times.refreshes += 1
        self.times.refresh_seconds += time.perf_counter() - started

    def wait_for_one(self) -> None:
        """Wait for a worker that can grade; raise :class:`GradingError` when every worker of the cluster
        is refused, or none joins within ``WORKERLESS_SECONDS``."""
        deadline = time.monotonic() + WORKERLESS_SECONDS
        while True:
            self.refresh()
            if self.slots:
                return
            if self.refused:
                reasons = "; ".join(f"{address}: {why}" for (address, _), why in self.refused.items())
                raise GradingError(f"no worker of the Dask cluster can grade: {reasons}")
            if time.monotonic() > deadline:
                raise GradingError(f"no Dask worker joined within {WORKERLESS_SECONDS:g} s")
            time.sleep(REFRESH_SECONDS)

    def _refuse(self, address: str, info: dict, why: str, theirs: Identity | None) -> None:
        self.refused[address, info.get("local_directory")] = why
        where = f" ({theirs.host})" if theirs else ""
        self.report.notes.append(f"the Dask worker {address}{where} is not used: {why}")

    def describe_bounds(self) -> str:
        """How the admitted workers bounded the jobs' memory, processes and CPU."""
        return " | ".join(sorted(set(self.bounds.values())))


@contextlib.contextmanager
def local_cluster(workers: int, security=None) -> Iterator:
    """A Dask LocalCluster on this machine for the time of the block: ``workers`` worker processes of one
    thread each, the scheduler, the workers and the scheduler's web server listening on 127.0.0.1 only
    (TLS with ``security``, a Dask ``Security``), configured by :data:`LOCAL_CLUSTER_CONFIG` (not daemonic, also
    when their nannies restart them), deaf to Ctrl-C and warming up as they start
    (:mod:`autograder.cluster_preload`)."""
    import dask
    from distributed import LocalCluster

    with dask.config.set(LOCAL_CLUSTER_CONFIG), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                         protocol="tls://" if security else "tcp://", security=security,
                         dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
                         preload=["autograder.cluster_preload"]) as cluster:
        yield cluster


class DaskEngine:
    """Grades a class's jobs on a Dask cluster (see the module's docstring); refuses, when made, the
    options that cannot be used (:func:`check_address`) and a missing Dask (:func:`require_distributed`)."""

    def __init__(self, options: ClusterOptions, jobs: int):
        check_address(options)
        require_distributed()
        self.options, self.workers = options, max(1, jobs)
        self.security = _security(options)
        self._connection = None  # the client, within :meth:`connected`

    @property
    def description(self) -> str:
        """Where the jobs run, in words; a scheduler on another machine reached without TLS is named so."""
        over = " over TLS" if self.security is not None else ""
        if self.options.scheduler is None:
            return f"graded on a Dask LocalCluster of {self.workers} worker(s) on this machine (127.0.0.1){over}"
        protocol, host = _protocol_and_host(self.options.scheduler)
        if protocol not in ENCRYPTED and not _loopback(host):
            return (f"WARNING: graded on the Dask cluster at {self.options.scheduler} over an UNENCRYPTED network "
                    "(--insecure-network): whoever could reach the scheduler could run code as you")
        return f"graded on the Dask cluster at {self.options.scheduler}{over}"

    @contextlib.contextmanager
    def _client(self) -> Iterator:
        """A client of the cluster: of a LocalCluster started and closed here (:func:`local_cluster`), or
        of the running scheduler."""
        from distributed import Client

        if self.options.scheduler is None:
            with local_cluster(self.workers, self.security) as cluster, \
                    Client(cluster, security=self.security) as client:
                yield client
            return
        try:
            client = Client(self.options.scheduler, security=self.security, timeout=SCHEDULER_SECONDS)
        except (OSError, TimeoutError, ValueError) as error:
            raise GradingError(f"cannot reach the Dask scheduler at {self.options.scheduler}: "
                               f"{error_line(error)}") from None
        with client:
            yield client

    @contextlib.contextmanager
    def connected(self, times: RunTimes) -> Iterator[None]:
        """The cluster reached for the block, before the course is prepared (a LocalCluster started, whose
        workers then start their job servers and check their sandboxes while it is: :func:`warm_up`), as the
        local engine's job server starts; the client (and a LocalCluster) closed when the block ends."""
        with self._client() as client:
            self._connection = client
            times.connected = time.time()
            try:
                yield
            finally:
                self._connection = None

    def run(self, todo: list[Job], finish: Callable[[Job, Finished | None, str | None], None], report: Report,
            private: tuple[Path, ...], isolated: bool) -> None:
        """Grade ``todo`` on the cluster (within :meth:`connected`), ``finish`` each job here as it ends;
        ``private`` are the instructor's folders that every sandbox hides, ``isolated`` whether it has namespaces."""
        from distributed import wait

        if not todo:
            return
        if self._connection is None:
            raise RuntimeError("DaskEngine.run grades within DaskEngine.connected")
        hide = tuple(str(path) for path in private) + _key_files(self.security)
        token = f"autograder-{secrets.token_hex(8)}"
        times = report.times
        client = self._connection
        workers = _Workers(client, token, isolated, todo[0].limits, report)
        workers.wait_for_one()
        times.admitted = looked = time.time()
        waiting, in_flight, chapters = list(todo), {}, {}
        workerless = None
        try:
            while waiting or in_flight:
                if time.time() - looked >= REFRESH_SECONDS:  # for workers that joined, or left
                    workers.refresh()
                    looked = time.time()
                while waiting and len(in_flight) < IN_FLIGHT_PER_SLOT * workers.slots:
                    job = waiting.pop(0)
                    future = client.submit(grade_parcel, pack(job, hide, chapters), token, pure=False,
                                           resources={token: 1})
                    in_flight[future] = job
                workerless = None if workers.slots else workerless or time.monotonic()
                if workerless and time.monotonic() - workerless > WORKERLESS_SECONDS:
                    raise GradingError(f"the Dask cluster had no worker that can grade for "
                                       f"{WORKERLESS_SECONDS:g} s; what was graded is kept: run again to resume")
                if not in_flight:  # until a worker that can grade joins
                    time.sleep(REFRESH_SECONDS)
                    continue
                try:
                    done = wait(list(in_flight), timeout=REFRESH_SECONDS, return_when="FIRST_COMPLETED").done
                except TimeoutError:
                    continue
                for future in done:
                    output, failure, ran = _outcome(future)
                    if ran is not None:
                        times.jobs.append(ran)
                    finish(in_flight.pop(future), output, failure)
                    future.release()
            jobs_done(times)
            workers.refresh()  # the workers alive now: a dead one's address would be tried for 30 s
            worker_cpu = client.run(time.process_time, workers=list(workers.admitted), on_error="return")
            times.worker_cpu_seconds = sum(value for value in worker_cpu.values() if isinstance(value, float))
        except BaseException:
            with contextlib.suppress(Exception):  # the scheduler may be gone too
                client.cancel(list(in_flight))
            raise
        finally:
            if workers.bounds:
                report.results.bounds = workers.describe_bounds()
                report.notes.insert(0, f"memory, processes and CPU on the Dask workers: {report.results.bounds}")


def _outcome(future) -> tuple[Finished | None, str | None, JobTimes | None]:
    """What a finished task sent back (:func:`grade_parcel`), or why it has nothing: the workers that ran it
    died (as many times as Dask allows), or the task itself failed."""
    from distributed.scheduler import KilledWorker

    try:
        return future.result()
    except KilledWorker as error:
        return None, f"the Dask workers that ran it died ({error_line(error)})", None
    except Exception as error:  # noqa: BLE001 -- whatever the task raised, the job is a grader error
        return None, f"its Dask task failed: {error_line(error)}", None
