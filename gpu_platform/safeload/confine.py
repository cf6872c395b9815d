"""Paths named by someone the platform does not trust, confined to the root they belong under.

A workload's `result.json` names its log and outputs, a feed folder lists files, the evidence
store indexes refs and holds: each such path is read only when

- its real path (`os.path.realpath`: every `..` and every symbolic link resolved) lies under the
  real path of its root (a relative path is taken from the root), so `../other-tenant/secret`,
  `/proc/self/environ` or a link inside the root that points out of it are refused;
- it is a regular file, checked with `fstat` on a descriptor opened `O_NOFOLLOW | O_NONBLOCK`:
  a FIFO cannot block the reader, a device, socket or directory is refused, and a last component
  swapped for a link after the check is refused by the open itself;
- on Linux, the opened descriptor's own path (`/proc/self/fd/N`) is still under the root, so a
  directory swapped for a link between the check and the open is caught too.

Deleting goes through `unlink_confined`: every directory below the root is opened with
`O_NOFOLLOW`, so a symlinked directory never leads a delete outside the root, and only a regular
file (never a link's target) is removed.

`PathRefused` names the field, the path and why: `outputs.model '/proc/self/environ' is outside
the output directory /w/out/train-1`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHOWN = 200


class PathRefused(ValueError):
    """A path that may not be read (or deleted): `field` names where it came from, `why` the rule."""

    def __init__(self, field: str, path: str | Path, why: str):
        self.field = field
        self.path = str(path)
        self.why = why
        shown = self.path if len(self.path) <= _SHOWN else self.path[:_SHOWN] + "..."
        super().__init__(f"{field} {shown!r} {why}")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confine(path: str | Path, root: str | Path, *, field: str = "path", root_name: str = "the root") -> Path:
    """The real path of `path` (a relative path is taken from `root`), refused (PathRefused)
    unless it lies under the real path of `root`. Says which rule: outside, or a link leading out."""
    text = os.fspath(path)
    if "\x00" in text:
        raise PathRefused(field, text.replace("\x00", "\\0"), "contains a NUL character")
    if not text:
        raise PathRefused(field, text, "is empty")
    root_abs = os.path.abspath(root)
    root_real = os.path.realpath(root)
    joined = text if os.path.isabs(text) else os.path.join(root_abs, text)
    lexical = os.path.normpath(joined)
    real = os.path.realpath(joined)
    if not _under(real, root_real):
        if _under(lexical, root_abs) or _under(lexical, root_real):
            raise PathRefused(field, text, f"leads outside {root_name} {root_abs} through a symbolic link (to {real})")
        raise PathRefused(field, text, f"is outside {root_name} {root_abs}")
    return Path(real)


def _fd_path(fd: int) -> str | None:
    """The path the kernel has for an open descriptor (Linux), else None."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _open_regular_fd(real: str, shown: str, field: str, root_real: str | None, root_name: str) -> int:
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except FileNotFoundError:
        raise PathRefused(field, shown, "does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathRefused(field, shown, "is a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:
            raise PathRefused(field, shown, "is not a regular file (a socket or a device)") from None
        raise PathRefused(field, shown, f"cannot be opened: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PathRefused(field, shown, f"is not a regular file ({file_kind(mode)})")
        if root_real is not None:
            where = _fd_path(fd)
            if where is not None and where.startswith("/") and not _under(where, root_real):
                raise PathRefused(field, shown, f"moved outside {root_name} while being opened (now {where})")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_confined(
    path: str | Path, root: str | Path, *, field: str = "path", root_name: str = "the root"
) -> BinaryIO:
    """The file at `path`, confined to `root` (see `confine`), opened for binary reading: refused
    (PathRefused) unless it is a regular file there. The caller closes it (use `with`)."""
    real = confine(path, root, field=field, root_name=root_name)
    fd = _open_regular_fd(str(real), os.fspath(path), field, os.path.realpath(root), root_name)
    return os.fdopen(fd, "rb")


def open_regular(path: str | Path, *, field: str = "path") -> BinaryIO:
    """`path` opened for binary reading when it is a regular file (symbolic links followed; no
    root): a FIFO, device or socket is refused (PathRefused) without blocking."""
    text = os.fspath(path)
    return os.fdopen(_open_regular_fd(os.path.realpath(text), text, field, None, ""), "rb")


def read_confined(
    path: str | Path, root: str | Path, max_bytes: int, *, field: str = "path", root_name: str = "the root"
) -> bytes:
    """The bytes of a confined regular file; refused when larger than `max_bytes`."""
    with open_confined(path, root, field=field, root_name=root_name) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PathRefused(field, path, f"is larger than the limit of {max_bytes:,} bytes")
    return data


def check_confined(
    path: str | Path, root: str | Path, *, field: str = "path", root_name: str = "the root"
) -> Path:
    """`open_confined` without reading: the real path of a confined regular file (for readers that
    take a path, such as Parquet and DuckDB; the file is checked, then opened by them)."""
    with open_confined(path, root, field=field, root_name=root_name):
        return confine(path, root, field=field, root_name=root_name)


@contextlib.contextmanager
def _dir_chain(root: str, parts: tuple[str, ...], field: str, shown: str) -> Iterator[int]:
    """A descriptor of root/parts..., every component below the root opened with O_NOFOLLOW."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if part in ("", ".", ".."):
                raise PathRefused(field, shown, f"has a {part or 'empty'!r} component")
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise PathRefused(field, shown, f"passes through {part!r}, which is not a directory "
                                      "(a symbolic link is never followed)") from None
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def unlink_confined(path: str | Path, root: str | Path, *, field: str = "path") -> bool:
    """Remove the regular file `path` under `root` without following any link: every directory
    below the root is opened O_NOFOLLOW and the file is removed relative to its directory's
    descriptor. A symbolic link or special file is refused (PathRefused), never its target touched.
    False when the file is already gone."""
    root_real = os.path.realpath(root)
    text = os.fspath(path)
    absolute = os.path.normpath(text if os.path.isabs(text) else os.path.join(root_real, text))
    base = root_real if _under(absolute, root_real) else os.path.abspath(root)
    if not _under(absolute, base) or absolute == base:
        raise PathRefused(field, text, f"is outside {base}")
    parts = tuple(Path(os.path.relpath(absolute, base)).parts)
    with _dir_chain(base, parts[:-1], field, text) as dfd:
        try:
            st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(field, text, f"is {file_kind(st.st_mode)}: not removed")
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        except FileNotFoundError:
            return False
    return True


def lstat_kind(path: str | Path) -> str | None:
    """None for a regular file (not a link), else what it is ("a symbolic link", "a FIFO", ...,
    or "missing")."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    return None if stat.S_ISREG(mode) else file_kind(mode)
