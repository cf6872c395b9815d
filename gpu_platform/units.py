"""Small value parsers shared by the policy and request models."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*d)?\s*(?:(\d+(?:\.\d+)?)\s*h)?\s*(?:(\d+(?:\.\d+)?)\s*m)?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")


_ISO = re.compile(r"^P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def parse_duration(value: object) -> timedelta:
    """Parse `90`, `90s`, `30m`, `4h`, `1h30m`, `14d` or ISO 8601 `PT4H` (a bare number is seconds).

    Raises ValueError with the offending text when it is not a non-negative duration.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    elif isinstance(value, int | float):
        if isinstance(value, int) and abs(value) > 10**15:
            raise ValueError(f"duration too long: {str(value)[:40]!r}")
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("empty duration")
        try:
            seconds = float(text)
        except ValueError:
            iso = _ISO.match(text)
            if iso and any(iso.groups()):
                w, d, h, mi, s = (float(g) if g else 0.0 for g in iso.groups())
                return _seconds(w * 604800 + d * 86400 + h * 3600 + mi * 60 + s, value)
            m = _DURATION.match(text)
            if not m or not any(m.groups()):
                raise ValueError(f"not a duration: {value!r} (use e.g. 90s, 30m, 4h, 1h30m, 14d)") from None
            d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            seconds = d * 86400 + h * 3600 + mi * 60 + s
    else:
        raise ValueError(f"not a duration: {value!r}")
    if seconds < 0:
        raise ValueError(f"negative duration: {value!r}")
    return _seconds(seconds, value)


def _seconds(seconds: float, value: object) -> timedelta:
    if seconds != seconds:  # NaN
        raise ValueError(f"not a duration: {value!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"duration too long: {str(value)[:40]!r}") from None


def format_duration(td: timedelta) -> str:
    """Render a timedelta compactly (`1h30m`, `14d`, `45s`)."""
    total = int(td.total_seconds())
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        q, total = divmod(total, size)
        if q:
            parts.append(f"{q}{unit}")
    return "".join(parts)
