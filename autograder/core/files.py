"""Writing the grader's files so that a reader finds the old file or the whole new one, never part of one."""

import os
import stat
import tempfile
from pathlib import Path

PRIVATE, SHARED = 0o600, 0o644  # files for the instructor only; files handed to students


def write_atomically(path: Path, data: bytes | str, mode: int = PRIVATE) -> None:
    """Write a file so that it is either the old one or the complete new one, even after a crash; its
    permissions are ``mode``. The bytes go to a hidden temporary file in the same folder, which then takes
    the file's place in one step (``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            # Text from a submission may hold what UTF-8 cannot encode (a file name's undecodable byte).
            file.write(data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    """Give ``path`` the bytes ``data`` unless it holds them already (:func:`write_atomically`, so that a
    reader running meanwhile, a book build executing the chapters, never misses the file); return whether
    it wrote. A file replaced keeps its permissions; a new one gets ``mode``."""
    if path.is_file() and path.read_bytes() == data:
        return False
    write_atomically(path, data, stat.S_IMODE(path.stat().st_mode) if path.exists() else mode)
    return True


def replace_if_changed(source: Path, destination: Path) -> bool:
    """:func:`write_if_changed` with the bytes of ``source``; a new ``destination`` gets its permissions."""
    return write_if_changed(destination, source.read_bytes(), stat.S_IMODE(source.stat().st_mode))
