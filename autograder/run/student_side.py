"""The student process: runs the student's code cells in a sandbox and answers the grader's requests.

Started by :class:`autograder.run.grader_side.StudentProcess` (``serve(requests_fd, replies_fd)`` in a
sandboxed Python), it executes the student's code cells in an IPython shell, one request each, and
replies with what the cell showed (streams, displays, its result, its error: nbformat outputs). It
never receives a test cell. Then the grader asks about the exercises: look up this name, call this
object, read this attribute. Whatever stays here travels as a :class:`autograder.run.wire.Handle` (a
number), values as plain data (:mod:`autograder.run.wire`).

Objects of the grader's (tensors, modules, optimizers) arrive pickled and keep their identity across
requests (:class:`_ReceivedObjects`); after a call, what the student's code changed of them is sent
back. Functions of the grader's test (a lambda) are called back in the grader.

Everything in this process is the student's to change, this module included: the grader trusts none
of it. The forbidden-call rule of the checks (:func:`autograder.checks.framework.forbidden_calls`)
runs here around each call, as a hint for honest mistakes, not as a security measure.
"""

import contextlib
import gc
import io
import itertools
import os
import pickle
import sys
import traceback
import types
from collections.abc import Iterator

import torch

from autograder.bounds import (
    MAX_CELL_OUTPUT_CHARS, MAX_ENCODED_DEPTH, MAX_ERROR_LINE_CHARS, MAX_ERROR_LINES, MAX_ERROR_NAME_CHARS,
    MAX_LABEL_CHARS, MAX_LIST_ITEMS)
from autograder.run.wire import GraderObject, Handle, dumps_reply, read_frame, version, write_frame
from autograder.text import printable, safe_str


class _Outputs:
    """The outputs of the cell being run, as nbformat output dicts, up to MAX_CELL_OUTPUT_CHARS."""

    def __init__(self):
        self.items: list[dict] = []
        self.size = 0

    def add(self, output: dict, size: int) -> None:
        self.size += size
        if self.size <= MAX_CELL_OUTPUT_CHARS or output["output_type"] == "error":  # errors are cut, not dropped
            self.items.append(output)

    def stream(self, name: str, text: str) -> None:
        """Printed text: cut where the cell's outputs reach their cap."""
        text = text[: max(0, MAX_CELL_OUTPUT_CHARS - self.size)]
        self.size += len(text)
        if not text:
            return
        if self.items and self.items[-1]["output_type"] == "stream" and self.items[-1]["name"] == name:
            self.items[-1]["text"] += text
        else:
            self.items.append({"output_type": "stream", "name": name, "text": text})

    def display(self, kind: str, data: dict) -> None:
        data = {str(key): value if isinstance(value, str) else repr(value) for key, value in (data or {}).items()}
        output = {"output_type": kind, "data": data, "metadata": {}}
        self.add(output, sum(len(value) for value in data.values()))


OUTPUTS = _Outputs()  # of the cell being run


class _Stream(io.TextIOBase):
    """sys.stdout or sys.stderr while a cell runs."""

    def __init__(self, name: str):
        self.name = name

    def write(self, text) -> int:
        text = str(text)
        OUTPUTS.stream(self.name, text)
        return len(text)

    def writable(self) -> bool:
        return True


def _shell():
    """An IPython shell whose displays, results and errors become the cell's outputs."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import Type
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:
            OUTPUTS.display("display_data", data)

        def clear_output(self, wait=False) -> None:
            OUTPUTS.items.clear()
            OUTPUTS.size = 0

    class ResultHook(DisplayHook):
        def write_output_prompt(self) -> None:
            pass

        def write_format_data(self, format_dict, md_dict=None) -> None:
            OUTPUTS.display("execute_result", format_dict)

        def finish_displayhook(self) -> None:
            pass

    class Shell(InteractiveShell):
        displayhook_class = Type(ResultHook)
        display_pub_class = Type(Publisher)

        def _showtraceback(self, etype, evalue, stb) -> None:
            lines = [str(line)[:MAX_ERROR_LINE_CHARS] for line in stb[:MAX_ERROR_LINES]]
            OUTPUTS.add({"output_type": "error", "ename": str(getattr(etype, "__name__", etype))[:MAX_ERROR_NAME_CHARS],
                         "evalue": safe_str(evalue)[:MAX_ERROR_LINE_CHARS], "traceback": lines}, sum(map(len, lines)))

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "NoColor"
    return Shell.instance(config=config)


class _Server:
    """Executes the student's cells and answers the grader's requests about the objects they made."""

    def __init__(self, requests_fd: int, replies_fd: int):
        from autograder.checks import framework

        self.shell = _shell()
        self.objects: dict[int, object] = {}
        self.received = _ReceivedObjects()
        self.requests_fd, self.replies_fd = requests_fd, replies_fd
        self.serving: list[int] = []  # the requests being answered, innermost last
        self.released_modules: dict[str, types.ModuleType] = {}  # by the digest of their source
        # Taken before any student code runs, which could replace the module's attributes.
        self.forbidden_calls = framework.forbidden_calls
        self.with_dependencies = framework.with_dependencies

    def handle(self, value) -> Handle:
        number = len(self.objects) + 1
        self.objects[number] = value
        if isinstance(value, types.ModuleType):
            kind, label = "module", getattr(value, "__name__", "")
        else:
            kind = "class" if isinstance(value, type) else "callable" if callable(value) else "object"
            label = getattr(value, "__qualname__", None) if kind != "object" else None
            label = label if isinstance(label, str) else type(value).__name__
        return Handle(number, kind, printable(str(label), MAX_LABEL_CHARS))

    def encode(self, value, depth: int = 0, identity: bool = True):
        """``value`` as plain data where it is data, as a reference where it is one of the grader's
        objects (unless ``identity`` is false: then its value), else as a handle."""
        if value is None or type(value) in (bool, int, float, str, bytes, torch.dtype, torch.device, torch.Size):
            return value
        number = self.received.number_of(value) if identity else None
        if number is not None:
            return GraderObject(number)
        if depth > MAX_ENCODED_DEPTH:
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
            return [self.encode(item, depth + 1) for item in itertools.islice(value, MAX_LIST_ITEMS)]
        return self.handle(value)

    def decode_persistent(self, reference: tuple):
        kind, *rest = reference
        if kind == "released":
            return self.released(*rest)
        return self.objects[rest[0]] if kind == "remote" else _GraderFunction(self, rest[0])

    def released(self, module: str, qualname: str, digest: str, source: str | None):
        """A reference the grader released (:mod:`autograder.run.stand_ins`): from its module's source, run once
        into a module object of its own (``sys.modules`` keeps the stand-ins)."""
        if digest not in self.released_modules:
            namespace = types.ModuleType(module)
            namespace.__dict__["__builtins__"] = __builtins__
            exec(compile(source, f"<{module}, released by the grader>", "exec"), namespace.__dict__)
            self.released_modules[digest] = namespace
        found = self.released_modules[digest]
        for part in qualname.split("."):
            found = getattr(found, part)
        return found

    def receive(self):
        """The next message from the grader, (number, request), or None at the end."""
        frame = read_frame(self.requests_fd)
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
            payload = dumps_reply((number, reply))
        except BaseException as error:
            payload = dumps_reply((number, ("error", self.describe_error(error))))
        write_frame(self.replies_fd, payload)

    def call_grader(self, function: int, args: tuple, kwargs: dict):
        """Call a function that lives in the grader; serve the grader's requests meanwhile."""
        write_frame(self.replies_fd,
                    dumps_reply((self.serving[-1], ("callback", self.encode((function, args, kwargs))))))
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

    def run_cell(self, source: str) -> list[dict]:
        """Execute one of the student's cells; return its outputs (its errors among them)."""
        OUTPUTS.items, OUTPUTS.size = [], 0
        streams = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream("stdout"), _Stream("stderr")
        try:
            self.shell.run_cell(source, store_history=False)
        finally:
            sys.stdout, sys.stderr = streams
        return OUTPUTS.items

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
            return list(itertools.islice(iter(self.objects[arguments[0]]), MAX_LIST_ITEMS))
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
        grader = os.path.dirname(os.path.dirname(__file__))  # the autograder package, every room of it
        student_frames = [frame for frame in frames if not frame.filename.startswith(grader)]
        return {
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "args": self.encode(error.args),
            "message": safe_str(error),
            "traceback": "".join(traceback.format_list(student_frames[-5:])),
        }


class _ReceivedObjects:
    """The student process's copies of the grader's objects, by the grader's numbers (see
    :class:`autograder.run.grader_side.SentObjects`), and what the student's code changed of them."""

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
        self.by_request.setdefault(request, []).extend(n for n in arrived
                                                       if not isinstance(self.objects[n], torch.Tensor))

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
        return (version(value), value.requires_grad, id(grad) if grad is not None else None,
                version(grad) if grad is not None else None)
    return value.training if isinstance(value, torch.nn.Module) else None


_SERVER: "_Server | None" = None  # this process's server (for the two functions below)


def remember(number: int, function, arguments):
    """Unpickling here: build one of the grader's objects and number it."""
    value = function(*arguments)
    _SERVER.received.remember(number, value)
    return value


def received(number: int):
    """Unpickling here: a tensor the grader sent before, unchanged."""
    return _SERVER.received.objects[number]


def serve(requests_fd: int, replies_fd: int) -> None:
    """The student process's main loop: answer each request with ("ok", value) or ("error", info).

    What the process holds before the first request (PyTorch, IPython, this module) lives as long as
    the process: the garbage collector leaves it alone (``gc.freeze``), which spared each full
    collection during the student's cells a walk through 200,000 objects (0.1 s; 8 of them in a
    chapter)."""
    global _SERVER
    server = _SERVER = _Server(requests_fd, replies_fd)
    gc.freeze()
    write_frame(replies_fd, dumps_reply((0, ("ok", "ready"))))  # request 0: started
    while True:
        try:
            message = server.receive()
        except KeyboardInterrupt:  # an interrupt that came late, between two requests
            continue
        if message is None:
            return
        server.answer(*message)


class _GraderFunction:
    """Here: a function of the grader's (a test's lambda), called back there."""

    def __init__(self, server: _Server, number: int):
        self.server, self.number = server, number

    def __call__(self, *args, **kwargs):
        return self.server.call_grader(self.number, args, kwargs)
