"""Secrets in shapes a previous pass left in clear (session 7): split or disguised by invisible characters, short
session cookies, base64 (`!!binary`, or a blob that decodes to a token or `user:password`), and prefix-less values
wrapped over lines under a secret key. Each case pins the exact redacted text, so a fix that swallows the text
around a secret fails as surely as one that leaks it."""

from __future__ import annotations

import json

import pytest

from reef_cli.redact import redact

GH = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
PROJ = "sk-proj-Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp3rSt6vWx9z"
AKIA = "AKIAIOSFODNN7EXAMPLE"
XOXB = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"


def fixed(text: str, want: str | None) -> None:
    """`want` is the redacted text; None: the text comes through untouched. Redacting twice changes nothing."""
    out, count = redact(text)
    assert out == (text if want is None else want)
    assert count == 0 if want is None else count >= 1
    assert redact(out) == (out, 0)


# 1. Invisible characters. A zero-width space / non-joiner / joiner, a word joiner, a BOM or a soft hyphen inside a
# known-prefix token hid it from its pattern; a no-break space (U+00A0, U+202F) as the separator or the space beside
# it hid a `KEY=value` / `password: value` pair. What a terminal shows (and what `.strip()`/a YAML loader returns)
# is the secret, so the whole token goes, the invisible characters inside it too; one outside it stays.
@pytest.mark.parametrize("mark", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])
@pytest.mark.parametrize(("token", "kind"), [(GH, "github_token"), (PROJ, "openai_key"), (AKIA, "aws_access_key"),
                                             (XOXB, "slack_token")])
def test_a_token_split_by_an_invisible_character(mark: str, token: str, kind: str) -> None:
    fixed(f"token {token[:9]}{mark}{token[9:]} used", f"token [REDACTED:{kind}] used")
    fixed(f"token {mark.join(token)}{mark} used", f"token [REDACTED:{kind}]{mark} used")  # one after every char


@pytest.mark.parametrize(("text", "want"), [
    ("API_KEY\u00a0=\u00a0x9Fq2Lm8Zp", "API_KEY\u00a0=\u00a0[REDACTED:api_key]"),
    ("password:\u00a0Hunter2xyz9", "password:\u00a0[REDACTED:password]"),
    ("password\u202f: Hunter2xyz9\nhost: db", "password\u202f: [REDACTED:password]\nhost: db"),
    ("tool\u00a0--password\u00a0hunter2x --verbose", "tool\u00a0--password\u00a0[REDACTED:password] --verbose"),
    ("db:\n  password:\u00a0|\n    s3cretPw9\n", "db:\n  password:\u00a0|\n    [REDACTED:password]\n"),
    ("password:\n  s3cr\u200betPw9\n", "password:\n  [REDACTED:password]\n"),
    ("AKIA\u00adIOSFODNN7EXAMPLE\u00ad rest", "[REDACTED:aws_access_key]\u00ad rest"),
    # in a transcript's JSON the characters come escaped
    (json.dumps({"t": GH[:9] + "\u200b" + GH[9:]}), '{"t": "[REDACTED:github_token]"}'),
    (json.dumps({"c": "PGPASSWORD=\u00a0hunter2x psql"}), '{"c": "PGPASSWORD=\\u00a0[REDACTED:password] psql"}'),
    # look-alikes: prose with no-break spaces, a BOM, a one-word value (as with a plain space)
    ("Hello\u00a0world, caf\u00e9 \u00a0\u2014 the password\u00a0manager\ufeff", None),
    ("\ufeffimport os\nprint('token\u00a0count', n)\n", None),
    ("password:\u00a0hunter", None),
    ("Pass\u00a0--password to be prompted", None),
])
def test_a_pair_beside_a_no_break_space_or_split_by_an_invisible_character(text: str, want: str | None) -> None:
    fixed(text, want)
