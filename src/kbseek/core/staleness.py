"""Review periods and staleness: whether anyone still vouches for a document, from its frontmatter and dates.

A document names who owns it (``owner``), when it was last reviewed (``last_reviewed``, a date) and how often it
wants a review (``review_every``: ``180d``, ``8w``, ``6m``, ``1y``). Without ``last_reviewed`` its age counts from the
date its stored version was written; without ``review_every`` the configured default applies (``0`` or ``off``: never
stale). Everything here is a function of the values and of a ``today`` passed in: the core reads no clock.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from kbseek.errors import FrontmatterError

FIELDS = ("owner", "last_reviewed", "review_every")
UNIT_DAYS = {"d": 1, "w": 7, "m": 30, "y": 365}  # a month is 30 days, a year 365: a review period, not a calendar
MAX_PERIOD_DAYS = 100 * 365
_PERIOD = re.compile(r"^\s*(\d{1,6})\s*([dwmy]?)\s*$", re.IGNORECASE)
_OFF = {"0", "off", "never", "none", "false"}


def parse_period(value: Any) -> int | None:
    """A review period in days; ``None`` for off (``0``, ``off``, ``never``). A bare number counts days.

    >>> parse_period("180d"), parse_period("6m"), parse_period("1y"), parse_period("2w"), parse_period(90)
    (180, 180, 365, 14, 90)
    >>> parse_period("off") is None and parse_period("0d") is None and parse_period(False) is None
    True
    >>> parse_period("soon")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'soon' is not a review period: ...
    """
    if value is False:  # YAML reads an unquoted 'off' or 'no' as false
        return None
    if value is True or value is None:
        raise ValueError(f"{value!r} is not a review period: write a number and a unit (d, w, m or y), e.g. 180d")
    text = str(value).strip().lower()
    if text in _OFF:
        return None
    match = _PERIOD.match(text)
    if not match:
        raise ValueError(
            f"{value!r} is not a review period: write a number and a unit (d, w, m or y), e.g. 180d, 6m, 1y; or off"
        )
    days = int(match.group(1)) * UNIT_DAYS[(match.group(2) or "d").lower()]
    if days > MAX_PERIOD_DAYS:
        raise ValueError(f"{value!r} is longer than 100 years")
    return days or None


def parse_date(value: Any) -> dt.date:
    """A ``last_reviewed`` value as a date: ``2026-03-01`` (YAML's date, stored as text) or a timestamp's date.

    >>> parse_date("2026-03-01"), parse_date("2026-03-01T10:00:00+00:00")
    (datetime.date(2026, 3, 1), datetime.date(2026, 3, 1))
    """
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return dt.date.fromisoformat(text[:10]) if len(text) == 10 else dt.datetime.fromisoformat(text).date()
        except ValueError:
            pass
    raise ValueError(f"{value!r} is not a date: write it as YYYY-MM-DD, e.g. 2026-03-01")


@dataclass(frozen=True, slots=True)
class Review:
    """What a document's frontmatter says about its review (each ``None`` when not given)."""

    owner: str | None = None
    last_reviewed: dt.date | None = None
    review_every: int | None = None  # days
    has_period: bool = False  # ``review_every`` given (``off`` included), so the default does not apply


def review_fields(fields: dict[str, Any], *, source: str = "", lines: dict[str, int] | None = None) -> Review:
    """The review fields of a frontmatter, validated: a bad value raises :class:`FrontmatterError` naming
    ``source`` (the file), the field and its line.

    >>> review_fields({"owner": "sre", "last_reviewed": "2026-01-05", "review_every": "90d"})
    Review(owner='sre', last_reviewed=datetime.date(2026, 1, 5), review_every=90, has_period=True)
    >>> review_fields({"review_every": "often"}, source="ops/cpu.md", lines={"review_every": 4})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    kbseek.errors.FrontmatterError: ops/cpu.md:4: field 'review_every': 'often' is not a review period: ...
    """
    lines = lines or {}

    def bad(name: str, problem: str, hint: str) -> FrontmatterError:
        return FrontmatterError(f"field '{name}': {problem}", source=source, line=lines.get(name), hint=hint)

    owner = fields.get("owner")
    if isinstance(owner, (dict, list)):
        raise bad("owner", "must be text (a team or a person)", "write 'owner: payments-oncall'")
    owner_text = " ".join(str(owner).split()) if owner is not None else ""
    reviewed = None
    if fields.get("last_reviewed") is not None:
        try:
            reviewed = parse_date(fields["last_reviewed"])
        except ValueError as exc:
            raise bad("last_reviewed", str(exc), "write 'last_reviewed: 2026-03-01'") from None
    period, has_period = None, fields.get("review_every") is not None
    if has_period:
        try:
            period = parse_period(fields["review_every"])
        except ValueError as exc:
            raise bad("review_every", str(exc), "write 'review_every: 180d' (d, w, m or y), or 'off'") from None
    return Review(owner_text or None, reviewed, period, has_period)


def lenient_review(fields: dict[str, Any]) -> Review:
    """:func:`review_fields` for a stored document, which was validated when written: a value that no longer
    reads (a home written before the fields were checked) counts as not given."""
    try:
        return review_fields(fields)
    except FrontmatterError:
        good = {}
        for name in FIELDS:
            try:
                review_fields({name: fields.get(name)})
                good[name] = fields.get(name)
            except FrontmatterError:
                continue
        return review_fields(good)


@dataclass(frozen=True, slots=True)
class Staleness:
    """A document's age and whether it is past its review, as of a given day."""

    age_days: int
    stale: bool
    since: dt.date  # the last review, or the day the stored version was written
    basis: str  # "last_reviewed" | "updated"
    review_every: int | None  # days; None: never due
    due: dt.date | None
    owner: str | None

    def view(self) -> dict[str, Any]:
        return {
            "age_days": self.age_days,
            "stale": self.stale,
            "since": self.since.isoformat(),
            "basis": self.basis,
            "review_every_days": self.review_every,
            "review_due": self.due.isoformat() if self.due else None,
            "owner": self.owner,
        }


def staleness(fields: dict[str, Any], updated: Any, *, today: dt.date, default_every: int | None) -> Staleness:
    """How old a document is and whether it is past review on ``today``.

    ``updated`` is when its stored version was written (a date, a timestamp or its ISO text); ``default_every``
    the review period in days for a document that names none (``None``: never stale by default).

    >>> s = staleness({"last_reviewed": "2026-01-01", "review_every": "30d"}, "2026-06-01", today=dt.date(2026, 2, 5),
    ...               default_every=365)
    >>> s.age_days, s.stale, s.basis, s.due
    (35, True, 'last_reviewed', datetime.date(2026, 1, 31))
    >>> staleness({}, "2026-01-01T08:00:00+00:00", today=dt.date(2026, 2, 5), default_every=None).stale
    False
    """
    review = lenient_review(fields)
    if review.last_reviewed is not None:
        since, basis = review.last_reviewed, "last_reviewed"
    else:
        since, basis = parse_date(updated), "updated"
    every = review.review_every if review.has_period else default_every
    age = max(0, (today - since).days)
    due = since + dt.timedelta(days=every) if every else None
    return Staleness(age, due is not None and today > due, since, basis, every, due, review.owner)
