"""Secrets in shapes a previous pass left in clear (session 7): split or disguised by invisible characters, short
session cookies, base64 (`!!binary`, or a blob that decodes to a token or `user:password`), and prefix-less values
wrapped over lines under a secret key. Each case pins the exact redacted text, so a fix that swallows the text
around a secret fails as surely as one that leaks it."""

from __future__ import annotations

import base64
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
    ("password: |\n  s3cr\u200betPw9\n  m0reLine9\nhost: x\n", "password: |\n  [REDACTED:password]\nhost: x\n"),
    ("changes:\n  * fix\u00a0this\n    and that\n  * more\n", None),
    ("password:\u00a0|\n" + "  Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4f\n" * 300 + "host: x\n",
     "password:\u00a0|\n  [REDACTED:password]\nhost: x\n"),
    ("password:\u00a0|\n  l1abc\n  l2def\ntoken:\u00a0Hunter2xyz\nx",
     "password:\u00a0|\n  [REDACTED:password]\ntoken:\u00a0[REDACTED:token]\nx"),
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


TG = "8460733279:AAKIO2kCJo58QDeB7z2ROZCUAPppprdj4Ly"
SG = "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"
MAILGUN = "key-9164247ee001a6a40fccd12e6fce2a80"
HOOK = "https://hooks.slack.com/services/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"


# Session 8 (a hostile pass): an invisible character in a token's prefix brings its line into the view read without
# them, the line before it too; there a complete token ending a line 40+ columns long took the next line as its
# wrapped rest when that line held another token, so the second token's tail (`:AA...` of a Telegram token, the
# `.X.Y` of a SendGrid key) or the whole of it (a Mailgun key under an OpenAI key, whose pattern runs on) was left
# in clear. The plain text had the same flaw wherever the two sat on consecutive lines.
@pytest.mark.parametrize(("text", "want"), [
    (f"{GH[:2]}\u200b{GH[2:]}\n{TG}", "[REDACTED:github_token]\n[REDACTED:telegram_token]"),
    (f"{GH}\n{TG}", "[REDACTED:github_token]\n[REDACTED:telegram_token]"),
    (f"{GH[:3]}\u2060{GH[3:]}\n{SG}", "[REDACTED:github_token]\n[REDACTED:sendgrid_key]"),
    (f"{PROJ[:3]}\u200b{PROJ[3:]}\n{MAILGUN}", "[REDACTED:openai_key]\n[REDACTED:mailgun_key]"),
    (f"({PROJ[:2]}\\u200d{PROJ[2:]}\\n{MAILGUN}\\\"", '([REDACTED:openai_key]\\n[REDACTED:mailgun_key]\\"'),
    (f"{XOXB}\u200b\n{HOOK}", "[REDACTED:slack_token]\u200b\n[REDACTED:slack_webhook]"),
    # still one token: a complete-looking token wrapped at a column, its rest alone on the next line
    (f"key {PROJ}\n  Zz9Yy8Xx7Ww6Vv5\n", "key [REDACTED:openai_key]\n"),
])
def test_an_invisible_character_in_a_prefix_does_not_join_the_next_lines_token(text: str, want: str) -> None:
    fixed(text, want)


def test_hidden_characters_cost_little() -> None:
    """Each secret is mapped back by position, not found again by a pattern built from it (compiling one that
    allows an invisible character between any two characters cost ~0.3 ms per character: 45 ms a token)."""
    import time

    tokens = [PROJ + f"{i:02d}" for i in range(50)]
    text = "".join("log line with nothing in it\n" * 30 + f"key {t[:20]}\u200b{t[20:]} used\n" for t in tokens)
    start = time.perf_counter()
    out, count = redact(text)
    assert count == 50 and PROJ[20:40] not in out
    assert time.perf_counter() - start < 1.0


# 2. Short session cookies. A cookie named for a session or a credential in a `Cookie:` / `Set-Cookie:` header (or
# curl's `-b` / `--cookie`) was a secret only from 16 characters with letters and digits, so a test server's or an
# old framework's short session id (`sid=Xk3J9a`, `PHPSESSID=a1b2c3d4e5`) was stored in clear. Now: from six
# characters with letters and digits, eight with both cases, or sixteen of anything. Outside a header, the names a
# session id goes by (`session`, `sessionid`, `session_id`, `sid`, `PHPSESSID`, `JSESSIONID`, `connect.sid`) with a
# value of eight or more that has a digit and does not read as code. A counter, a lowercase word (`deleted`) or
# another cookie (`lang=en`) stays.
@pytest.mark.parametrize(("text", "want"), [
    ("Cookie: sessionid=abc123def456", "Cookie: sessionid=[REDACTED:cookie]"),
    ("Set-Cookie: sid=Xk3J9a; Path=/; HttpOnly", "Set-Cookie: sid=[REDACTED:cookie]; Path=/; HttpOnly"),
    ("Cookie: lang=en; PHPSESSID=a1b2c3d4e5; theme=dark", "Cookie: lang=en; PHPSESSID=[REDACTED:cookie]; theme=dark"),
    ("Cookie: JSESSIONID=ABC123DEF", "Cookie: JSESSIONID=[REDACTED:cookie]"),
    ("Set-Cookie: connect.sid=s%3Aab12cd; Path=/", "Set-Cookie: connect.sid=[REDACTED:cookie]; Path=/"),
    ("Cookie: session=qZkmPaXy", "Cookie: session=[REDACTED:cookie]"),
    ("curl -b 'sessionid=k2j3h4g5' https://x", "curl -b 'sessionid=[REDACTED:cookie]' https://x"),
    ("curl --cookie \"sid=Xk3J9a\" https://x", "curl --cookie \"sid=[REDACTED:cookie]\" https://x"),
    ("GET /cart;jsessionid=A1B2C3D4E5F6 HTTP/1.1", "GET /cart;jsessionid=[REDACTED:cookie] HTTP/1.1"),
    ("redirect to /login?next=/&sid=k2j3h4g5q8", "redirect to /login?next=/&sid=[REDACTED:cookie]"),
    ("auth ok session=Xk39aZq1 user=bob", "auth ok session=[REDACTED:cookie] user=bob"),
    ("session_id=123e4567-e89b-12d3-a456-426614174000", "session_id=[REDACTED:cookie]"),
    # look-alikes
    ("Cookie: sid=1; lang=en; session_count=3", None),
    ("Set-Cookie: sessionid=deleted; expires=Thu, 01 Jan 1970 00:00:00 GMT", None),
    ("Set-Cookie: session=; Max-Age=0", None),
    ("Cookie: remember_me=true; theme=dark", None),
    ("client = Client(session=session2, sid=os.getsid(0)); session=self.session", None),
    ("sess=make_session(cfg) sid=SID_DEFAULT session=MockSession", None),
    ("git checkout -b session-cookies && sleep 3600s; session=12345678", None),
])
def test_a_short_session_cookie(text: str, want: str | None) -> None:
    fixed(text, want)


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


# 3. Base64. A YAML `!!binary` tag before a secret key's value was taken for the value (`password: !!binary X` kept
# X), and base64 that decodes to a token, a private key, an env file's password or `user:password` was stored in
# clear anywhere but under a secret key or after `Basic`. Decisions: under a secret key a `!!binary` value is data
# (redacted whatever it decodes to, on the line or as a block); anywhere else a `!!binary` block or a base64 run of
# 20+ characters with both cases is redacted only when it decodes to UTF-8 text that holds a secret (every rule is
# run on the decoded text, once: not on a blob inside a blob) or is `user:password` (not `https://...`). Random
# bytes (an icon, a digest), base64 of prose and code stay.
@pytest.mark.parametrize(("text", "want"), [
    (f"password: !!binary {b64('Hunter2xyz9!')}", "password: !!binary [REDACTED:password]"),
    (f"api_key: !!binary \"{b64('s3cret')}\"", 'api_key: !!binary "[REDACTED:api_key]"'),
    (f"password: !!binary |\n  {b64('Hunter2xyz9!')}\n  {b64('more bytes')}\nnext: 1",
     "password: !!binary |\n  [REDACTED:password]\nnext: 1"),
    (f"db:\n  password: !!binary\n    {b64('Hunter2xyz9!')}\n", "db:\n  password: !!binary\n    [REDACTED:password]\n"),
    (f"icon: !!binary |\n  {b64(GH)[:40]}\n  {b64(GH)[40:]}\n", "icon: !!binary |\n  [REDACTED:github_token]\n"),
    (f"$ echo {b64(GH)} | base64 -d", "$ echo [REDACTED:github_token] | base64 -d"),
    (f"creds {b64('admin:Hunter2xyz')} end", "creds [REDACTED:password] end"),
    (f"data:\n  config.env: {b64(chr(10).join(['DEBUG=1', 'DB_PASSWORD=Hunter2xyz9']))}\n",
     "data:\n  config.env: [REDACTED:password]\n"),
    ("tls.crt: x\nblob: " + b64("\n".join(["-----BEGIN PRIVATE KEY-----", "MIIEvQ" * 8, "-----END PRIVATE KEY-----"])),
     "tls.crt: x\nblob: [REDACTED:private_key]"),
    # look-alikes
    (f"icon: !!binary |\n  {b64(bytes(range(0, 200, 3)))}\n  {b64(bytes(range(5, 150, 3)))}\n", None),
    (f"The string {b64('Hello, world! This is ordinary text.')} is base64.", None),
    (f"see {b64('https://example.com/docs/index.html')} and {b64('12:30:45 build started')}", None),
    ("AbstractAsyncContextManager WrapperDescriptorType sha1 3f786850e387550fdab836ed7e6dc881de23001b", None),
    ("com/python/cpython/issues/86360 and /usr/lib/python3/dist-packages/AbcDef", None),
])
def test_base64_that_is_or_holds_a_secret(text: str, want: str | None) -> None:
    fixed(text, want)


B64_LINES = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7Vx3Kf9aPq2Lm",
             "Zp8Qw1Xy4Rt6Uv0Nb3Mc5Ld7Ke9Jf2Hg4Sa6Dd8Ff0Gh1Jk3Lz5Xc7Vb9Nm2Qw4E",
             "rT6yU8iO0pA2sD4fG6hJ8kL0=="]


# 4. Prefix-less values wrapped over lines under a secret key: a quoted string whose closing quote is on a later
# line (a terminal wrapping `"client_secret": "...`), a YAML/INI value whose continuation lines sit deeper than the
# key (a base64 private key body wrapped at 64 or 76 columns after `private_key:`), and the same body starting on
# the line after the key. Only the first line was redacted, or none. Decision: the whole value goes when every
# continuation line is one unbroken run and the joined value reads as random; a word on the next line, the next key
# of the same mapping or prose keeps the old reading (the first line alone, or nothing).
@pytest.mark.parametrize(("text", "want"), [
    ('{"client_secret": "3vlfFrGYJ3GxeYYXwSLQcWtxJTQr1F\nqXSTs98vPlL2aEJXquQrDs0GPRZwwrPwV8", "id": 7}',
     '{"client_secret": "[REDACTED:secret]", "id": 7}'),
    ("  api_token = 'AbC123dEf456GhI789\n      JkL012mNo345'\n", "  api_token = '[REDACTED:token]'\n"),
    ("private_key: " + "\n  ".join(B64_LINES) + "\nhost: db\n", "private_key: [REDACTED:api_key]\nhost: db\n"),
    ("creds:\n  private_key:\n    " + "\n    ".join(B64_LINES) + "\n  user: bob\n",
     "creds:\n  private_key:\n    [REDACTED:api_key]\n  user: bob\n"),
    ("[svc]\nclient_secret = " + B64_LINES[0] + "\n    " + B64_LINES[2] + "\nuser = bob\n",
     "[svc]\nclient_secret = [REDACTED:secret]\nuser = bob\n"),
    # in a transcript's JSON the newline is escaped and the value is one quoted string
    (json.dumps({"out": '"client_secret": "3vlfFrGYJ3GxeYYXwSLQ\ncWtxJTQr1FqXSTs98vPlL2"'}),
     '{"out": "\\"client_secret\\": \\"[REDACTED:secret]\\""}'),
    # the first line alone, as before: a next key at the same depth, a word, prose
    ("password: Hunter2xyz9abcdef12\npassword_hint: x\n", "password: [REDACTED:password]\npassword_hint: x\n"),
    ("db:\n  password: Hunter2xyz9abcdef12\n    note\n", "db:\n  password: [REDACTED:password]\n    note\n"),
    # look-alikes
    ("token:\n  description\n  required\n", None),
    ('"token": "the\nquick brown fox"', None),
    ("api_key:\n  aaaaaaaaaaaaaaaaaaaa\n  bbbbbbbbbbbbbbbbbbbbbbb\n", None),
])
def test_a_value_wrapped_over_lines_without_a_prefix(text: str, want: str | None) -> None:
    fixed(text, want)


@pytest.mark.parametrize("space", ["\u2002", "\u2007", "\u2009", "\u200a", "\u205f", "\u3000"])
def test_a_pair_beside_another_unicode_space(space: str) -> None:
    """The en/em/thin/hair spaces, U+205F and the ideographic space hid a pair as a no-break space did."""
    fixed(f"password:{space}Hunter2xyz9", f"password:{space}[REDACTED:password]")
    fixed(f"API_KEY{space}={space}x9Fq2Lm8Zp", f"API_KEY{space}={space}[REDACTED:api_key]")
    fixed(f"the{space}token{space}count{space}is 3", None)


def test_base64_wrapped_at_76_or_64_columns_is_read_as_one_blob() -> None:
    """`base64 app.env` wraps its output at 76 columns (a PEM-style body at 64); each line decodes alone, so a
    secret that straddles two lines (`DB_PASS` | `WORD=...`) was in no line whole and stayed in clear."""
    env = "DEBUG=1\nLOG_LEVEL=info\nSERVICE=billing-api\nREGION=eu\nDB_PASSWORD=Hunter2xyz9Qq\nX=1\n"
    wrapped = base64.encodebytes(env.encode()).decode()
    assert wrapped.count("\n") == 2  # the password straddles the two lines
    fixed(f"$ base64 app.env\n{wrapped}$ ", "$ base64 app.env\n[REDACTED:password]\n$ ")
    blob = b64(env)
    fixed("data:\n  " + "\n  ".join(blob[i : i + 64] for i in range(0, len(blob), 64)) + "\n",
          "data:\n  [REDACTED:password]\n")
    noise = b64(bytes(range(256)) * 2)
    fixed("\n".join(noise[i : i + 76] for i in range(0, len(noise), 76)), None)


@pytest.mark.parametrize(("text", "want"), [
    ('r = requests.get(url, cookies={"sessionid": "a1b2c3d4e5", "lang": "en"})',
     'r = requests.get(url, cookies={"sessionid": "[REDACTED:cookie]", "lang": "en"})'),
    ("cookies = {'sid': 'Xk3J9a'}", "cookies = {'sid': '[REDACTED:cookie]'}"),
    ('resp.set_cookie("sessionid", "k2j3h4g5", httponly=True)',
     'resp.set_cookie("sessionid", "[REDACTED:cookie]", httponly=True)'),
    ("s.cookies.set('sid', 'Xk3J9a', domain='x')", "s.cookies.set('sid', '[REDACTED:cookie]', domain='x')"),
    ("driver.add_cookie({'name': 'PHPSESSID', 'value': 'a1b2c3d4e5'})",
     "driver.add_cookie({'name': 'PHPSESSID', 'value': '[REDACTED:cookie]'})"),
    # look-alikes: other cookies, counters, and an agent's session id in a transcript line that mentions cookies
    ('resp.set_cookie("theme", "dark"); cookies={"session_count": "3"}', None),
    ('{"sessionId":"0c9f8e7d-1234-5678-9abc-def012345678","message":"set a cookie"}', None),
])
def test_a_session_cookie_handed_to_code(text: str, want: str | None) -> None:
    """requests/httpx `cookies={...}`, Flask/Django `set_cookie`, Selenium `add_cookie`: the same session cookies
    as in a header, read only inside those (a transcript's `"sessionId"` is an agent's session, not a secret)."""
    fixed(text, want)


def test_base64_in_a_transcripts_json_string() -> None:
    """In a JSON string a line break is `\\n`: a base64 line after one was read from the escape's `n`, decoded
    one character off, and a token, `user:password` or an env file's password in it was stored in clear."""
    env = "DEBUG=1\nLOG_LEVEL=info\nSERVICE=billing-api\nREGION=eu\nDB_PASSWORD=Hunter2xyz9Qq\nX=1\n"
    wrapped = base64.encodebytes(env.encode()).decode()
    text = json.dumps({"type": "tool_result", "content": "$ base64 app.env\n" + wrapped})
    fixed(text, '{"type": "tool_result", "content": "$ base64 app.env\\n[REDACTED:password]\\n"}')
    fixed(json.dumps({"content": "x\n" + b64("token " + GH) + "\n"}), '{"content": "x\\n[REDACTED:github_token]\\n"}')
    fixed(json.dumps({"content": "x\n" + b64("admin:Hunter2xyzQ") + "\n"}), '{"content": "x\\n[REDACTED:password]\\n"}')
    fixed(json.dumps({"content": "x\n" + b64("Hello, world! This is ordinary text.") + "\n"}), None)
