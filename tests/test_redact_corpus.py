"""Every format in tests/redact_corpus.py is redacted whole, and every look-alike comes through byte for byte."""

from __future__ import annotations

import pytest

from redact_corpus import FORMATS, NEGATIVES
from reef_cli.redact import redact, redact_obj


def leaked(secret: str, text: str) -> str | None:
    """The secret, or an 8-character run of it, still in `text` (a half-redacted secret is a leak)."""
    if secret in text:
        return secret
    for i in range(len(secret) - 7):
        if secret[i : i + 8] in text:
            return secret[i : i + 8]
    return None


def test_the_corpus_is_big_enough() -> None:
    assert len({name for name, _, _ in FORMATS}) == len(FORMATS) >= 60
    assert len({name for name, _ in NEGATIVES}) == len(NEGATIVES) >= 40


@pytest.mark.parametrize(("name", "text", "secrets"), FORMATS, ids=[n for n, _, _ in FORMATS])
def test_format_is_redacted(name: str, text: str, secrets: tuple[str, ...]) -> None:
    out, count = redact(text)
    for secret in secrets:
        assert leaked(secret, out) is None, f"{name}: {leaked(secret, out)!r} survived in {out!r}"
    assert count >= 1 and "[REDACTED:" in out
    assert redact(out) == (out, 0), "redacting twice changes nothing"


@pytest.mark.parametrize(("name", "text"), NEGATIVES, ids=[n for n, _ in NEGATIVES])
def test_look_alike_is_untouched(name: str, text: str) -> None:
    assert redact(text) == (text, 0)


def test_all_formats_in_one_transcript() -> None:
    out, count = redact("\n\n".join(text for _, text, _ in FORMATS))
    assert count >= len(FORMATS)
    for name, _, secrets in FORMATS:
        for secret in secrets:
            assert leaked(secret, out) is None, name


def test_structured_feedback_is_redacted_in_every_string() -> None:
    fb = {"lesson": [text for _, text, _ in FORMATS], "dont": "never print " + FORMATS[0][1]}
    out, _ = redact_obj(fb)
    flat = repr(out)
    for name, _, secrets in FORMATS:
        for secret in secrets:
            assert leaked(secret, flat) is None, name
