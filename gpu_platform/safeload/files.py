"""Writing output files without following links someone planted in the output directory.

Every command that writes files (`report --out`, `deploy render --out`, `kueue export --out`,
`k8s render --out`, ...) writes through `OutputDir`:

- the directory is created (with its parents) or checked: it must be a directory, and its last
  component must not be a symbolic link (`O_DIRECTORY | O_NOFOLLOW`); every file is then written
  relative to that one open descriptor, so a directory swapped afterwards does not redirect it;
- each file is written to a fresh temporary name in the directory (`O_CREAT | O_EXCL |
  O_NOFOLLOW`), flushed, then renamed over its name: a planted link of that name is replaced by
  the new file and its target is never opened, let alone written; a directory, FIFO or device of
  that name is refused;
- an `OSError` on the way (ENOSPC, EACCES, EROFS, ENOTDIR, ...) becomes one `WriteRefused` line
  naming the path and the reason, and the temporary file is removed.

`write_file(path, data)` writes one file the same way, into the directory holding it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WriteRefused(OSError):
    """An output that could not be written: one line, `cannot write PATH: why`."""

    def __init__(self, path: str | Path, why: str):
        self.path = str(path)
        self.why = why
        super().__init__(f"cannot write {self.path}: {why}")

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.why}"


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class OutputDir:
    """An output directory, created or checked once; `write(name, data)` puts one file in it.

    Use as a context manager (or call `close()`): it holds the directory open."""

    def __init__(self, path: str | Path, mode: int = 0o755):
        self.path = Path(path)
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            try:
                self.path.mkdir(parents=True, mode=mode, exist_ok=True)
            except OSError as exc:
                raise WriteRefused(self.path, _why(exc)) from None
            st = os.lstat(self.path)
        except OSError as exc:
            raise WriteRefused(self.path, _why(exc)) from None
        if stat.S_ISLNK(st.st_mode):
            raise WriteRefused(self.path, "is a symbolic link; name the directory it points to, or a new one")
        if not stat.S_ISDIR(st.st_mode):
            raise WriteRefused(self.path, "exists and is not a directory")
        try:
            self.fd = os.open(self.path, _DIR_FLAGS)
        except OSError as exc:
            raise WriteRefused(self.path, _why(exc)) from None
        self.written: list[Path] = []

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def write(self, name: str, data: str | bytes, mode: int = 0o644) -> Path:
        """Write `data` (text as UTF-8) to `name`, one component inside the directory; returns
        its path. A link of that name is replaced, never followed."""
        target = self.path / name
        if not name or name in (".", "..") or "/" in name or "\x00" in name:
            raise WriteRefused(target, "not a plain file name")
        payload = data.encode("utf-8") if isinstance(data, str) else data
        try:
            existing = os.lstat(name, dir_fd=self.fd)
        except FileNotFoundError:
            existing = None
        except OSError as exc:
            raise WriteRefused(target, _why(exc)) from None
        if existing is not None and not (stat.S_ISREG(existing.st_mode) or stat.S_ISLNK(existing.st_mode)):
            raise WriteRefused(target, "exists and is not a regular file")
        tmp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, _NEW_FLAGS, mode, dir_fd=self.fd)
        except OSError as exc:
            raise WriteRefused(target, _why(exc)) from None
        try:
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise WriteRefused(target, _why(exc)) from None
        self.written.append(target)
        return target


def write_file(path: str | Path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write one file at `path` (its directory created or checked) without following a link there."""
    p = Path(path)
    with OutputDir(p.parent if str(p.parent) else Path(".")) as out:
        return out.write(p.name, data, mode)
