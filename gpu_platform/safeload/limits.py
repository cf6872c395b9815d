"""The documented limits on every document the platform reads (docs/reliability.md lists them).

A document over a limit is refused before it is used: the problem is reported with its file and
position, never discovered by the database or by a recursion error.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_INT = 2**63 - 1
"""Largest integer accepted anywhere (PostgreSQL BIGINT); larger values are refused."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds for one kind of document.

    max_bytes: size of the file (or text) itself.
    max_depth: nesting of mappings and sequences.
    max_nodes: nodes of the document once YAML aliases are expanded (each use of an alias counts
    its whole subtree again), so a "billion laughs" file is refused before it is walked.
    max_expanded_chars: characters of all scalars once aliases are expanded.
    max_scalar_chars: characters of one scalar (a string, a number's text).
    """

    max_bytes: int
    max_depth: int = 32
    max_nodes: int = 100_000
    max_expanded_chars: int = 4 * 1024 * 1024
    max_scalar_chars: int = 65_536


REQUEST_LIMITS = Limits(max_bytes=256 * 1024, max_nodes=20_000, max_expanded_chars=1024 * 1024)
"""A job request file (YAML or JSON) or a Launchpad run config."""

POLICY_LIMITS = Limits(max_bytes=2 * 1024 * 1024, max_nodes=200_000, max_expanded_chars=8 * 1024 * 1024)
"""A policy file."""

CASES_LIMITS = Limits(max_bytes=8 * 1024 * 1024, max_depth=48, max_nodes=1_000_000, max_expanded_chars=32 * 1024 * 1024)
"""An admission cases file (tests/fixtures/admission/*.yaml)."""

FEED_JSON_LIMITS = Limits(
    max_bytes=256 * 1024 * 1024, max_depth=16, max_nodes=50_000_000, max_expanded_chars=512 * 1024 * 1024
)
"""A saved Prometheus `query_range` answer (DCGM history)."""

INVENTORY_JSON_LIMITS = Limits(
    max_bytes=512 * 1024 * 1024, max_depth=64, max_nodes=50_000_000, max_expanded_chars=1024 * 1024 * 1024
)
"""A `kubectl get nodes -o json` / `kubectl get pods -A -o json` snapshot. Depth 64: a pod's
`metadata.managedFields[].fieldsV1` nests about a dozen levels; 512 MiB: some 20,000 pods of 25 KiB."""

RESULT_LIMITS = Limits(max_bytes=16 * 1024 * 1024, max_depth=32, max_nodes=1_000_000)
"""A workload program's `result.json` (written by code the platform does not control)."""

FEED_FILE_MAX_BYTES = 2 * 1024 * 1024 * 1024
"""A saved feed file (DCGM text / Parquet, FOCUS CSV / Parquet) larger than this is quarantined."""
