"""Ids as path components: readable, and injective (distinct ids never share a directory)."""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
SLUG_CHARS = 64
HASH_CHARS = 12


def path_key(identifier: str) -> str:
    """`<slug>-<12 hex of sha256(id)>`: the slug keeps the id readable (unsafe characters become
    `_`, cut to 64 characters), the hash keeps `perc:exp-1`, `perc/exp-1` and `perc_exp-1` apart.
    Always one path component: no `/`, never `.` or `..`, at most 77 characters."""
    slug = _UNSAFE.sub("_", identifier)[:SLUG_CHARS].lstrip(".") or "_"
    return f"{slug}-{hashlib.sha256(identifier.encode()).hexdigest()[:HASH_CHARS]}"
