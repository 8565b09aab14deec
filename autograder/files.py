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


def replace_if_changed(source: Path, destination: Path) -> bool:
    """Give ``destination`` the bytes of ``source`` unless it holds them already (:func:`write_atomically`);
    return whether it wrote. A file replaced keeps its permissions; a new one gets the source's, so that
    a reader running meanwhile (a book build executing the chapters) never misses the file."""
    content = source.read_bytes()
    if destination.is_file() and destination.read_bytes() == content:
        return False
    write_atomically(destination, content, stat.S_IMODE((destination if destination.exists() else source).stat().st_mode))
    return True
