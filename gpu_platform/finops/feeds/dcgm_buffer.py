"""The bytes of one piece of dcgm-exporter text, and the compiled scan's helpers.

`_Buffer` holds a piece without copying it and hands out zero-copy Arrow string views of its
bytes (written by the C extension `_dcgm_scan` when ``compiled``, else by numpy); `_numbered` writes
numbered reason texts the same two ways; `_encode` dictionary-encodes a string column. The C
extension is built at install when a C compiler is present (setup.py); `_dcgm_scan` is None when it
was not, or when it was built from an older source (its ``ABI``), and the numpy scan is used.

May import nothing of the project (numpy, polars, pyarrow and the extension only).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pac

try:
    from gpu_platform.finops.feeds import _dcgm_scan
except ImportError:  # installed without a C compiler: the numpy scan does the same, slower
    _dcgm_scan = None
if _dcgm_scan is not None and getattr(_dcgm_scan, "ABI", 1) != 2:
    _dcgm_scan = None  # built from an older source (rebuilt by `make install`): not used

_HASH_SEED = int.from_bytes(os.urandom(8), "little")
"""Seeds the compiled scan's hash tables (so that no input can be made to collide in them)."""


# _LOW_BYTES32[k] / _LOW_BYTES64[k]: a little-endian word whose first k bytes are 0xFF
_LOW_BYTES32 = np.array([(1 << (8 * k)) - 1 for k in range(5)], dtype=np.uint32)


_LOW_BYTES64 = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


class _Buffer:
    """One chunk of input as bytes, and every (unaligned) little-endian uint32 and uint64 of it.

    The input is not copied (a chunk of under 16 bytes is padded with newlines: ``length`` is
    the chunk's own, ``size`` the padded one): a view near the end reads its bytes from a
    padded copy of the last 16.
    """

    def __init__(self, data: bytes | memoryview, *, compiled: bool) -> None:
        self.compiled = compiled  # the compiled scan's helpers write the views
        self.length = len(data)
        if len(data) < 16:
            data = bytes(data) + b"\n" * (16 - len(data))
        self.data = data
        self.size = len(data)
        self.bytes = np.frombuffer(data, dtype=np.uint8)
        self.words = np.ndarray(shape=(self.size - 3,), dtype="<u4", buffer=data, strides=(1,))
        self.dwords = np.ndarray(shape=(self.size - 7,), dtype="<u8", buffer=data, strides=(1,))
        self._tail = np.frombuffer(bytes(data[-16:]) + bytes(16), dtype=np.uint8)

    def strings(self, starts: np.ndarray, lengths: np.ndarray) -> pl.Series:
        """Zero-copy strings ``data[start:start+length]`` as a String Series (Arrow string_view).

        Each view is four 32-bit words: the length, then the bytes themselves when <= 12, else
        a 4-byte prefix, buffer 0 and the offset (Arrow reads them as int32, so a chunk is at most
        ``_MAX_CHUNK``, 1 GiB). No string is copied. A view is built as two uint64 words from
        two unaligned loads (the bytes at ``start`` and at ``start + 4``) and masks (the compiled
        scan's module writes them in one loop).
        """
        n = len(starts)
        if self.compiled:
            views = _dcgm_scan.views(
                self.data, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(lengths, dtype=np.int64)
            )
            return pl.Series(
                pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(self.data)])
            )
        lengths = np.maximum(lengths, 0)
        views = np.empty((n, 2), dtype="<u8")
        safe = np.minimum(starts, self.size - 12)
        short = lengths <= 12
        head = self.words[safe] & _LOW_BYTES32[np.minimum(lengths, 4)]
        views[:, 0] = head
        views[:, 0] <<= 32
        views[:, 0] |= lengths.astype(np.uint64)
        if short.all():
            views[:, 1] = self.dwords[safe + 4] & _LOW_BYTES64[np.clip(lengths - 4, 0, 8)]
        elif not short.any():
            views[:, 1] = starts.astype(np.uint64) << 32
        else:
            views[:, 1] = np.where(
                short,
                self.dwords[safe + 4] & _LOW_BYTES64[np.clip(lengths - 4, 0, 8)],
                starts.astype(np.uint64) << 32,
            )
        late = np.flatnonzero(safe != starts)
        if len(late):
            # a short string within 12 bytes of the end (a long one starts earlier than that)
            words = views.view("<u4")
            for i in late.tolist():
                k = int(lengths[i])
                lo = int(starts[i]) - (self.size - 16)
                inline = np.zeros(12, dtype=np.uint8)
                inline[:k] = self._tail[lo : lo + k]
                words[i, 1:] = inline.view("<u4")
        arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(self.data)])
        return pl.Series(arr)


def _encode(values: pl.Series, *, distinct: bool = True) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode ``values``: (the code of each value, the distinct values in code order,
    numbered in order of first appearance; an empty list unless ``distinct``)."""
    encoded = pac.dictionary_encode(values.to_arrow(compat_level=pl.CompatLevel.newest()))
    return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist() if distinct else []


def _same_text(buf: _Buffer, starts: np.ndarray, lengths: np.ndarray) -> str | None:
    """The text ``data[start:start+length]`` when it is the same for every row (and 1..24 bytes
    long; one under 8 bytes not within 8 bytes of the end), else None: compared as up to three
    uint64 words a row."""
    k = int(lengths[0])
    if not 0 < k <= 24 or (k < 8 and int(starts.max()) + 8 > buf.size) or not (lengths == k).all():
        return None
    first = int(starts[0])
    for at in sorted({0, min(8, k - 8), max(0, k - 8)}) if k >= 8 else (0,):
        words = buf.dwords[starts + at]
        if k < 8:
            words &= _LOW_BYTES64[k]
        if not (words == words[0]).all():
            return None
    return bytes(buf.data[first : first + k]).decode("utf-8")


def _numbered(numbers: np.ndarray, head: str, tail: str, *, compiled: bool) -> pl.Series:
    """``f"{head}{n}{tail}"`` for each of ``numbers`` (non-negative, ascending), written into one
    byte buffer with numpy: the lines with as many digits are a run of equal-width rows (by the
    compiled scan's module: in one loop)."""
    head_b, tail_b = head.encode(), tail.encode()
    if compiled:
        offsets, text = _dcgm_scan.numbered(np.ascontiguousarray(numbers, dtype=np.int64), head_b, tail_b)
        return pl.Series(pa.LargeStringArray.from_buffers(len(numbers), pa.py_buffer(offsets), pa.py_buffer(text)))
    pieces = []
    bounds = np.searchsorted(numbers, [10**k for k in range(1, 11)]).tolist()
    lo = 0
    for digits, hi in enumerate(bounds, 1):
        if hi > lo:
            width = len(head_b) + digits + len(tail_b)
            row = np.frombuffer(head_b + b"0" * digits + tail_b, dtype=np.uint8)
            text = np.broadcast_to(row, (hi - lo, width)).copy()
            rest = numbers[lo:hi]
            for j in range(len(head_b) + digits - 1, len(head_b) - 1, -1):
                rest, digit = np.divmod(rest, 10)
                text[:, j] += digit.astype(np.uint8)
            offsets = np.arange(hi - lo + 1, dtype=np.int64) * width
            pieces.append(
                pl.Series(pa.LargeStringArray.from_buffers(hi - lo, pa.py_buffer(offsets), pa.py_buffer(text)))
            )
        lo = hi
    return pl.concat(pieces) if len(pieces) > 1 else pieces[0]
