"""Reading a policy document defensively: `parse_policy_document` never raises anything but
PolicyError, whatever shape the document has (the checks in `model.py` assume the shapes the
schema asks for; a value of the wrong shape is reported by the schema's own errors)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpu_platform.policy.model import Policy, PolicyError, _path, parse_policy
from gpu_platform.safeload import one_line


def _named(mapping: Any) -> Any:
    if not isinstance(mapping, dict):
        return mapping
    return {k: {**v, "name": k} if isinstance(v, dict) else v for k, v in mapping.items()}


def schema_errors(raw: dict[str, Any]) -> list[str]:
    """The schema's errors alone, each with its path (what `parse_policy` reports first)."""
    data = {**raw, "lanes": _named(raw.get("lanes")), "teams": _named(raw.get("teams"))}
    data = {k: v for k, v in data.items() if v is not None or k in raw}
    try:
        Policy.model_validate(data)
    except ValidationError as exc:
        return sorted(
            {
                f"{_path(tuple(p for p in e['loc'] if not (isinstance(p, str) and p.startswith('function-'))))}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            }
        )
    return []


def parse_policy_document(raw: Any, source: str) -> Policy:
    """`parse_policy`, with any failure of its cross-reference checks on a malformed document
    turned into the schema errors that explain it; every problem is one printable line."""
    try:
        return parse_policy(raw, source)
    except PolicyError as exc:
        raise PolicyError([one_line(e) for e in exc.errors], source) from None
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as exc:
        errors = schema_errors(raw) if isinstance(raw, dict) else []
        if not errors:
            errors = [f"<root>: cannot be checked ({type(exc).__name__}: {str(exc)[:200]})"]
        raise PolicyError([one_line(e) for e in errors], source) from None
