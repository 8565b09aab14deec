"""The wire between the grader and the student process: frames, and the plain data replies carry.

Both sides exchange length-prefixed frames over two pipes (:func:`write_frame`, :func:`read_frame`).
The grader's requests are pickles (the student process may unpickle what the grader sends). The
student process's replies are plain data only: None, bool, int, float, str, bytes, and lists,
tuples and dicts of them, unpickled by :class:`DataUnpickler`, which refuses every class and
function. Tensors, dtypes, devices, sizes, handles on the student's objects and references to the
grader's own objects travel as tuples that start with a marker and are rebuilt by :func:`decode`
(a student who returns such a tuple on purpose only gets back a tensor, or a handle, of their own).

Nothing in a reply names grader code: a handle is a number in the student process and a label for
messages, never resolved by name; an exception is rebuilt only as one of the types of
:data:`EXCEPTION_TYPES`, with plain-data arguments. Every reply is bounded: its size
(:data:`~autograder.bounds.MAX_REPLY_BYTES`, checked before it is read) and the work of decoding it
(:data:`~autograder.bounds.MAX_DECODED_ITEMS` values, however the pickle shares them, and
:data:`~autograder.bounds.MAX_REPLY_DEPTH` levels).
"""

import io
import os
import pickle
import select
import struct
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from autograder.bounds import MAX_DECODED_ITEMS, MAX_LABEL_CHARS, MAX_REPLY_DEPTH, MAX_UNREADABLE_REPLY_CHARS
from autograder.text import printable

WRITE_CHUNK_BYTES = 1 << 16  # written to a pipe at a time (not a bound: a message of any size goes in chunks)
TENSOR, DTYPE, DEVICE, SIZE, HANDLE = "<tensor>", "<dtype>", "<device>", "<size>", "<handle>"
GRADER_OBJECT = "<grader-object>"  # an object the grader sent, by its number: the grader's own comes back

#: The exceptions the grader rebuilds with their type (checks and tests catch them by type); any
#: other exception of the student's code arrives as a StudentError naming its type.
EXCEPTION_TYPES = {f"builtins.{kind.__name__}": kind for kind in (
    ArithmeticError, AssertionError, AttributeError, BufferError, EOFError, FloatingPointError, ImportError,
    IndexError, KeyError, LookupError, MemoryError, ModuleNotFoundError, NameError, NotImplementedError,
    OSError, OverflowError, RecursionError, RuntimeError, StopIteration, TypeError, UnboundLocalError,
    UnicodeError, ValueError, ZeroDivisionError)}


class Handle(NamedTuple):
    """An object that stays in the student process: its number there, its kind and a label."""

    number: int
    kind: str  # module, class, callable or object
    label: str  # for messages only (a function's name, an object's type): never looked up


class GraderObject(NamedTuple):
    """In a reply: the grader's object of this number (the student's code returned its copy)."""

    number: int


class UnreadableReply(ValueError):
    """A reply that is not plain data, or is larger than its bounds."""


# --------------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------------


def write_frame(fd: int, payload: bytes, deadline: float | None = None) -> None:
    """Write a frame; TimeoutError past ``deadline`` (a stopped reader does not block the writer)."""
    data = memoryview(struct.pack(">Q", len(payload)) + payload)
    while data:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([], [fd], [], wait)[1]:
                raise TimeoutError
        try:
            data = data[os.write(fd, data[:WRITE_CHUNK_BYTES]):]
        except BlockingIOError:  # a non-blocking end: wait again
            continue


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    """Read ``size`` bytes; None at end of file; TimeoutError past ``deadline``."""
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        try:
            chunk = os.read(fd, min(remaining, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None, limit: int | None = None) -> bytes | None:
    """The next frame; None at end of file; UnreadableReply when it announces more than ``limit`` bytes."""
    header = _read_exactly(fd, 8, deadline)
    if header is None:
        return None
    (size,) = struct.unpack(">Q", header)
    if limit is not None and size > limit:
        raise UnreadableReply(f"a reply of {size} bytes is larger than the limit of {limit}")
    return _read_exactly(fd, size, deadline)


# --------------------------------------------------------------------------------------------------
# Replies: the student process's side
# --------------------------------------------------------------------------------------------------


def to_wire(value):
    """Tensors, dtypes, devices, sizes and handles as marked tuples (the student process's side)."""
    if isinstance(value, torch.Tensor):
        data = value.reshape(-1).view(torch.uint8).numpy().tobytes()
        return (TENSOR, str(value.dtype).removeprefix("torch."), tuple(value.shape), data)
    if isinstance(value, torch.dtype):
        return (DTYPE, str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return (DEVICE, str(value))
    if isinstance(value, torch.Size):
        return (SIZE, tuple(value))
    if isinstance(value, Handle):
        return (HANDLE, *value)
    if isinstance(value, GraderObject):
        return (GRADER_OBJECT, value.number)
    if isinstance(value, list):
        return [to_wire(item) for item in value]
    if isinstance(value, tuple):
        return tuple(to_wire(item) for item in value)
    if isinstance(value, dict):
        return {key: to_wire(item) for key, item in value.items()}
    return value


def dumps_reply(value) -> bytes:
    return pickle.dumps(to_wire(value), protocol=pickle.HIGHEST_PROTOCOL)


# --------------------------------------------------------------------------------------------------
# Replies: the grader's side
# --------------------------------------------------------------------------------------------------


class DataUnpickler(pickle.Unpickler):
    """Unpickles plain data only: no class or function of any module can be named."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"the student process sent a {module}.{name}, which the grader does not accept")


def _tensor(dtype_name, shape, data) -> torch.Tensor:
    dtype = _dtype(dtype_name)
    if not isinstance(shape, tuple) or not isinstance(data, bytes) or not all(type(n) is int and n >= 0 for n in shape):
        raise UnreadableReply(f"not a tensor: shape {shape!r}")
    count = 1
    for n in shape:
        count *= n
    if count * dtype.itemsize != len(data):
        raise UnreadableReply(f"a tensor of shape {shape} and dtype {dtype} cannot hold {len(data)} bytes")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


_DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


def _dtype(name) -> torch.dtype:
    if not isinstance(name, str) or name not in _DTYPES:
        raise UnreadableReply(f"not a dtype: {name!r}"[:MAX_UNREADABLE_REPLY_CHARS])
    return _DTYPES[name]


def _device(name) -> torch.device:
    if not isinstance(name, str) or len(name) > 40:
        raise UnreadableReply("not a device")
    return torch.device(name)


def _size(dimensions) -> torch.Size:
    if not isinstance(dimensions, tuple) or not all(type(n) is int for n in dimensions):
        raise UnreadableReply("not a size")
    return torch.Size(dimensions)


def _handle(number, kind, label) -> Handle:
    if type(number) is not int or kind not in ("module", "class", "callable", "object") or not isinstance(label, str):
        raise UnreadableReply("not a handle")
    return Handle(number, kind, printable(label, MAX_LABEL_CHARS))


def _grader_object(number) -> GraderObject:
    if type(number) is not int:
        raise UnreadableReply("not a reference")
    return GraderObject(number)


REBUILD = {TENSOR: _tensor, DTYPE: _dtype, DEVICE: _device, SIZE: _size, HANDLE: _handle, GRADER_OBJECT: _grader_object}
PLAIN = (type(None), bool, int, float, str, bytes)


def decode(frame: bytes, adopt: Callable = lambda value: value):
    """A reply's value: plain data with tensors, dtypes, devices and sizes rebuilt, and each Handle
    and GraderObject passed through ``adopt`` (the grader's side turns them into Remotes and the grader's
    objects). Raises UnreadableReply for anything else, or past the bounds."""
    try:
        raw = DataUnpickler(io.BytesIO(frame)).load()
    except Exception as error:  # whatever the bytes, the grader only reads plain data
        raise UnreadableReply(f"{type(error).__name__}: {error}"[:MAX_UNREADABLE_REPLY_CHARS]) from None
    budget = [MAX_DECODED_ITEMS]

    def rebuild(value, depth: int):
        budget[0] -= 1
        if budget[0] < 0:
            raise UnreadableReply(f"a reply that decodes into more than {MAX_DECODED_ITEMS} values")
        if depth > MAX_REPLY_DEPTH:
            raise UnreadableReply(f"a reply nested more than {MAX_REPLY_DEPTH} levels deep")
        if type(value) in PLAIN:
            return value
        if type(value) is tuple and value and type(value[0]) is str and value[0] in REBUILD:
            parts = [rebuild(item, depth + 1) for item in value[1:]]
            try:
                marked = REBUILD[value[0]](*parts)
            except (TypeError, RuntimeError) as error:
                raise UnreadableReply(f"a malformed {value[0]}: {error}"[:MAX_UNREADABLE_REPLY_CHARS]) from None
            return adopt(marked)
        if type(value) is list:
            return [rebuild(item, depth + 1) for item in value]
        if type(value) is tuple:
            return tuple(rebuild(item, depth + 1) for item in value)
        if type(value) is dict:
            rebuilt = {}
            for key, item in value.items():
                key = rebuild(key, depth + 1)
                if not isinstance(key, (*PLAIN, tuple)):
                    raise UnreadableReply("a dict key that is not plain data")
                rebuilt[key] = rebuild(item, depth + 1)
            return rebuilt
        raise UnreadableReply(f"a {type(value).__name__}, which is not plain data")

    try:
        return rebuild(raw, 0)
    except RecursionError:
        raise UnreadableReply("a reply nested too deeply") from None
    except TypeError as error:  # an unhashable key
        raise UnreadableReply(f"{error}"[:MAX_UNREADABLE_REPLY_CHARS]) from None


def version(tensor: torch.Tensor) -> int:
    """A tensor's version counter (bumped by every in-place change); -1 where it has none."""
    try:
        return tensor._version
    except Exception:
        return -1
