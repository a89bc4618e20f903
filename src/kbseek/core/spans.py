"""Moments given as a span back from now (``90m``, ``24h``, ``7d``, ``2w``) or as an ISO date/time: the
``--since`` / ``--older-than`` options of the record commands and the ``since`` parameter of the API."""

from __future__ import annotations

import datetime as dt
import re

from kbseek.errors import InvalidOption

_SPAN = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_HINT = "e.g. 90m, 24h, 7d, 2w or 2026-11-01T08:00"


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """A span back from ``now`` or an ISO date/time (UTC unless it says otherwise).

    >>> now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    >>> parse_since("36h", now).isoformat(), parse_since(" 2W ", now).isoformat()
    ('2026-11-29T00:00:00+00:00', '2026-11-16T12:00:00+00:00')
    >>> parse_since("2026-11-01", now).isoformat(), parse_since("2026-11-01T08:00+08:00", now).isoformat()
    ('2026-11-01T00:00:00+00:00', '2026-11-01T08:00:00+08:00')
    >>> for text in ("yesterday", "99999999d"):
    ...     try:
    ...         parse_since(text, now)
    ...     except InvalidOption as exc:
    ...         print(exc.message)
    --since/--older-than 'yesterday': not a span like 24h / 7d nor an ISO date
    --since/--older-than '99999999d': reaches back before the year 1
    """
    match = _SPAN.match(text.strip().lower())
    if match:
        try:
            return now - dt.timedelta(**{_UNITS[match[2]]: int(match[1])})
        except (OverflowError, ValueError):  # e.g. 99999999d: before the year 1 (or past int parsing)
            raise InvalidOption(
                f"--since/--older-than {text[:40]!r}: reaches back before the year 1", hint=_HINT
            ) from None
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidOption(
            f"--since/--older-than {text!r}: not a span like 24h / 7d nor an ISO date", hint=_HINT
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
