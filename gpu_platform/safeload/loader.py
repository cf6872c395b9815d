"""Bounded reading of YAML and JSON documents: the one way request, policy and case files are read.

Refused, each as one line naming the position (`line 7, column 3: ...`), all problems at once:
- a file over its size limit, or not UTF-8 (naming the byte offset; a UTF-16/32 byte order mark
  is named as such), or with a NUL byte;
- nesting deeper than `max_depth` (checked while composing, so 100,000 brackets never recurse);
- YAML aliases whose expansion exceeds `max_nodes` nodes or `max_expanded_chars` characters
  ("billion laughs"), and recursive aliases;
- duplicate mapping keys (both lines named), in YAML and JSON;
- integers beyond 2**63 - 1, non-finite floats (`.inf`, `.nan`, `NaN`), scalars longer than
  `max_scalar_chars`, strings containing NUL.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpu_platform.safeload.confine import PathRefused, open_regular
from gpu_platform.safeload.limits import MAX_INT, Limits

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian)"),
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian)"),
    (b"\xfe\xff", "UTF-16 (big-endian)"),
    (b"\xff\xfe", "UTF-16 (little-endian)"),
)


class InputError(ValueError):
    """A document refused before use. `errors`: one line per problem; `source`: the file."""

    def __init__(self, errors: list[str], source: str):
        self.errors = list(errors)
        self.source = source
        super().__init__(f"{source}: " + "; ".join(self.errors))


def show(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, for error messages that echo user input."""
    if isinstance(value, str | int | float | bool | type(None)):
        text = repr(value)
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(problem: str) -> str:
    """A problem as one printable line (a key or value may hold a newline or a control character)."""
    if problem.isprintable():
        return problem
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in problem)


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.:/@-]{1,64}$")


def show_key(key: Any) -> str:
    """A mapping key for a field path: as it is when plain, else quoted and cut (`'a\\nb'`)."""
    return key if isinstance(key, str) and _PLAIN_KEY.match(key) else show(key, 40)


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def decode_utf8(data: bytes, source: str, *, allow_nul: bool = False) -> str:
    """Strict UTF-8 (a UTF-8 byte order mark is dropped); InputError names the byte offset."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise InputError([f"byte offset 0: not UTF-8 (a {name} byte order mark); save the file as UTF-8"], source)
    if not allow_nul:
        nul = data.find(b"\x00")
        if nul >= 0:
            raise InputError([f"byte offset {nul} (line {_line_of(data, nul)}): NUL byte; not a text file"], source)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
        shift = 3
    else:
        shift = 0
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise InputError(
            [
                f"byte offset {exc.start + shift} (line {_line_of(data, exc.start)}): not UTF-8 "
                f"(byte 0x{bad}: {exc.reason}); save the file as UTF-8"
            ],
            source,
        ) from None
    return text


def read_bytes(path: str | Path, max_bytes: int) -> bytes:
    """The file's bytes, refused (InputError) when unreadable, not a regular file (a FIFO, device
    or socket: refused without blocking) or over `max_bytes`."""
    p = Path(path)
    try:
        with open_regular(p, field="<file>") as fh:
            data = fh.read(max_bytes + 1)
    except PathRefused as exc:
        raise InputError([f"<file>: cannot read: {exc.why}"], str(p)) from None
    except OSError as exc:
        raise InputError([f"<file>: cannot read: {exc.strerror or exc}"], str(p)) from None
    if len(data) > max_bytes:
        raise InputError([f"<file>: larger than the limit of {max_bytes:,} bytes"], str(p))
    return data


def check_utf8_file(path: str | Path, chunk: int = 16 * 1024 * 1024) -> str | None:
    """None when the file is UTF-8 throughout, else the problem naming the byte offset; reads in
    chunks, so a large feed file is checked without holding it in memory."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with Path(path).open("rb") as fh:
        first = True
        while block := fh.read(chunk):
            if first:
                for bom, name in _BOMS:
                    if block.startswith(bom):
                        return f"byte offset 0: not UTF-8 (a {name} byte order mark)"
                first = False
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                bad = block[exc.start : exc.start + 1].hex()
                return f"byte offset {offset + exc.start}: not UTF-8 (byte 0x{bad}: {exc.reason})"
            offset += len(block)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        return f"byte offset {offset - len(exc.object) + exc.start}: not UTF-8 ({exc.reason} at the end of the file)"
    return None


def read_text(path: str | Path, limits: Limits) -> str:
    return decode_utf8(read_bytes(path, limits.max_bytes), str(path))


# --------------------------------------------------------------------------------------------- YAML


class _Refused(Exception):
    """Stops composing at once (nesting too deep): nothing after it can be trusted."""


def _where(node_or_mark: Any) -> str:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return f"line {mark.line + 1}, column {mark.column + 1}"


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that bounds nesting while composing and reports duplicate keys and bad scalars."""

    def __init__(self, stream: str, limits: Limits):
        super().__init__(stream)
        self.limits = limits
        self.depth = 0
        self.problems: list[str] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                raise _Refused(f"{_where(self.peek_event())}: nested deeper than {self.limits.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def compose_mapping_node(self, anchor: str | None) -> MappingNode:
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], Any] = {}
        for key, _value in node.value:
            if not isinstance(key, ScalarNode):
                continue
            ident = (key.tag, key.value)
            if ident in first:
                self.problems.append(
                    f"line {key.start_mark.line + 1}: duplicate key {show(key.value)} "
                    f"(first at line {first[ident].start_mark.line + 1})"
                )
            else:
                first[ident] = key
        return node

    def construct_yaml_int(self, node: ScalarNode) -> int:
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INT:
            self.problems.append(f"{_where(node)}: integer {show(node.value)} is larger than {MAX_INT}")
            return 0
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            self.problems.append(f"{_where(node)}: {show(node.value)} is not a finite number")
            return 0.0
        return value

    def construct_yaml_timestamp(self, node: ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            self.problems.append(f"{_where(node)}: {show(node.value)} is not a valid date or time ({exc})")
            return None


_BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", _BoundedLoader.construct_yaml_timestamp)
_BoundedLoader.add_constructor(_INT_TAG, _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor(_FLOAT_TAG, _BoundedLoader.construct_yaml_float)


def _measure(root: Node, limits: Limits, problems: list[str]) -> None:
    """Count nodes, scalar characters and depth with aliases expanded (memoized: linear in the
    file; recursion never deeper than `max_depth`), and check every distinct scalar once."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id -> (nodes, characters, height)
    active: set[int] = set()

    def deeper(node: Node) -> _Refused:
        return _Refused(
            f"{_where(node)}: nested deeper than {limits.max_depth} levels once aliases are expanded"
        )

    def walk(node: Node, depth: int) -> tuple[int, int, int]:
        key = id(node)
        if key in sizes:
            if depth + sizes[key][2] - 1 > limits.max_depth:
                raise deeper(node)
            return sizes[key]
        if key in active:
            raise _Refused(f"{_where(node)}: recursive alias (a node that contains itself)")
        if depth > limits.max_depth:
            raise deeper(node)
        active.add(key)
        if isinstance(node, ScalarNode):
            text = node.value
            if len(text) > limits.max_scalar_chars:
                problems.append(f"{_where(node)}: value of {len(text):,} characters exceeds the limit of {limits.max_scalar_chars:,}")
            if "\x00" in text:
                problems.append(f"{_where(node)}: NUL character in a string")
            if node.tag == _INT_TAG and len(text.replace("_", "")) > 24:
                problems.append(f"{_where(node)}: integer of {len(text):,} characters is larger than {MAX_INT}")
                node.value = "0"
            size = (1, len(text), 1)
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                for k, v in node.value:
                    children += [k, v]
            n, c, h = 1, 0, 1
            for child in children:
                cn, cc, ch = walk(child, depth + 1)
                n, c, h = n + cn, c + cc, max(h, ch + 1)
                if n > limits.max_nodes or c > limits.max_expanded_chars:
                    break
            size = (n, c, h)
        active.discard(key)
        sizes[key] = size
        if size[0] > limits.max_nodes:
            raise _Refused(
                f"{_where(node)}: expands to more than {limits.max_nodes:,} nodes (YAML aliases are expanded "
                "at each use); write the values out or shorten the document"
            )
        if size[1] > limits.max_expanded_chars:
            raise _Refused(
                f"{_where(node)}: expands to more than {limits.max_expanded_chars:,} characters "
                "(YAML aliases are expanded at each use)"
            )
        return size

    walk(root, 1)


def _reader_problem(text: str, exc: yaml.reader.ReaderError) -> str:
    line = text.count("\n", 0, exc.position) + 1
    return f"<yaml> line {line}: character U+{exc.character:04X} is not allowed in YAML (control character)"


def load_yaml_text(text: str, source: str, limits: Limits) -> Any:
    """One YAML document, bounded by `limits`; InputError lists every problem."""
    if len(text.encode()) > limits.max_bytes:
        raise InputError([f"<file>: larger than the limit of {limits.max_bytes:,} bytes"], source)
    try:
        loader = _BoundedLoader(text, limits)
    except yaml.reader.ReaderError as exc:
        raise InputError([_reader_problem(text, exc)], source) from None
    try:
        root = loader.get_single_node()
        if root is None:
            data = None
        else:
            _measure(root, limits, loader.problems)
            if loader.problems:
                raise InputError(loader.problems, source)
            data = loader.construct_document(root)
    except InputError:
        raise
    except _Refused as exc:
        raise InputError([*loader.problems, str(exc)], source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"<yaml> line {mark.line + 1}, column {mark.column + 1}" if mark else "<yaml>"
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise InputError([*loader.problems, f"{where}: {what or 'invalid YAML'}"], source) from None
    except yaml.reader.ReaderError as exc:
        raise InputError([*loader.problems, _reader_problem(text, exc)], source) from None
    except yaml.YAMLError as exc:
        raise InputError([*loader.problems, f"<yaml>: {str(exc).splitlines()[0][:200]}"], source) from None
    except (ValueError, TypeError, OverflowError) as exc:
        # Constructors of YAML 1.1 scalars (dates, base-60 numbers) and unhashable keys.
        raise InputError([*loader.problems, f"<yaml>: {str(exc)[:200]}"], source) from None
    finally:
        loader.dispose()
    if loader.problems:
        raise InputError(loader.problems, source)
    return data


# --------------------------------------------------------------------------------------------- JSON

_JSON_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[{}\[\],\n]')


def _scan_json(text: str, limits: Limits) -> list[str]:
    """One linear pass over the tokens that matter: nesting depth and duplicate keys (with lines)."""
    problems: list[str] = []
    stack: list[dict[str, int] | None] = []
    line, key_next = 1, False
    for m in _JSON_TOKENS.finditer(text):
        tok = m.group()
        if tok == "\n":
            line += 1
        elif tok in "{[":
            stack.append({} if tok == "{" else None)
            key_next = tok == "{"
            if len(stack) > limits.max_depth:
                problems.append(f"line {line}: nested deeper than {limits.max_depth} levels")
                return problems
        elif tok in "}]":
            if stack:
                stack.pop()
            key_next = False
        elif tok == ",":
            key_next = bool(stack) and stack[-1] is not None
        else:
            top = stack[-1] if stack else None
            if key_next and top is not None:
                try:
                    key = json.loads(tok)
                except ValueError:
                    return problems  # json.loads reports it with its position
                if key in top:
                    problems.append(f"line {line}: duplicate key {show(key)} (first at line {top[key]})")
                else:
                    top[key] = line
            key_next = False
    return problems


def _json_int(text: str) -> int:
    if len(text) > 24 or abs(int(text)) > MAX_INT:
        raise ValueError(f"integer {show(text)} is larger than {MAX_INT}")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{show(text)} is not a finite number")
    return value


def _json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a finite number")


def load_json_text(text: str, source: str, limits: Limits) -> Any:
    """One JSON document, bounded by `limits`; InputError lists every problem."""
    if len(text.encode()) > limits.max_bytes:
        raise InputError([f"<file>: larger than the limit of {limits.max_bytes:,} bytes"], source)
    problems = _scan_json(text, limits)
    if problems:
        raise InputError(problems, source)
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise InputError([f"<json> line {exc.lineno}, column {exc.colno}: {exc.msg}"], source) from None
    except (ValueError, RecursionError) as exc:
        raise InputError([f"<json>: {str(exc)[:200]}"], source) from None


def load_document(path: str | Path, limits: Limits) -> Any:
    """Read a `.json` file as JSON and anything else as YAML, within `limits`."""
    p = Path(path)
    text = read_text(p, limits)
    if p.suffix.lower() == ".json":
        return load_json_text(text, str(p), limits)
    return load_yaml_text(text, str(p), limits)


def check_tree(value: Any, limits: Limits, path: str = "") -> list[str]:
    """Problems of an already-parsed value (a Launchpad run config): depth, size, scalars."""
    problems: list[str] = []
    count = 0

    def walk(v: Any, where: str, depth: int) -> None:
        nonlocal count
        count += 1
        if count > limits.max_nodes:
            if count == limits.max_nodes + 1:
                problems.append(f"{where or '<root>'}: more than {limits.max_nodes:,} values")
            return
        if depth > limits.max_depth:
            problems.append(f"{where or '<root>'}: nested deeper than {limits.max_depth} levels")
            return
        if isinstance(v, Mapping):
            for k, item in v.items():
                walk(item, f"{where}.{show_key(k)}" if where else show_key(k), depth + 1)
        elif isinstance(v, list | tuple):
            for i, item in enumerate(v):
                walk(item, f"{where}[{i}]", depth + 1)
        elif isinstance(v, str):
            if len(v) > limits.max_scalar_chars:
                problems.append(f"{where}: value of {len(v):,} characters exceeds the limit of {limits.max_scalar_chars:,}")
            if "\x00" in v:
                problems.append(f"{where}: NUL character in a string")
        elif isinstance(v, bool):
            pass
        elif isinstance(v, int) and abs(v) > MAX_INT:
            problems.append(f"{where}: integer is larger than {MAX_INT}")
        elif isinstance(v, float) and not math.isfinite(v):
            problems.append(f"{where}: {v!r} is not a finite number")

    walk(value, path, 0)
    return problems
