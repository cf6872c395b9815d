"""Text from outside, made unable to forge what a person reads.

Two kinds of guard, one function each:

- `unsafe_chars(value)` finds what validation refuses in a free-text field: C0 controls (U+0000 to
  U+001F and U+007F; a field may document that it allows TAB and LF), C1 controls (U+0080 to
  U+009F), bidi embeddings/overrides/isolates (U+202A to U+202E, U+2066 to U+2069), the implicit
  marks U+200E, U+200F and U+061C, and the line/paragraph separators U+2028 / U+2029.
  `char_problem(value)` words the first one: `contains U+001B (a control character)`.
- `term(value)`: any value as it may be printed to a terminal: every such character (and any
  other non-printable one) is shown as its escape (`\\x1b`, `\\n`, `\\u202e`), so an `ESC[2J`
  cannot clear the screen, a newline cannot forge a line, U+202E cannot reorder what follows.
  rich markup in the value is escaped too (`[bold]` prints as written).
- `md(value)`: any value as it may be written into Dagster markdown (`MetadataValue.md`): `plain`'s
  escapes, then the markdown metacharacters that open a construct backslash-escaped and `<`, `>`,
  `&` as entities, so
  `![x](http://...)` is text, not an image, `[x](javascript:...)` is not a link, a backtick
  cannot close a code span and no HTML reaches the renderer. `md_code(value)` is a value shown
  as inline code: plain text inside a code span chosen longer than any backtick run in it.
"""

from __future__ import annotations

import re
from typing import Any

BIDI = frozenset(
    [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)] + ["\u200e", "\u200f", "\u061c"]
)
"""Bidi embeddings, overrides, isolates and implicit marks: they reorder or hide what is read."""
SEPARATORS = frozenset(["\u2028", "\u2029", "\x85"])


def _bad(c: str, allow: str) -> bool:
    if c in allow:
        return False
    o = ord(c)
    return o < 0x20 or 0x7F <= o <= 0x9F or c in BIDI or c in SEPARATORS


_DESCRIBE = {**{c: "a bidi control" for c in BIDI}, "\u2028": "a line separator", "\u2029": "a paragraph separator"}


def unsafe_chars(value: str, allow: str = "") -> list[str]:
    """The characters of `value` a free-text field refuses (in order, each once); `allow`: the
    ones this field documents as allowed (`"\\t\\n"` for command arguments and env values)."""
    seen: list[str] = []
    for c in value:
        if _bad(c, allow) and c not in seen:
            seen.append(c)
    return seen


def char_problem(value: str, allow: str = "") -> str | None:
    """`contains U+001B (a control character)` for the first refused character, else None."""
    found = unsafe_chars(value, allow)
    if not found:
        return None
    c = found[0]
    what = _DESCRIBE.get(c, "a control character")
    more = f" and {len(found) - 1} other refused character(s)" if len(found) > 1 else ""
    return f"contains U+{ord(c):04X} ({what}){more}; control and bidi characters are not allowed"


def _escape_char(c: str) -> str:
    o = ord(c)
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if c == "\r":
        return "\\r"
    if o <= 0xFF:
        return f"\\x{o:02x}"
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def term(value: Any) -> str:
    """`value` as text safe to print through rich (a console, a table cell): `plain`, then its
    markup escaped (`[bold]` prints as written)."""
    text = plain(value)
    if "[" not in text and not text.endswith("\\"):
        return text
    from rich.markup import escape

    return escape(text)


def plain(value: Any, keep: str = "") -> str:
    """`value` with every non-printable or bidi character escaped (`\\x1b`, `\\n`, `\\u202e`),
    nothing else changed: for click.echo and other output that does not read rich markup.
    keep: characters left as they are (`make_console`'s consoles keep "\\n\\t" in what they
    render: by then a newline is the layout's own, and values were escaped where they entered)."""
    text = str(value)
    if text.isprintable() and not any(c in BIDI for c in text):
        return text
    return "".join(c if c in keep or (c.isprintable() and c not in BIDI) else _escape_char(c) for c in text)


_MD_META = re.compile(r"([\\`*\[\]|~!])")
_MD_LEAD = re.compile(r"^(\s*\d*)([#+\-=.)])")
_MD_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9])(:)(?=//)|(?<=www)(\.)")


def md(value: Any) -> str:
    """`value` as literal text inside Dagster markdown (a table cell, a list item): no image, link,
    autolink, HTML, code span, emphasis by `*`, strikethrough, table cell or block marker from it.
    Escapes what can start one (backslash, backtick, `*`, `[`, `]`, `|`, `~`, `!`, and `#+-=>` or
    `1.` at the start), `<`, `>`, `&` as entities, and the `:` of `scheme://` and the `.` of
    `www.` (so GFM does not autolink). `_` stays as written: `training_run` reads as itself."""
    text = plain(value)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_META.sub(r"\\\1", text)
    text = _MD_AUTOLINK.sub(lambda m: "\\" + (m.group(1) or m.group(2)), text)
    return _MD_LEAD.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def md_code(value: Any) -> str:
    """`value` as an inline code span that its own backticks cannot close (CommonMark: a span
    opened by n backticks closes only at a run of exactly n)."""
    text = plain(value)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"
