"""Trusted verdicts: the grader runs every test cell itself, outside the student's process.

A test cell that runs in the student's kernel can be subverted by the student's own code
(monkey-patching ``torch.testing`` or the checks, an IPython hook that swallows exceptions, printing
"passed"). So the grader executes each test cell of the *instructor's* notebook, hidden tests
included, in its own process, where the names the cell uses stand for the student's objects:

- A sandboxed *student process* (:func:`serve`, started by :class:`StudentProcess`) executes the
  student's code cells, never a test cell, and then answers requests about its objects: call this
  function, construct this class, read this attribute.
- Arguments travel to it pickled. Results come back *by value* (tensors, numbers, strings, dtypes,
  and lists, tuples and dicts of them), decoded by an unpickler that accepts nothing else, so no
  object of the student's ever runs code in the grader; anything else stays in the student process,
  and the grader gets a :class:`Remote`, a handle whose calls, attribute reads and ``with`` blocks
  are new requests. A Remote has no comparison or truth value of its own (``assert remote == 5``
  cannot be faked), and its ``__exit__`` never swallows the grader's exceptions. A function of the
  test that cannot travel by name (a lambda passed as an argument) is called back in the grader.
- The test's objects keep their identity as in one kernel (:class:`_SentObjects`): a tensor is
  sent once while unchanged, what the student's code returns of the test's objects is the test's
  own object, and after a call what it changed of them (tensors' data, ``requires_grad`` and
  gradients, modules' training flag, optimizers' and schedulers' state) is copied back.
- Modules (``torch``, ``math``) and library functions resolve to the grader's own copies, with the
  submodules the student's code imported.
- The checks' rules that concern the student's code run where that code runs: the functions that
  the active ``forbidden_calls`` guards forbid are forbidden inside the student process around each
  call, and ``with_dependencies`` rebinds the student's function there (``Remote.__with_dependencies__``).

Each test cell's outcome is ``passed`` (no exception), ``failed`` (an assertion, e.g. a
``CheckFailed``), ``error`` (any other exception: ``NotImplementedError``, the memory limit, the
student process ending), ``timeout`` or ``missing`` (the exercise's function is not defined).
:func:`combine` sets it against the outcome nbgrader saw in the student's kernel: where the kernel
says passed and the grader does not, or the test cell was edited, it is ``tampered``.
"""

import builtins
import contextlib
import importlib
import io
import itertools
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import time
import traceback
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import torch

from autograder.sandbox import Limits, Sandbox, interrupt, kill

MAX_MESSAGE_BYTES = 512 * 1024 * 1024  # largest reply the grader reads from the student process
MAX_OUTPUT_CHARS = 20_000  # of what a test cell prints, kept for the feedback
INTERRUPT_GRACE_SECONDS = 3.0  # after SIGINT, how long the student process has to give up
STARTUP_SECONDS = 180.0  # for the student process to import torch and IPython (slow on a busy machine)
MAX_RESTARTS = 2  # student processes restarted per notebook after one ended
# Packages whose modules, functions and classes a test cell gets from the grader, never from the student.
TRUSTED_PACKAGES = {"torch", "math", "numpy", "bertlab", "autograder", "builtins", "functools", "itertools",
                    "collections", "operator", "random", "statistics"}


class StudentTimeout(BaseException):
    """The student's code ran past its time limit. A BaseException: a check's ``except Exception``
    must not turn it into an ordinary failure."""


class StudentProcessEnded(BaseException):
    """The student process ended (``sys.exit`` in a thread, ``os._exit``, a crash, a kill)."""


class StudentError(RuntimeError):
    """An exception of a type the grader does not rebuild (the message names the original type)."""


@dataclass(frozen=True)
class Outcome:
    """What the grader's own run of one test cell gave."""

    status: str  # passed, failed, error, timeout or missing
    message: str = ""
    output: str = ""  # what the cell printed (the checks print a summary)


# --------------------------------------------------------------------------------------------------
# The wire: length-prefixed frames; replies carry values only
# --------------------------------------------------------------------------------------------------


# A reply is plain data only (None, bool, int, float, str, bytes, and lists, tuples and dicts of
# them), unpickled without access to any class or function. Tensors, dtypes, devices, sizes and
# handles travel as tuples that start with one of these markers and are rebuilt by the grader; a
# student who returns such a tuple on purpose only gets back a tensor (or handle) of their own.
TENSOR, DTYPE, DEVICE, SIZE, HANDLE = "<tensor>", "<dtype>", "<device>", "<size>", "<handle>"
GRADER_OBJECT = "<grader-object>"  # an object the grader sent, by its number: the grader's own comes back


class _Handle(NamedTuple):
    """An object that stays in the student process: its number there, its kind and its name."""

    number: int
    kind: str  # module, class, callable or object
    name: str  # module name, "module:qualname" of a function or class, else the type's name
    submodules: tuple[str, ...] = ()  # of a module: the public submodules imported in the student process


def _tensor(dtype_name: str, shape, data: bytes) -> torch.Tensor:
    dtype = getattr(torch, str(dtype_name), None)
    if not isinstance(dtype, torch.dtype) or not isinstance(shape, tuple) or not isinstance(data, bytes) \
            or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"not a tensor: dtype {dtype_name!r}, shape {shape!r}")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(data):
        raise ValueError(f"a tensor of shape {shape} and dtype {dtype_name} cannot hold {len(data)} bytes")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {name!r}")
    return dtype


REBUILD = {
    TENSOR: _tensor,
    DTYPE: _dtype,
    DEVICE: lambda name: torch.device(str(name)),
    SIZE: lambda dimensions: torch.Size(int(n) for n in dimensions),
    HANDLE: lambda number, kind, name, submodules=(): _Handle(int(number), str(kind), str(name),
                                                            tuple(str(module) for module in submodules)),
    GRADER_OBJECT: lambda number: _GraderObject(int(number)),
}


class _GraderObject(NamedTuple):
    """In a reply: the grader's object of this number (the student's code returned its copy)."""

    number: int


def _to_wire(value):
    """The student process's side: tensors, dtypes, devices and sizes as marked tuples."""
    if isinstance(value, torch.Tensor):
        data = value.reshape(-1).view(torch.uint8).numpy().tobytes()
        return (TENSOR, str(value.dtype).removeprefix("torch."), tuple(value.shape), data)
    if isinstance(value, torch.dtype):
        return (DTYPE, str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return (DEVICE, str(value))
    if isinstance(value, torch.Size):
        return (SIZE, tuple(value))
    if isinstance(value, _Handle):
        return (HANDLE, *value)
    if isinstance(value, list):
        return [_to_wire(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_to_wire(item) for item in value)
    if isinstance(value, dict):
        return {key: _to_wire(item) for key, item in value.items()}
    return value


def _from_wire(value):
    """The grader's side: rebuild the marked tuples; anything malformed raises ValueError."""
    if isinstance(value, tuple) and value and isinstance(value[0], str) and value[0] in REBUILD:
        try:
            return REBUILD[value[0]](*value[1:])
        except (TypeError, RuntimeError) as error:
            raise ValueError(f"a malformed {value[0]}: {error}") from None
    if isinstance(value, list):
        return [_from_wire(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_from_wire(item) for item in value)
    if isinstance(value, dict):
        return {key: _from_wire(item) for key, item in value.items()}
    return value


class _DataUnpickler(pickle.Unpickler):
    """Unpickles plain data only: no class or function of any module can be named."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"the student process sent a {module}.{name}, which the grader does not accept")


def _resolve_operator(name: str):
    """``torch.ops`` operators do not pickle; they travel as their name, e.g. ``aten._softmax``."""
    found = torch.ops
    for part in name.split("."):
        found = getattr(found, part)
    return found


# The grader's objects whose state the student process sends back after a call (besides tensors).
STATEFUL = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)


class _SentObjects:
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

    def apply(self, changes: list) -> None:
        """Give the grader's objects the state the student's code left in their copies."""
        for kind, number, value in changes:
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
    return _version(tensor), tensor.requires_grad


def _version(tensor: torch.Tensor) -> int:
    """A tensor's version counter (bumped by every in-place change); -1 where it has none."""
    try:
        return tensor._version
    except Exception:
        return -1


class _RequestPickler(pickle.Pickler):
    """The grader's side: a Remote travels as its number, torch operators as their name, and the
    grader's tensors, modules, optimizers, schedulers and lambdas as :class:`_SentObjects` says."""

    def __init__(self, file, sent: _SentObjects | None = None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.sent = sent
        self.parts: set[int] = set()  # ids of the pieces a registered tensor is rebuilt from

    def persistent_id(self, value):
        if isinstance(value, Remote):
            return ("remote", object.__getattribute__(value, "_number"))
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
                return _received, (number,)
        function, arguments, *rest = value.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        self.parts.update(id(part) for part in arguments if isinstance(part, torch.Tensor))  # Parameter.data
        return (_remember, (self.sent.register(value), function, arguments), *rest)


def _dumps(value, sent: _SentObjects | None = None) -> bytes:
    """Pickle a message for the student process (see _RequestPickler)."""
    buffer = io.BytesIO()
    _RequestPickler(buffer, sent).dump(value)
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


def _write_frame(fd: int, payload: bytes, deadline: float | None = None) -> None:
    """Write a frame; TimeoutError past ``deadline`` (a stopped reader does not block the grader)."""
    data = memoryview(struct.pack(">Q", len(payload)) + payload)
    while data:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([], [fd], [], wait)[1]:
                raise TimeoutError
        try:
            data = data[os.write(fd, data[: 1 << 16]):]
        except BlockingIOError:  # the grader's end is non-blocking: wait again
            continue


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    """Read ``size`` bytes; None at end of file; TimeoutError past ``deadline``."""
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None = None) -> bytes | None:
    header = _read_exactly(fd, 8, deadline)
    if header is None:
        return None
    (size,) = struct.unpack(">Q", header)
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"a reply of {size} bytes is larger than the limit of {MAX_MESSAGE_BYTES}")
    return _read_exactly(fd, size, deadline)


# --------------------------------------------------------------------------------------------------
# The student process (runs in the sandbox)
# --------------------------------------------------------------------------------------------------


class _Server:
    """Executes the student's cells and answers the grader's requests about the objects they made."""

    def __init__(self, requests_fd: int, replies_fd: int):
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        from autograder.checks import framework

        config = Config()
        config.HistoryManager.enabled = False
        self.shell = InteractiveShell.instance(config=config)
        self.objects: dict[int, object] = {}
        self.received = _ReceivedObjects()
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.serving: list[int] = []  # the requests being answered, innermost last
        # Taken before any student code runs, which could replace the module's attributes.
        self.forbidden_calls = framework.forbidden_calls
        self.with_dependencies = framework.with_dependencies

    def handle(self, value) -> _Handle:
        number = len(self.objects) + 1
        self.objects[number] = value
        if isinstance(value, types.ModuleType):
            return _Handle(number, "module", str(value.__name__), _imported_submodules(value))
        kind = "class" if isinstance(value, type) else "callable" if callable(value) else "object"
        # Classes and plain functions are named so that the grader may use its own copy of a
        # library's; a bound method is not (its name is its class's function, without the object).
        unbound = isinstance(value, (type, types.FunctionType)) or (
            isinstance(value, types.BuiltinFunctionType) and isinstance(value.__self__, (types.ModuleType, type)))
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if unbound and isinstance(module, str) and isinstance(qualname, str):
            return _Handle(number, kind, f"{module}:{qualname}")
        return _Handle(number, kind, f"{type(value).__name__}")

    def encode(self, value, depth: int = 0, identity: bool = True):
        """``value`` as plain data where it is data, as a reference where it is one of the grader's
        objects (unless ``identity`` is false: then its value), else as a handle."""
        if value is None or type(value) in (bool, int, float, str, bytes, torch.dtype, torch.device, torch.Size):
            return value
        number = self.received.number_of(value) if identity else None
        if number is not None:
            return (GRADER_OBJECT, number)
        if depth > 32:
            return self.handle(value)
        if isinstance(value, torch.Tensor):
            try:
                tensor = value.detach()
                if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
                    return self.handle(value)
                return tensor.cpu().resolve_conj().resolve_neg().contiguous().as_subclass(torch.Tensor)
            except Exception:
                return self.handle(value)
        for kind in (bool, int, float, str):  # subclasses: numpy.float64, IntEnum, ...
            if isinstance(value, kind):
                return kind(value)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, numpy.generic):
            return self.encode(value.item(), depth + 1)
        if isinstance(value, (list, tuple)):  # namedtuples become tuples
            items = [self.encode(item, depth + 1) for item in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):  # OrderedDict (a state_dict) becomes a dict, in order
            keys = [self.encode(key, depth + 1) for key in value]
            if all(isinstance(key, (str, int, float, bool, tuple, type(None))) for key in keys):
                return {key: self.encode(item, depth + 1) for key, item in zip(keys, value.values())}
            return self.handle(value)
        if isinstance(value, Iterator):  # module.parameters() and other generators
            return [self.encode(item, depth + 1) for item in itertools.islice(value, 1_000_000)]
        return self.handle(value)

    def decode_persistent(self, reference: tuple[str, int]):
        kind, number = reference
        return self.objects[number] if kind == "remote" else _GraderFunction(self, number)

    def receive(self):
        """The next message from the grader, (number, request), or None at the end."""
        frame = _read_frame(self.requests_fd)
        if frame is None:
            return None
        unpickler = pickle.Unpickler(io.BytesIO(frame))
        unpickler.persistent_load = self.decode_persistent
        with self.received.arriving() as arrived:
            number, request, forgotten = unpickler.load()
        self.received.forget(forgotten)
        self.received.settle(number, arrived)
        return number, request

    def answer(self, number: int, request: tuple) -> None:
        """Carry out a request and send the reply: ("ok", value) or ("error", info)."""
        self.serving.append(number)
        try:
            reply = ("ok", self.encode(self.respond(request)))
        except BaseException as error:  # the student's code may raise anything, SystemExit included
            reply = ("error", self.describe_error(error))
        finally:
            self.serving.pop()
            self.received.by_request.pop(number, None)
        try:
            payload = pickle.dumps((number, _to_wire(reply)), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as error:
            payload = pickle.dumps((number, _to_wire(("error", self.describe_error(error)))))
        _write_frame(self.replies_fd, payload)

    def call_grader(self, function: int, args: tuple, kwargs: dict):
        """Call a function that lives in the grader; serve the grader's requests meanwhile."""
        message = ("callback", self.encode((function, args, kwargs)))
        _write_frame(self.replies_fd, pickle.dumps((self.serving[-1], _to_wire(message))))
        while True:
            received = self.receive()
            if received is None:
                raise SystemExit("the grader went away")
            number, request = received
            if request[0] == "callback-result":
                _, status, value = request
                if status == "ok":
                    return value
                raise RuntimeError(f"a function of the test raised {value}")
            self.answer(number, request)

    def run_cell(self, source: str) -> None:
        result = self.shell.run_cell(source, store_history=False)
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            raise error

    def lookup(self, name: str):
        if name not in self.shell.user_ns:
            raise NameError(f"name {name!r} is not defined")
        return self.shell.user_ns[name]

    def call(self, number: int, args: tuple, kwargs: dict, forbidden: list, grad: bool, backward: bool = False):
        """Call the student's function (then ``.backward()`` on its result if asked); return the result
        and what the call changed of the grader's objects (the gradients of its arguments included)."""
        guard = self.forbidden_calls(forbidden) if forbidden else contextlib.nullcontext()
        with guard, torch.set_grad_enabled(grad or backward):
            result = self.objects[number](*args, **kwargs)
        if backward:
            result.backward()
        changes = [(kind, number, self.encode(value, identity=False))
                   for kind, number, value in self.received.changes(self.serving[-1])]
        return result, changes

    def respond(self, request: tuple):
        operation, *arguments = request
        if operation == "run":
            return self.run_cell(*arguments)
        if operation == "lookup":
            return self.lookup(*arguments)
        if operation == "call":
            return self.call(*arguments)
        if operation == "getattr":
            number, name = arguments
            return getattr(self.objects[number], name)
        if operation == "setattr":
            number, name, value = arguments
            return setattr(self.objects[number], name, value)
        if operation == "getitem":
            number, key = arguments
            return self.objects[number][key]
        if operation == "len":
            return len(self.objects[arguments[0]])
        if operation == "list":
            return list(itertools.islice(iter(self.objects[arguments[0]]), 1_000_000))
        if operation == "enter":
            return self.objects[arguments[0]].__enter__()
        if operation == "exit":
            return self.objects[arguments[0]].__exit__(None, None, None)
        if operation == "with_dependencies":
            number, references = arguments
            return self.with_dependencies(self.objects[number], **references)
        raise ValueError(f"unknown request {operation!r}")

    def describe_error(self, error: BaseException) -> dict:
        kind = type(error)
        frames = traceback.extract_tb(error.__traceback__)
        student_frames = [frame for frame in frames if not frame.filename.startswith(os.path.dirname(__file__))]
        return {
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "args": self.encode(error.args),
            "message": _safe_str(error),
            "traceback": "".join(traceback.format_list(student_frames[-5:])),
        }


def _safe_str(value) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be printed>"


class _ReceivedObjects:
    """The student process's copies of the grader's objects, by the grader's numbers (see
    :class:`_SentObjects`), and what the student's code changed of them."""

    def __init__(self):
        self.objects: dict[int, object] = {}
        self.numbers: dict[int, int] = {}  # id(object) -> number
        self.baselines: dict[int, object] = {}  # number -> its state when last synchronized
        self.by_request: dict[int, list[int]] = {}  # request -> its modules, optimizers, schedulers
        self.arrivals: list[int] | None = None

    @contextlib.contextmanager
    def arriving(self):
        """While a message is unpickled: collect the numbers of the objects it brings."""
        self.arrivals = arrived = []
        try:
            yield arrived
        finally:
            self.arrivals = None

    def remember(self, number: int, value) -> None:
        self.objects[number] = value
        self.numbers[id(value)] = number
        if self.arrivals is not None:
            self.arrivals.append(number)

    def settle(self, request: int, arrived: list[int]) -> None:
        """Take the state of the objects of a request once they are complete (unpickled)."""
        for number in arrived:
            self.baselines[number] = _state_of(self.objects[number])
        self.by_request.setdefault(request, []).extend(n for n in arrived if not isinstance(self.objects[n], torch.Tensor))

    def forget(self, numbers: list[int]) -> None:
        for number in numbers:
            value = self.objects.pop(number, None)
            if self.numbers.get(id(value)) == number:
                del self.numbers[id(value)]
            self.baselines.pop(number, None)

    def number_of(self, value) -> int | None:
        number = self.numbers.get(id(value))
        return number if number is not None and self.objects.get(number) is value else None

    def changes(self, request: int) -> list[tuple[str, int, object]]:
        """What changed since the grader sent them: of every tensor its data, ``requires_grad`` and
        ``grad``; of this request's modules their ``training`` flag, of its optimizers and
        schedulers their ``state_dict()``."""
        changes = []
        for number, value in self.objects.items():
            if not isinstance(value, torch.Tensor):
                continue
            before, now = self.baselines.get(number), _state_of(value)
            if before is not None and now != before:
                changes += [("data", number, value)] if now[0] != before[0] else []
                changes += [("requires_grad", number, now[1])] if now[1] != before[1] else []
                changes += [("grad", number, value.grad)] if now[2:] != before[2:] else []
            self.baselines[number] = now
        for number in self.by_request.pop(request, []):
            value = self.objects.get(number)
            if isinstance(value, torch.nn.Module):
                if value.training != self.baselines.get(number):
                    changes.append(("training", number, value.training))
            elif value is not None:
                changes.append(("state", number, value.state_dict()))
        return changes


def _state_of(value):
    """What the grader must learn when it changes: a tensor's version, ``requires_grad`` and
    gradient; a module's training flag (its tensors are numbered on their own)."""
    if isinstance(value, torch.Tensor):
        grad = value.grad if value.is_leaf else None
        return (_version(value), value.requires_grad, id(grad) if grad is not None else None,
                _version(grad) if grad is not None else None)
    return value.training if isinstance(value, torch.nn.Module) else None


_SERVER: "_Server | None" = None  # the student process's server (for the two functions below)


def _remember(number: int, function, arguments):
    """Unpickling in the student process: build one of the grader's objects and number it."""
    value = function(*arguments)
    _SERVER.received.remember(number, value)
    return value


def _received(number: int):
    """Unpickling in the student process: a tensor the grader sent before, unchanged."""
    return _SERVER.received.objects[number]


def serve(requests_fd: int, replies_fd: int) -> None:
    """The student process's main loop: answer each request with ("ok", value) or ("error", info)."""
    global _SERVER
    server = _SERVER = _Server(requests_fd, replies_fd)
    _write_frame(replies_fd, pickle.dumps((0, ("ok", "ready"))))  # request 0: started
    while True:
        try:
            received = server.receive()
        except KeyboardInterrupt:  # an interrupt that came late, between two requests
            continue
        if received is None:
            return
        server.answer(*received)


class _GraderFunction:
    """In the student process: a function of the grader's (a test's lambda), called back there."""

    def __init__(self, server: _Server, number: int):
        self.server, self.number = server, number

    def __call__(self, *args, **kwargs):
        return self.server.call_grader(self.number, args, kwargs)


# --------------------------------------------------------------------------------------------------
# The grader's side
# --------------------------------------------------------------------------------------------------


class Remote:
    """Stands for an object of the student's that lives in the student process.

    Calls, attribute reads and writes, indexing, ``len``, iteration and ``with`` blocks are requests
    to that process; what comes back is a value, or another Remote. Nothing else is forwarded: a Remote is always
    true, equal only to itself, and prints as ``<remote ...>``.
    """

    __slots__ = ("_student", "_number", "_kind", "_name")
    FORWARDED_DUNDERS = {"__name__", "__qualname__"}

    def __init__(self, student: "StudentProcess", handle: _Handle):
        object.__setattr__(self, "_student", student)
        object.__setattr__(self, "_number", handle.number)
        object.__setattr__(self, "_kind", handle.kind)
        object.__setattr__(self, "_name", handle.name)

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
        if not isinstance(length, int):
            raise TypeError("the student's object gave a length that is not an integer")
        return length

    def __iter__(self):
        return iter(self._student.request("list", self._number))

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
        return f"<remote {self._kind} {self._name.split(':')[-1]} of the student's notebook>"


def _imported_submodules(module: types.ModuleType) -> tuple[str, ...]:
    """The public submodules of ``module`` that are imported (``import bertlab.attention`` makes
    ``bertlab.attention`` an attribute of ``bertlab``)."""
    prefix = f"{module.__name__}."
    return tuple(sorted(name.removeprefix(prefix) for name in list(sys.modules)
                        if name.startswith(prefix) and name.removeprefix(prefix).isidentifier()
                        and not name.removeprefix(prefix).startswith("_")))[:1000]


def _local_counterpart(handle: _Handle):
    """The grader's own copy of a module, or of a library's function or class; None if none.

    A module comes with the submodules the student's process had imported, so that
    ``bertlab.attention.causal_mask`` works in the grader as it did there.
    """
    name = handle.name
    if handle.kind == "object" or (handle.kind != "module" and ":" not in name):
        return None
    module_name, _, qualname = name.partition(":")
    if module_name.split(".")[0] not in TRUSTED_PACKAGES:
        return None
    for submodule in handle.submodules if handle.kind == "module" else ():
        if submodule.isidentifier() and not submodule.startswith("_"):
            with contextlib.suppress(Exception):
                importlib.import_module(f"{module_name}.{submodule}")
    try:
        found = importlib.import_module(module_name)
        for part in qualname.split(".") if qualname else ():
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    if handle.kind == "module" or (handle.kind == "class") == isinstance(found, type):
        return found
    return None


class StudentProcess:
    """A sandboxed process that runs the student's code cells and serves requests about its objects."""

    def __init__(self, sandbox: Sandbox, limits: Limits):
        self.sandbox, self.limits = sandbox, limits
        self.deadline: float | None = None  # the notebook's; each request also has the cell limit
        self.requests = 0
        self.sent = _SentObjects()  # the grader's objects and functions the student process has
        self.ended_because: str | None = None
        to_student, from_grader = os.pipe()
        from_student, to_grader = os.pipe()
        self.log_path = sandbox.runtime / f"student-process-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.process = sandbox.start(
                [sys.executable, "-c", f"from autograder.verdict import serve; serve({to_student}, {to_grader})"],
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
            log = self.log_path.read_text(errors="replace")[-2000:]
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
            _write_frame(self.requests_fd, _dumps((number, request, self.sent.take_forgotten()), self.sent), deadline)
        except TimeoutError:
            kill(self.process)
            self.ended_because = "it stopped reading the grader's requests"
            raise StudentTimeout(f"the time limit of {self.limits.cell_timeout:g} s per call was reached") from None
        except OSError:
            raise self._ended() from None
        status, value = self._wait_for_reply(number, deadline)
        if status == "ok":
            return self._adopt(value)
        value["args"] = self._adopt(value.get("args"))
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
                frame = _read_frame(self.replies_fd, deadline)
            except ValueError as error:
                raise self._unreadable(error) from None
            if frame is None:
                raise self._ended()
            try:
                reply_number, (status, value) = _from_wire(_DataUnpickler(io.BytesIO(frame)).load())
                if status not in ("ok", "error", "callback") or (status == "error" and not isinstance(value, dict)):
                    raise ValueError(f"unknown reply {status!r}")
            except Exception as error:  # whatever the bytes, the grader only reads plain data
                raise self._unreadable(error) from None
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
            function, args, kwargs = self._adopt(call)
            result = self.sent.callbacks[function](*args, **kwargs)
            payload = _dumps((number, ("callback-result", "ok", result), []), self.sent)
        except Exception as error:
            payload = _dumps((number, ("callback-result", "error", f"{type(error).__name__}: {_safe_str(error)}"), []))
        try:
            _write_frame(self.requests_fd, payload, deadline)
        except TimeoutError:
            raise self._unreadable(TimeoutError("it stopped reading the grader's answers")) from None
        except OSError:
            raise self._ended() from None

    def _unreadable(self, error: Exception) -> StudentProcessEnded:
        kill(self.process)
        self.ended_because = f"it sent a reply the grader cannot read ({type(error).__name__}: {error})"
        return StudentProcessEnded(self.ended_because)

    def _ended(self) -> StudentProcessEnded:
        kill(self.process)
        code = self.process.returncode
        how = f"it was killed by signal {-code}" if code and code < 0 else f"it exited with status {code}"
        if code == -signal.SIGKILL:
            how += " (the memory limit, or a kill)"
        self.ended_because = how
        return StudentProcessEnded(how)

    def _adopt(self, value):
        """Replace the handles in a reply by Remotes, or by the grader's own modules and functions,
        and the references to the grader's objects by those objects."""
        if isinstance(value, _Handle):
            local = _local_counterpart(value)
            return local if local is not None else Remote(self, value)
        if isinstance(value, _GraderObject):
            found = self.sent.get(value.number)
            if found is None:
                raise StudentError("your code returned an object of the test's that no longer exists")
            return found
        if isinstance(value, list):
            return [self._adopt(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._adopt(item) for item in value)
        if isinstance(value, dict):
            return {key: self._adopt(item) for key, item in value.items()}
        return value

    def _rebuild_error(self, info: dict) -> BaseException:
        """The student's exception as the grader raises it: same type when it is a built-in one."""
        from autograder.checks.framework import CheckFailed

        module, _, name = str(info.get("type")).rpartition(".")
        message = str(info.get("message"))
        if info.get("type") == "builtins.KeyboardInterrupt":
            return StudentTimeout(f"the time limit of {self.limits.cell_timeout:g} s per call was reached")
        if info.get("type") == "autograder.checks.framework.CheckFailed":
            return CheckFailed(message)
        kind = getattr(builtins, name, None) if module == "builtins" else None
        if isinstance(kind, type) and issubclass(kind, Exception):
            try:
                error = kind(*info["args"]) if isinstance(info.get("args"), tuple) else kind(message)
            except Exception:
                error = kind(message)
        elif name == "SystemExit":
            error = StudentError("your code called sys.exit() (or raised SystemExit)")
        else:
            error = StudentError(f"{name}: {message}")
        error.student_traceback = str(info.get("traceback", ""))
        return error

    # -- what the grader asks ------------------------------------------------------------------------

    def run_cell(self, source: str) -> None:
        self.request("run", source)

    def lookup(self, name: str):
        return self.request("lookup", name)

    def call(self, target: Remote, args: tuple, kwargs: dict, backward: bool = False):
        from autograder.checks import framework

        forbidden = []
        for guard in framework._active_guards:
            if not guard.suspended:
                forbidden += [_portable(item) for item in [*guard.names_by_object, *guard.qualified_names]]
        result, changes = self.request("call", target._number, args, kwargs, forbidden, torch.is_grad_enabled(),
                                       backward)
        self.sent.apply(changes)
        return result


def _portable(function):
    """A forbidden function as the student process can receive it: itself when it pickles, else
    its "module.qualname" (which the guard also understands)."""
    try:
        _dumps(function)
        return function
    except Exception:
        return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', repr(function))}"


class _StudentNamespace(dict):
    """The globals of the grader's run of the test cells: a name the cells have not defined, and
    that is not a built-in, is looked up among the student's objects."""

    def __init__(self, student: "_Students"):
        super().__init__()
        self.student = student
        self.borrowed: dict[str, object] = {}

    def __missing__(self, name: str):
        if hasattr(builtins, name):
            raise KeyError(name)
        try:
            value = self.student.current().lookup(name)
        except NameError:
            raise KeyError(name) from None
        self.borrowed[name] = value
        self[name] = value
        return value

    def forget_borrowed(self) -> None:
        """Look the student's names up afresh in the next cell (a later cell may redefine them)."""
        for name, value in self.borrowed.items():
            if self.get(name) is value:
                del self[name]
        self.borrowed.clear()


class _Students:
    """The student process of one notebook, restarted (replaying the cells so far) when it ends."""

    def __init__(self, sandbox: Sandbox, limits: Limits, deadline: float):
        self.sandbox, self.limits, self.deadline = sandbox, limits, deadline
        self.process: StudentProcess | None = None
        self.executed: list[str] = []
        self.restarts = 0

    def current(self) -> StudentProcess:
        if self.process is not None and not self.process.ended_because:
            return self.process
        if self.process is not None:
            self.process.close()
            if self.restarts == MAX_RESTARTS:
                raise StudentProcessEnded(f"the Python process running your code ended {MAX_RESTARTS + 1} times")
            self.restarts += 1
        self.process = StudentProcess(self.sandbox, self.limits)
        self.process.deadline = self.deadline
        for source in self.executed:
            with contextlib.suppress(Exception):
                self.process.run_cell(source)
        return self.process

    def run_cell(self, source: str) -> None:
        """Execute one of the student's cells; its errors are the student's business, not a verdict."""
        try:
            self.current().run_cell(source)
        except (StudentTimeout, StudentProcessEnded):
            return  # not replayed after a restart: it would run out of time (or end the process) again
        except Exception:
            pass
        self.executed.append(source)

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


def run_tests(
    steps: list[tuple[str, str]],
    tests: dict[str, str],
    sandbox: Sandbox,
    limits: Limits,
    exercise_names: dict[str, str] | None = None,
) -> dict[str, Outcome]:
    """The grader's own verdict on each test cell of a notebook.

    ``steps`` is the student's notebook in order: ("code", source) for a code cell of the student,
    ("test", grade_id) where a test cell stands. ``tests`` maps each test's grade_id to the
    instructor's source of that cell (hidden tests included); a test the steps do not place runs at
    the end. ``exercise_names`` maps a test's grade_id to the function it grades, so that a missing
    definition reads as ``missing``.
    """
    from bertlab.utils import seed_everything

    seed_everything(0)
    deadline = time.monotonic() + limits.notebook_timeout
    placed = [grade_id for kind, grade_id in steps if kind == "test" and grade_id in tests]
    steps = [*steps, *(("test", grade_id) for grade_id in tests if grade_id not in placed)]
    students = _Students(sandbox, limits, deadline)
    namespace = _StudentNamespace(students)
    outcomes: dict[str, Outcome] = {}
    try:
        for kind, value in steps:
            if kind == "code":
                if time.monotonic() < deadline:
                    students.run_cell(value)
                continue
            if value not in tests or value in outcomes:
                continue
            if time.monotonic() >= deadline:
                outcomes[value] = Outcome("timeout", f"the time limit of the notebook ({limits.notebook_timeout:g} s) was reached")
                continue
            outcomes[value] = _run_test(tests[value], value, namespace, (exercise_names or {}).get(value))
            namespace.forget_borrowed()
    finally:
        students.close()
    return outcomes


def _run_test(source: str, grade_id: str, namespace: _StudentNamespace, exercise: str | None) -> Outcome:
    from IPython.core.inputtransformer2 import TransformerManager

    output = io.StringIO()
    filename = f"<test cell {grade_id}>"
    try:
        code = compile(TransformerManager().transform_cell(source), filename, "exec")
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exec(code, namespace)
    except BaseException as error:  # noqa: B036 -- every exception is a verdict
        return _classify(error, source, filename, exercise, output.getvalue()[:MAX_OUTPUT_CHARS])
    return Outcome("passed", "", output.getvalue()[:MAX_OUTPUT_CHARS])


def _classify(error: BaseException, source: str, filename: str, exercise: str | None, output: str) -> Outcome:
    """The status and the student's message for an exception of a test cell."""
    chain = _exception_chain(error)
    if isinstance(error, StudentTimeout):
        return Outcome("timeout", f"your code ran too long: {error}", output)
    if isinstance(error, StudentProcessEnded):
        return Outcome("error", f"the Python process running your code ended: {error}", output)
    if isinstance(error, KeyboardInterrupt):
        raise error
    if any(_is_memory_error(link) for link in chain):
        return Outcome("error", "your code ran out of memory (the limit per process was reached)", output)
    if isinstance(error, NameError) and exercise and f"'{exercise}'" in str(error):
        return Outcome("missing", f"`{exercise}` is not defined in your notebook", output)
    if isinstance(error, NotImplementedError):
        return Outcome("error", f"not implemented yet (NotImplementedError{': ' + str(error) if str(error) else ''})", output)
    where = _failing_line(error, source, filename)
    if isinstance(error, AssertionError):
        message = str(error) or (f"this assertion failed: {where}" if where else "an assertion failed")
        return Outcome("failed", message, output)
    student_traceback = getattr(error, "student_traceback", "")
    message = f"{type(error).__name__}: {error}" + (f" (in the test line: {where})" if where else "")
    if student_traceback:
        message += "\nwhere your code raised it:\n" + student_traceback
    return Outcome("error", message, output)


def _exception_chain(error: BaseException) -> list[BaseException]:
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _is_memory_error(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or "can't allocate memory" in str(error) or "out of memory" in str(error).lower()


def _failing_line(error: BaseException, source: str, filename: str) -> str:
    """The test cell's line where ``error`` arose, unless it lies in the hidden tests."""
    lines = source.splitlines()
    hidden = set()
    inside = False
    for number, line in enumerate(lines, start=1):
        if "BEGIN HIDDEN TESTS" in line:
            inside = True
        if inside:
            hidden.add(number)
        if "END HIDDEN TESTS" in line:
            inside = False
    numbers = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == filename]
    if not numbers or numbers[-1] in hidden or numbers[-1] > len(lines):
        return ""
    return lines[numbers[-1] - 1].strip()


# --------------------------------------------------------------------------------------------------
# The trusted outcome against the kernel's
# --------------------------------------------------------------------------------------------------


def combine(trusted: Outcome, in_kernel: str | None, cell_problem: str | None) -> tuple[str, str]:
    """The final (status, message) of a test cell.

    ``in_kernel`` is what nbgrader saw in the student's kernel ("passed", "failed", or None when it
    has no result), ``cell_problem`` says how the submission's copy of the test cell was changed.
    The grader's outcome decides the points; these two only mark tampering.
    """
    if cell_problem:
        verdict = "your code passed this test" if trusted.status == "passed" else f"{trusted.status}: {trusted.message}"
        return "tampered", f"{cell_problem}; graded with the instructor's version ({verdict})"
    if in_kernel == "passed" and trusted.status not in ("passed", "timeout"):
        return "tampered", ("your notebook reported this test as passed, but the grader's own run of it "
                            f"did not ({trusted.status}: {trusted.message})")
    return trusted.status, trusted.message
