"""A model endpoint's base URL, checked where it is given (--model-url, harness.yaml), so a typo is one line naming it
rather than urllib's ValueError deep inside the first request."""

from __future__ import annotations

from .errors import InvalidInput


def check_model_url(url: str) -> None:
    """An http(s) URL with a host (and a numeric port, if any), else InvalidInput."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InvalidInput(f"model URL {url!r} is malformed ({exc}); expected e.g. http://127.0.0.1:8000/v1") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise InvalidInput(f"model URL {url!r} is not an http(s) URL with a host; expected e.g. http://127.0.0.1:8000/v1")
