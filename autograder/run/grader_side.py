"""The grader's side of the student process: start it, send it requests, and stand for its objects.

:class:`StudentProcess` starts :func:`autograder.run.student_side.serve` in a sandbox and exchanges frames with
it (:mod:`autograder.run.wire`). A reply is plain data, decoded with bounds; an object that stays in the
student process comes back as a :class:`Remote`, whose calls, attribute reads and ``with`` blocks
are new requests. A Remote has no comparison or truth value of its own (``assert remote == 5``
cannot be faked), prints as ``<remote ...>`` and its ``__exit__`` never swallows the grader's
exception. No name the student process sends selects a grader object: a handle is a number, and an
exception is rebuilt only as one of the built-in types of :data:`autograder.run.wire.EXCEPTION_TYPES`.

The test's objects keep their identity as in one kernel (:class:`SentObjects`): a tensor is sent once
while unchanged, what the student's code returns of the test's objects is the test's own object, and
after a call what it changed of them (tensors' data, ``requires_grad`` and gradients, modules'
training flag, optimizers' and schedulers' state) is copied back. A function of the test that cannot
travel by name (a lambda passed as an argument) is called back in the grader.

The graded chapter's references are withheld from the student process (:mod:`autograder.run.stand_ins`):
where a check sends one (a dependency, an object of a reference class), it travels as its module's
source, and only once the test of its exercise has run (:class:`Release`); in a list of forbidden
functions it travels as its name, which the stand-in of the sandbox bears.
"""

import contextlib
import hashlib
import importlib
import io
import os
import pickle
import signal
import subprocess
import sys
import time
import types
import weakref

import torch

from autograder.bounds import (
    INTERRUPT_GRACE_SECONDS,
    MAX_EXCEPTION_TYPE_CHARS,
    MAX_REPLY_BYTES,
    MAX_STUDENT_EXCEPTION_CHARS,
    MAX_STUDENT_TRACEBACK_CHARS,
    MAX_UNREADABLE_REPLY_CHARS,
    STARTUP_SECONDS,
    Limits,
)
from autograder.run.sandbox import Sandbox, interrupt, kill
from autograder.run.stand_ins import ReferenceUnavailable, Withholding
import autograder.run.student_side as student_side
from autograder.run.wire import (
    EXCEPTION_TYPES,
    GraderObject,
    Handle,
    UnreadableReply,
    decode,
    read_frame,
    version,
    write_frame,
)
from autograder.text import printable, safe_str


class StudentTimeout(BaseException):
    """The student's code ran past its time limit. A BaseException: a check's ``except Exception``
    must not turn it into an ordinary failure."""


class StudentProcessEnded(BaseException):
    """The student process ended (``sys.exit`` in a thread, ``os._exit``, a crash, a kill), or sent
    what the grader does not read."""


class StudentError(RuntimeError):
    """An exception of a type the grader does not rebuild (the message names the original type)."""


class WithheldReference(Exception):
    """A check would send a withheld reference whose exercise's test has not run yet."""


class Release:
    """Which withheld references the student process may get: those of the exercises whose tests have
    run (``graded``, which the runner fills), each as the source of its module (sent once a process)."""

    def __init__(self, withholding: Withholding, graded: set[str]):
        self.withholding, self.graded = withholding, graded
        self.sent: set[str] = set()  # digests of the module sources the student process has
        self.sources: dict[tuple[str, frozenset[str]], tuple[str, str]] = {}  # (module, graded) -> (source, digest)

    def persistent_id(self, value):
        """("released", module, qualname, digest, source or None) for a withheld reference; None else."""
        withheld = self.withholding.withheld(value)
        if withheld is None:
            return None
        if withheld.exercise not in self.graded:
            raise WithheldReference(f"the check would send {withheld.module}.{withheld.name}, the reference of "
                                    f"{withheld.exercise}, whose test has not run yet")
        key = (withheld.module, frozenset(self.graded))
        if key not in self.sources:  # built once: a check sends its references with every case
            source = self.withholding.released_source(*key)
            self.sources[key] = source, hashlib.sha256(source.encode()).hexdigest()
        source, digest = self.sources[key]
        sent, self.sent = digest in self.sent, self.sent | {digest}
        return "released", withheld.module, value.__qualname__, digest, None if sent else source

    def portable(self, item):
        """A forbidden function as it travels: a withheld one (or a method of one) as its name."""
        withheld = self.withholding.withheld(item)
        return f"{withheld.module}.{item.__qualname__}" if withheld is not None else _portable(item)


def _resolve_operator(name: str):
    """``torch.ops`` operators do not pickle; they travel as their name, e.g. ``aten._softmax``."""
    found = torch.ops
    for part in name.split("."):
        found = getattr(found, part)
    return found


# The grader's objects whose state the student process sends back after a call (besides tensors).
STATEFUL = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)


class SentObjects:
    """The grader's side of what it sent to the student process, so that objects keep their
    identity across the two processes as they would in one kernel.

    - Tensors are numbered; an unchanged tensor is sent once and referred to by number afterwards
      (``LargestTensor(q)`` then ``f(q)`` see one tensor there, as here). When the grader's tensor
      dies, its number is forgotten (told with the next request).
    - Modules, optimizers and schedulers are numbered and sent again each time (their parameters
      are tensors, sent once); after a call their changed state comes back (:meth:`apply`).
    - Whatever the student's code returns of these comes back as the grader's own object
      (``freeze_layers(model) is model``).
    - A function that cannot be pickled by name (a test's lambda) is numbered in ``callbacks``;
      the student process calls it back in the grader.
    """

    def __init__(self):
        self.objects: dict[int, weakref.ref] = {}
        self.tensors: dict[int, tuple[int, tuple]] = {}  # id(tensor) -> (number, its _sent_state when sent)
        self.callbacks: dict[int, object] = {}
        self.forgotten: list[int] = []
        self.count = 0
        self.pins: list = []  # objects sent during the requests under way (a callback's result)

    @contextlib.contextmanager
    def pinned(self):
        """Keep alive what is sent until the block ends, so that the reply may refer to it."""
        mark = len(self.pins)
        try:
            yield
        finally:
            del self.pins[mark:]

    def new_number(self) -> int:
        self.count += 1
        return self.count

    def known_tensor(self, tensor: torch.Tensor) -> int | None:
        """The number of a tensor the student process holds an up-to-date copy of."""
        number, state = self.tensors.get(id(tensor), (None, None))
        if number is None or self.get(number) is not tensor or _sent_state(tensor) != state:
            return None
        return number

    def register(self, value) -> int:
        self.pins.append(value)
        number = self.new_number()
        self.objects[number] = weakref.ref(value, lambda _, number=number: self._died(number))
        if isinstance(value, torch.Tensor):
            stale, _ = self.tensors.get(id(value), (None, None))
            if stale is not None and self.objects.pop(stale, None) is not None:
                self.forgotten.append(stale)  # the student process's copy is out of date
            self.tensors[id(value)] = (number, _sent_state(value))
        return number

    def _died(self, number: int) -> None:
        self.objects.pop(number, None)
        self.forgotten.append(number)

    def get(self, number: int):
        reference = self.objects.get(number)
        return reference() if reference is not None else None

    def take_forgotten(self) -> list[int]:
        forgotten, self.forgotten = self.forgotten, []
        for key in [key for key, (number, _) in self.tensors.items() if number in forgotten]:
            del self.tensors[key]
        return forgotten

    def apply(self, changes) -> None:
        """Give the grader's objects the state the student's code left in their copies."""
        if not isinstance(changes, list):
            return
        for change in changes:
            if not (isinstance(change, tuple) and len(change) == 3 and type(change[1]) is int):
                continue
            kind, number, value = change
            target = self.get(number)
            if target is None:
                continue
            with contextlib.suppress(Exception), torch.no_grad():  # a change that does not fit is dropped
                if kind == "data" and isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
                    if target.shape == value.shape and target.dtype == value.dtype:
                        target.copy_(value)
                    else:
                        target.set_(value.clone())
                elif kind == "requires_grad" and isinstance(target, torch.Tensor):
                    target.requires_grad_(bool(value))
                elif kind == "grad" and isinstance(target, torch.Tensor):
                    target.grad = value.clone() if isinstance(value, torch.Tensor) else None
                elif kind == "training" and isinstance(target, torch.nn.Module):
                    target.training = bool(value)
                elif kind == "state" and isinstance(target, STATEFUL[1:]) and isinstance(value, dict):
                    known = target.state_dict().keys()
                    target.load_state_dict(value if isinstance(target, torch.optim.Optimizer)
                                           else {key: item for key, item in value.items() if key in known})
            if isinstance(target, torch.Tensor) and id(target) in self.tensors:  # the copy is up to date
                self.tensors[id(target)] = (number, _sent_state(target))


def _sent_state(tensor: torch.Tensor) -> tuple[int, bool]:
    """What must not have changed for the student process's copy of a tensor to be up to date."""
    return version(tensor), tensor.requires_grad


class _RequestPickler(pickle.Pickler):
    """A Remote travels as its number, torch operators as their name, and the grader's tensors,
    modules, optimizers, schedulers and lambdas as :class:`SentObjects` says."""

    def __init__(self, file, sent: SentObjects | None = None, release: Release | None = None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.sent, self.release = sent, release
        self.parts: set[int] = set()  # ids of the pieces a registered tensor is rebuilt from

    def persistent_id(self, value):
        if isinstance(value, Remote):
            return ("remote", object.__getattribute__(value, "_number"))
        released = self.release.persistent_id(value) if self.release is not None else None
        if released is not None:
            return released
        if self.sent is not None and isinstance(value, types.FunctionType) and not _importable(value):
            number = self.sent.new_number()
            self.sent.callbacks[number] = value
            return ("grader", number)
        return None

    def reducer_override(self, value):
        if isinstance(value, torch._ops.OpOverloadPacket):
            return _resolve_operator, (f"{value._qualified_op_name.replace('::', '.')}",)
        if isinstance(value, torch._ops.OpOverload):
            return _resolve_operator, (f"{value.name().replace('::', '.')}.{value._overloadname}",)
        if self.sent is None or not isinstance(value, (torch.Tensor, *STATEFUL)) or id(value) in self.parts:
            return NotImplemented
        if isinstance(value, torch.Tensor):
            number = self.sent.known_tensor(value)
            if number is not None:
                return student_side.received, (number,)
        function, arguments, *rest = value.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        self.parts.update(id(part) for part in arguments if isinstance(part, torch.Tensor))  # Parameter.data
        return (student_side.remember, (self.sent.register(value), function, arguments), *rest)


def _dumps(value, sent: SentObjects | None = None, release: Release | None = None) -> bytes:
    """Pickle a message for the student process (see _RequestPickler)."""
    buffer = io.BytesIO()
    _RequestPickler(buffer, sent, release).dump(value)
    return buffer.getvalue()


def _importable(function: types.FunctionType) -> bool:
    """Whether pickle can send ``function`` by its name (not a lambda, not a local function)."""
    try:
        found = importlib.import_module(function.__module__)
        for part in function.__qualname__.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    return found is function


def _portable(function):
    """A forbidden function as the student process can receive it: itself when it pickles, else
    its "module.qualname" (which the guard also understands)."""
    try:
        _dumps(function)
        return function
    except Exception:
        return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', repr(function))}"


class Remote:
    """Stands for an object of the student's that lives in the student process.

    Calls, attribute reads and writes, indexing, ``len``, iteration and ``with`` blocks are requests
    to that process; what comes back is a value, or another Remote. Nothing else is forwarded: a Remote is always
    true, equal only to itself, and prints as ``<remote ...>``.
    """

    __slots__ = ("_student", "_number", "_kind", "_label")
    FORWARDED_DUNDERS = {"__name__", "__qualname__"}

    def __init__(self, student: "StudentProcess", handle: Handle):
        object.__setattr__(self, "_student", student)
        object.__setattr__(self, "_number", handle.number)
        object.__setattr__(self, "_kind", handle.kind)
        object.__setattr__(self, "_label", handle.label)

    def __call__(self, *args, **kwargs):
        return self._student.call(self, args, kwargs)

    def __call_and_backward__(self, *args, **kwargs):
        """Call, then ``.backward()`` on the result, both in the student process (where the graph is);
        the gradients of the grader's tensors come back to them."""
        return self._student.call(self, args, kwargs, backward=True)

    def __getattr__(self, name: str):
        if name.startswith("__") and name not in self.FORWARDED_DUNDERS:
            raise AttributeError(name)
        return self._student.request("getattr", self._number, name)

    def __setattr__(self, name: str, value) -> None:
        self._student.request("setattr", self._number, name, value)

    def __getitem__(self, key):
        return self._student.request("getitem", self._number, key)

    def __len__(self) -> int:
        length = self._student.request("len", self._number)
        if type(length) is not int or length < 0:
            raise TypeError("the student's object gave a length that is not a natural number")
        return length

    def __iter__(self):
        items = self._student.request("list", self._number)
        if not isinstance(items, list):
            raise TypeError("the student's object did not list its items")
        return iter(items)

    def __enter__(self):
        return self._student.request("enter", self._number)

    def __exit__(self, kind, error, trace) -> bool:
        """Leave the student's ``with`` block (its ``__exit__`` is called with no exception).

        Never swallows the grader's exception; when the block raised one, that one is the verdict,
        whatever the student's ``__exit__`` does.
        """
        try:
            self._student.request("exit", self._number)
        except (Exception, StudentTimeout, StudentProcessEnded):
            if kind is None:
                raise
        return False

    def __with_dependencies__(self, **references):
        """The student's function or class with some of its global names bound to ``references``."""
        return self._student.request("with_dependencies", self._number, references)

    def __repr__(self) -> str:
        return f"<remote {self._kind} {self._label} of the student's notebook>"


class StudentProcess:
    """A sandboxed process that runs the student's code cells and serves requests about its objects."""

    def __init__(self, sandbox: Sandbox, limits: Limits, withholding: Withholding = Withholding(),
                 graded: set[str] | None = None):
        """``withholding``: the graded chapter's references, withheld; ``graded``: the exercises whose tests
        have run (the runner's set, which it fills), whose references may be released."""
        self.sandbox, self.limits = sandbox, limits
        self.deadline: float | None = None  # the notebook's; each request also has the cell limit
        self.requests = 0
        self.sent = SentObjects()  # the grader's objects and functions the student process has
        self.release = Release(withholding, set() if graded is None else graded)
        self.ended_because: str | None = None
        to_student, from_grader = os.pipe()
        from_student, to_grader = os.pipe()
        self.log_path = sandbox.runtime / f"student-process-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.process = sandbox.start(
                [sys.executable, "-c",
                 f"from autograder.run.student_side import serve; serve({to_student}, {to_grader})"],
                pass_fds=(to_student, to_grader), stdout=subprocess.DEVNULL, stderr=log,
            )
        os.close(to_student)
        os.close(to_grader)
        self.requests_fd, self.replies_fd = from_grader, from_student
        os.set_blocking(self.requests_fd, False)
        try:
            self._read_reply(0, time.monotonic() + STARTUP_SECONDS)
        except TimeoutError:
            kill(self.process)
            self.ended_because = f"it did not start within {STARTUP_SECONDS:g} s"
        except StudentProcessEnded:
            with open(self.log_path, "rb") as file:  # the end of what it printed, however long that is
                file.seek(max(0, os.path.getsize(self.log_path) - 2000))
                log = file.read().decode(errors="replace")
            self.ended_because = f"it did not start ({self.ended_because}): {log}"

    def close(self) -> None:
        kill(self.process)
        for fd in (self.requests_fd, self.replies_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- requests ----------------------------------------------------------------------------------

    def request(self, *request):
        """Send a request, wait for the reply, and return its value or raise its exception."""
        # The checks' forbidden-call guards must not count the grader's own work as the student's.
        from autograder.checks.framework import allowed

        return allowed(self._exchange)(request)

    def _exchange(self, request: tuple):
        with self.sent.pinned():  # what the request sends lives until its reply refers to it
            return self._send_and_wait(request)

    def _send_and_wait(self, request: tuple):
        if self.ended_because:
            raise StudentProcessEnded(self.ended_because)
        self.requests += 1
        number = self.requests
        timeout = self.limits.cell_timeout
        if self.deadline is not None:
            timeout = min(timeout, self.deadline - time.monotonic())
        deadline = time.monotonic() + max(timeout, 0.0)
        try:
            message = _dumps((number, request, self.sent.take_forgotten()), self.sent, self.release)
            write_frame(self.requests_fd, message, deadline)
        except TimeoutError:
            kill(self.process)
            self.ended_because = "it stopped reading the grader's requests"
            raise StudentTimeout(f"the time limit of {self.limits.cell_timeout:g} s per call was reached") from None
        except OSError:
            raise self._ended() from None
        status, value = self._wait_for_reply(number, deadline)
        if status == "ok":
            return value
        raise self._rebuild_error(value)

    def _wait_for_reply(self, number: int, deadline: float):
        try:
            return self._read_reply(number, deadline)
        except TimeoutError:
            interrupt(self.process)
        try:  # the interrupted request answers with a KeyboardInterrupt, unless the code ignores it
            self._read_reply(number, time.monotonic() + INTERRUPT_GRACE_SECONDS)
        except (TimeoutError, StudentProcessEnded):
            kill(self.process)
            self.ended_because = "it was stopped after a time limit"
        raise StudentTimeout(f"the time limit of {self.limits.cell_timeout:g} s per call was reached")

    def _read_reply(self, number: int, deadline: float):
        while True:
            try:
                frame = read_frame(self.replies_fd, deadline, MAX_REPLY_BYTES)
                if frame is None:
                    raise self._ended()
                reply = decode(frame, self._adopt)
                if not (isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[1], tuple)
                        and len(reply[1]) == 2 and reply[1][0] in ("ok", "error", "callback")):
                    raise UnreadableReply("a reply that is not (number, (status, value))")
            except UnreadableReply as error:
                raise self._unreadable(error) from None
            reply_number, (status, value) = reply
            if reply_number == number and status == "callback":
                self._call_back(number, value, deadline)
            elif reply_number == number:
                return status, value

    def _call_back(self, number: int, call, deadline: float) -> None:
        """Run one of the grader's functions for the student process, and send the result.

        Only functions the grader sent (registered in ``callbacks``) can be called; whatever they
        raise or return, the student process gets an answer ("ok", value) or ("error", text).
        """
        try:
            function, args, kwargs = call
            result = self.sent.callbacks[function](*args, **kwargs)
            payload = _dumps((number, ("callback-result", "ok", result), []), self.sent, self.release)
        except Exception as error:
            payload = _dumps((number, ("callback-result", "error", f"{type(error).__name__}: {safe_str(error)}"), []))
        try:
            write_frame(self.requests_fd, payload, deadline)
        except TimeoutError:
            raise self._unreadable(TimeoutError("it stopped reading the grader's answers")) from None
        except OSError:
            raise self._ended() from None

    def _unreadable(self, error: Exception) -> StudentProcessEnded:
        kill(self.process)
        self.ended_because = ("it sent a reply the grader does not read "
                              f"({printable(str(error), MAX_UNREADABLE_REPLY_CHARS)})")
        return StudentProcessEnded(self.ended_because)

    def _ended(self) -> StudentProcessEnded:
        kill(self.process)
        code = self.process.returncode
        how = f"it was killed by signal {-code}" if code and code < 0 else f"it exited with status {code}"
        if code == -signal.SIGKILL:
            how += " (the memory limit, or a kill)"
        bound = self.sandbox.memory_bound
        self.ended_because = how = (bound.take_exceeded() if bound is not None else None) or how
        return StudentProcessEnded(how)

    def _adopt(self, value):
        """A handle becomes a Remote; a reference to one of the grader's objects, that object."""
        if isinstance(value, Handle):
            return Remote(self, value)
        if isinstance(value, GraderObject):
            found = self.sent.get(value.number)
            if found is None:
                raise UnreadableReply("a reference to an object of the test's that no longer exists")
            return found
        return value

    def _rebuild_error(self, info) -> BaseException:
        """The student's exception as the grader raises it: its type when it is one of
        EXCEPTION_TYPES (with its arguments when they are plain values), else a StudentError."""
        from autograder.checks.framework import CheckFailed

        info = info if isinstance(info, dict) else {}
        kind = str(info.get("type"))
        message = printable(str(info.get("message")), MAX_STUDENT_EXCEPTION_CHARS)
        if kind == "builtins.KeyboardInterrupt":
            return StudentTimeout(f"the time limit of {self.limits.cell_timeout:g} s per call was reached")
        if kind == f"{CheckFailed.__module__}.{CheckFailed.__qualname__}":
            error = CheckFailed(message)
        elif kind == "autograder.run.stand_ins.ReferenceUnavailable":  # forged, it only costs the student
            error = ReferenceUnavailable(message)
        elif kind in EXCEPTION_TYPES:
            args = info.get("args")
            plain = isinstance(args, tuple) and len(args) <= 4 and all(
                type(arg) in (str, int, float, bool, type(None)) and len(str(arg)) <= MAX_STUDENT_EXCEPTION_CHARS
                for arg in args)
            try:
                error = EXCEPTION_TYPES[kind](*args) if plain else EXCEPTION_TYPES[kind](message)
            except Exception:
                error = EXCEPTION_TYPES[kind](message)
        elif kind == "builtins.SystemExit":
            error = StudentError("your code called sys.exit() (or raised SystemExit)")
        else:
            error = StudentError(f"{printable(kind.rpartition('.')[2], MAX_EXCEPTION_TYPE_CHARS)}: {message}")
        error.student_traceback = printable(str(info.get("traceback", "")), MAX_STUDENT_TRACEBACK_CHARS)
        return error

    # -- what the grader asks ------------------------------------------------------------------------

    def run_cell(self, source: str):
        """Execute one of the student's cells; its outputs, as the student process reports them."""
        return self.request("run", source)

    def lookup(self, name: str):
        return self.request("lookup", name)

    def call(self, target: Remote, args: tuple, kwargs: dict, backward: bool = False):
        from autograder.checks.framework import forbidden_in_force

        forbidden = [self.release.portable(item) for item in forbidden_in_force()]
        result = self.request("call", target._number, args, kwargs, forbidden, torch.is_grad_enabled(), backward)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise self._unreadable(UnreadableReply("a call's reply that is not (result, changes)"))
        value, changes = result
        self.sent.apply(changes)
        return value
