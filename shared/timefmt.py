"""RFC 3339 timestamps with an offset (the EPP decodes them into Go ``time.Time``)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime | None = None) -> str:
    """Format ``moment`` (default: now) as RFC 3339 with an explicit ``+00:00`` offset."""
    value = moment or utc_now()
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def from_epoch(seconds: float) -> str:
    return rfc3339(datetime.fromtimestamp(seconds, UTC))


def parse_rfc3339(text: str) -> datetime:
    """Parse RFC 3339 with 0–9 fractional digits and any offset (Go ``RFC3339Nano``)."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    head, sep, frac_and_zone = value.partition(".")
    if sep:
        digits = len(frac_and_zone) - len(frac_and_zone.lstrip("0123456789"))
        fraction, zone = frac_and_zone[:digits], frac_and_zone[digits:]
        value = f"{head}.{(fraction + '000000')[:6]}{zone}"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("timestamp needs an offset (Z or ±hh:mm)")
    return parsed
