"""Timestamps as reef writes them everywhere (ledger records, releases, proposals): ISO-8601 UTC with milliseconds
and 'Z'. Fixed width, so the strings sort like the times they name."""

from __future__ import annotations

from datetime import datetime, timezone

from .errors import InvalidInput


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def format_time(moment: datetime) -> str:
    """The timestamp of an aware datetime; a naive one is refused (its zone would be a guess)."""
    if moment.tzinfo is not timezone.utc:
        if moment.tzinfo is None:
            raise InvalidInput(f"time {moment.isoformat()} has no timezone; pass an aware datetime (e.g. UTC)")
        moment = moment.astimezone(timezone.utc)
    m = moment
    return (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}."
        f"{m.microsecond // 1000:03d}Z"
    )


_last_second: tuple = (None, "")


def format_ms(ms: int) -> str:
    """`format_time` of milliseconds since the epoch (`time.time_ns() // 10**6`), building no datetime except
    once per second: every ledger append stamps its record."""
    global _last_second
    second, prefix = _last_second  # one tuple, read once: threads may replace it meanwhile
    if ms // 1000 != second:
        second = ms // 1000
        prefix = format_time(datetime.fromtimestamp(second, timezone.utc))[:-4]  # up to and including "SS."
        _last_second = second, prefix
    return f"{prefix}{ms % 1000:03d}Z"
