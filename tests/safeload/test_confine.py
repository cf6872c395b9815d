"""gpu_platform.safeload.confine: reading and deleting paths someone else named, only inside a
root and only regular files (issue 24, class 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_platform.safeload import (
    InputError,
    PathRefused,
    confine,
    open_confined,
    read_bytes,
    read_confined,
    unlink_confined,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sub").mkdir(parents=True)
    (r / "sub" / "a.txt").write_text("inside\n")
    (tmp_path / "outside.txt").write_text("outside\n")
    return r


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/proc/self/environ", "is outside the root"),
        ("../outside.txt", "is outside the root"),
        ("sub/../../outside.txt", "is outside the root"),
        ("/etc/passwd", "is outside the root"),
        ("", "is empty"),
        ("a\x00b", "contains a NUL character"),
    ],
)
def test_paths_out_of_the_root_are_refused_naming_field_path_and_why(root: Path, path: str, why: str):
    with pytest.raises(PathRefused) as err:
        confine(path, root, field="outputs.model")
    assert str(err.value).startswith("outputs.model '") and why in str(err.value)


def test_links_are_followed_only_while_they_stay_inside(root: Path, tmp_path: Path):
    (root / "in-link").symlink_to(root / "sub" / "a.txt")
    (root / "out-link").symlink_to(tmp_path / "outside.txt")
    (root / "out-dir").symlink_to(tmp_path)
    assert read_confined("in-link", root, 100) == b"inside\n"
    assert read_confined(root / "sub" / "./a.txt", root, 100) == b"inside\n"
    for name in ("out-link", "out-dir/outside.txt"):
        with pytest.raises(PathRefused, match="leads outside the root .* through a symbolic link"):
            read_confined(name, root, 100)


def test_special_files_are_refused_without_blocking(root: Path):
    os.mkfifo(root / "fifo")
    with pytest.raises(PathRefused, match=r"is not a regular file \(a FIFO\)"):
        open_confined("fifo", root)
    with pytest.raises(PathRefused, match=r"is not a regular file \(a directory\)"):
        open_confined("sub", root)
    with pytest.raises(PathRefused, match="does not exist"):
        open_confined("missing", root)


def test_a_request_file_that_is_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path: Path):
    fifo = tmp_path / "request.yaml"
    os.mkfifo(fifo)
    # through the CLI first, in a subprocess: exit 2 at once (a blocked open hits the timeout)
    out = subprocess.run(
        [sys.executable, "-m", "gpu_platform.cli", "request", "validate", str(fifo)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 2 and "not a regular file (a FIFO)" in out.stdout + out.stderr
    with pytest.raises(InputError, match=r"cannot read: is not a regular file \(a FIFO\)"):
        read_bytes(fifo, 1000)
    with pytest.raises(InputError, match=r"is not a regular file \(a character device\)"):
        read_bytes("/dev/zero", 1000)


def test_unlink_never_follows_a_link(root: Path, tmp_path: Path):
    (root / "linked").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(PathRefused, match="which is not a directory"):
        unlink_confined(root / "linked" / "outside.txt", root)
    (root / "file-link").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(PathRefused, match="is a symbolic link: not removed"):
        unlink_confined(root / "file-link", root)
    with pytest.raises(PathRefused, match="is outside"):
        unlink_confined(tmp_path / "outside.txt", root)
    assert (tmp_path / "outside.txt").read_text() == "outside\n"
    assert unlink_confined(root / "sub" / "a.txt", root) and not (root / "sub" / "a.txt").exists()
    assert not unlink_confined(root / "sub" / "a.txt", root)
