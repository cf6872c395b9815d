"""Label blocks of dcgm-exporter lines, and the character-level tokenizer of a whole line.

`parse_label_block` reads the text between the braces (escapes decoded, every problem named);
`_split_line` cuts a line the fast path of the scan could not prove well-formed into name, label
block, value and timestamp; `_block_columns` maps one block onto the sample columns (the label
spellings dcgm-exporter writes, see `dcgm.py`), `_label_table` does it for every distinct block.
Bounds: a label value longer than `MAX_LABEL_VALUE_CHARS` quarantines its line.

May import `finops/feeds/schemas.py` only (and polars).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import polars as pl

from gpu_platform.finops.feeds.schemas import DCGM_SAMPLE_SCHEMA

LABEL_COLUMNS: tuple[str, ...] = (
    "hostname",
    "gpu",
    "uuid",
    "model_name",
    "pci_bus_id",
    "device",
    "gpu_instance_profile",
    "gpu_instance_id",
    "namespace",
    "pod",
    "container",
)


_COLUMN_FOR_LABEL: dict[str, str] = {
    "Hostname": "hostname",
    "hostname": "hostname",
    "UUID": "uuid",
    "uuid": "uuid",
    "gpu": "gpu",
    "modelName": "model_name",
    "pci_bus_id": "pci_bus_id",
    "device": "device",
    "GPU_I_PROFILE": "gpu_instance_profile",
    "GPU_I_ID": "gpu_instance_id",
    "namespace": "namespace",
    "pod_namespace": "namespace",
    "pod": "pod",
    "pod_name": "pod",
    "container": "container",
    "container_name": "container",
}


MAX_LABEL_VALUE_CHARS = 4096
"""The longest label value read (characters, escapes decoded); a longer one quarantines its line."""


_METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


_VALUE_CHUNK_RE = re.compile(r'[^"\\]*')


_INT_RE = re.compile(r"-?[0-9]+")


_BLANKS = " \t"


class _LineError(ValueError):
    """A malformed line; the message says what is wrong, without the line number."""


def parse_label_block(block: str) -> dict[str, str]:
    """Parse the text between ``{`` and ``}``: ``a="x",b="y\\"z"`` -> ``{"a": "x", "b": 'y"z'}``.

    Escapes ``\\\\``, ``\\"`` and ``\\n`` are decoded; commas, braces and blanks inside quotes
    are literal. A trailing comma is allowed. Raises ``ValueError`` saying what is wrong.
    """
    labels: dict[str, str] = {}
    i, n = 0, len(block)
    while True:
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n:
            return labels
        m = _LABEL_NAME_RE.match(block, i)
        if m is None:
            raise _LineError(f"invalid label name at {block[i : i + 20]!r}")
        name = m.group()
        i = m.end()
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n or block[i] != "=":
            raise _LineError(f"expected '=' after label name {name!r}")
        i += 1
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n or block[i] != '"':
            raise _LineError(f"value of label {name!r} is not quoted")
        i += 1
        parts: list[str] = []
        while True:
            chunk = _VALUE_CHUNK_RE.match(block, i)
            assert chunk is not None
            parts.append(chunk.group())
            i = chunk.end()
            if i >= n:
                raise _LineError(f"unterminated label value (label {name!r})")
            if block[i] == '"':
                i += 1
                break
            if i + 1 >= n:
                raise _LineError(f"unterminated label value (label {name!r})")
            escaped = block[i + 1]
            if escaped == "\\":
                parts.append("\\")
            elif escaped == '"':
                parts.append('"')
            elif escaped == "n":
                parts.append("\n")
            else:
                raise _LineError(f"invalid escape sequence '\\{escaped}' in label {name!r}")
            i += 2
        if name in labels:
            raise _LineError(f"duplicate label {name!r}")
        labels[name] = "".join(parts)
        while i < n and block[i] in _BLANKS:
            i += 1
        if i >= n:
            return labels
        if block[i] != ",":
            raise _LineError(f"expected ',' or '}}' after label {name!r}, found {block[i]!r}")
        i += 1


def _split_line(line: str) -> tuple[str, str, str, str | None]:
    """Tokenize one sample line into (metric name, label block, value text, timestamp text)."""
    s = line.strip(" \t\r\n")
    m = _METRIC_NAME_RE.match(s)
    if m is None:
        raise _LineError(f"invalid metric name at {s[:20]!r}")
    i, n = m.end(), len(s)
    block = ""
    if i < n and s[i] == "{":
        j, in_quotes = i + 1, False
        while j < n:
            c = s[j]
            if in_quotes:
                if c == "\\":
                    j += 2
                    continue
                if c == '"':
                    in_quotes = False
            elif c == '"':
                in_quotes = True
            elif c == "}":
                break
            j += 1
        if j >= n:
            raise _LineError("unterminated label value" if in_quotes else "missing '}' after labels")
        block = s[i + 1 : j]
        i = j + 1
    rest = s[i:]
    if not rest:
        raise _LineError("missing value")
    if rest[0] not in _BLANKS:
        raise _LineError(f"expected a blank before the value, found {rest[0]!r}")
    tokens = rest.split()
    if len(tokens) > 2:
        raise _LineError(f"unexpected text after the timestamp: {' '.join(tokens[2:])!r}")
    return m.group(), block, tokens[0], tokens[1] if len(tokens) == 2 else None


def _labels_to_columns(labels: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """Map a label dict onto the label columns + ``extra_labels``; second item is an error."""
    cols: dict[str, Any] = dict.fromkeys(LABEL_COLUMNS)
    seen_as: dict[str, str] = {}
    extra: dict[str, str] = {}
    for name, value in labels.items():
        column = _COLUMN_FOR_LABEL.get(name)
        if column is None:
            extra[name] = value
            continue
        if value == "":
            continue
        previous = cols[column]
        if previous is not None and previous != value:
            return cols, (f"conflicting labels {seen_as[column]}={previous!r} and {name}={value!r}")
        cols[column] = value
        seen_as[column] = name
    gpu = cols["gpu"]
    if gpu is not None:
        if _INT_RE.fullmatch(gpu) is None or not -(2**31) <= int(gpu) < 2**31:
            return cols, f"label gpu={gpu!r} is not an integer"
        cols["gpu"] = int(gpu)
    cols["extra_labels"] = json.dumps(extra, sort_keys=True, separators=(",", ":")) if extra else None
    return cols, None


_SIMPLE_PAIR = r'[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"[^"\\]*"[ \t]*'


_SIMPLE_BLOCK_RE = re.compile(rf"(?:{_SIMPLE_PAIR},)*(?:{_SIMPLE_PAIR},?)?[ \t]*")


_SIMPLE_PAIR_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"\\]*)"')


def _block_columns(block: str) -> tuple[dict[str, Any], str | None]:
    """The label columns of one label block and its error (None when fine; the columns are then
    all NULL). A block without escapes is read by one regular expression; any other, or one the
    expression does not take, by :func:`parse_label_block`, which says what is wrong."""
    labels: Mapping[str, str] | None = None
    if _SIMPLE_BLOCK_RE.fullmatch(block):
        pairs = _SIMPLE_PAIR_RE.findall(block)
        if len({name for name, _ in pairs}) == len(pairs):
            labels = dict(pairs)
    try:
        labels = labels if labels is not None else parse_label_block(block)
        long = next((name for name, value in labels.items() if len(value) > MAX_LABEL_VALUE_CHARS), None)
        if long is not None:
            raise _LineError(f"value of label {long!r} is {len(labels[long])} characters, over the limit of "
                             f"{MAX_LABEL_VALUE_CHARS}")
        cols, error = _labels_to_columns(labels)
    except _LineError as exc:
        error = str(exc)
    if error is not None:
        cols = dict.fromkeys((*LABEL_COLUMNS, "extra_labels"))
    return cols, error


def _label_table(blocks: list[str | None], parsed: list[tuple[dict[str, Any], str | None]] | None = None) -> pl.DataFrame:
    """One row per distinct label block: its columns and ``label_error`` (NULL when fine).
    ``parsed``: :func:`_block_columns` of each block, when the caller has it already."""
    rows: dict[str, list[Any]] = {c: [] for c in ("labels", *LABEL_COLUMNS, "extra_labels", "label_error")}
    for i, block in enumerate(blocks):
        cols, error = _block_columns(block or "") if parsed is None else parsed[i]
        rows["labels"].append(block)
        for c in (*LABEL_COLUMNS, "extra_labels"):
            rows[c].append(cols[c])
        rows["label_error"].append(error)
    schema = {"labels": pl.String(), "label_error": pl.String(), "extra_labels": pl.String()}
    schema.update({c: DCGM_SAMPLE_SCHEMA[c] for c in LABEL_COLUMNS})
    return pl.DataFrame(rows, schema={c: schema[c] for c in rows})
