"""Redaction against a corpus of realistic fake secrets, and ordinary text that must come through untouched.

The fakes are generated at run time (seeded), so no secret-shaped literal sits in the repository to trip
secret scanners, and every run tests the same strings.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string

import pytest

from reef_cli.errors import InvalidInput
from reef_cli.redact import EXCERPT_CHARS, content_fields, is_secret_key, redact, redact_obj

rng = random.Random(20260101)
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"


def chars(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


JWT = ".".join(
    [
        b64url(b'{"alg":"HS256","typ":"JWT"}'),
        b64url(b'{"sub":"1234567890","name":"Jo Doe","iat":1516239022}'),
        b64url(bytes(rng.randrange(256) for _ in range(32))),
    ]
)
S = {
    "openai_legacy": "sk-" + chars(ALNUM, 20) + "T3BlbkFJ" + chars(ALNUM, 20),
    "openai_project": "sk-proj-" + chars(URLSAFE, 74) + "T3BlbkFJ" + chars(URLSAFE, 74),
    "openai_service": "sk-svcacct-" + chars(URLSAFE, 60),
    "anthropic": "sk-ant-api03-" + chars(URLSAFE, 93) + "AA",
    "openrouter": "sk-or-v1-" + chars("0123456789abcdef", 64),
    "aws": "AKIA" + chars(string.ascii_uppercase + string.digits, 16),
    "aws_session": "ASIA" + chars(string.ascii_uppercase + string.digits, 16),
    "aws_secret": chars(ALNUM + "/+", 40),
    "github_classic": "ghp_" + chars(ALNUM, 36),
    "github_oauth": "gho_" + chars(ALNUM, 36),
    "github_app": "ghs_" + chars(ALNUM, 36),
    "github_fine": "github_pat_" + chars(ALNUM, 22) + "_" + chars(ALNUM, 59),
    "slack_bot": "xoxb-" + chars(string.digits, 12) + "-" + chars(string.digits, 13) + "-" + chars(ALNUM, 24),
    "slack_user": "xoxp-" + chars(string.digits, 12) + "-" + chars(string.digits, 12) + "-" + chars(ALNUM, 32),
    "google": "AIza" + chars(URLSAFE, 35),
    "stripe_live": "sk_live_" + chars(ALNUM, 24),
    "stripe_restricted": "rk_live_" + chars(ALNUM, 24),
    "huggingface": "hf_" + chars(string.ascii_letters, 34),
    "gitlab": "glpat-" + chars(URLSAFE, 20),
    "npm": "npm_" + chars(ALNUM, 36),
    "opaque": chars(string.ascii_lowercase + string.digits, 40),
    "password": "Tr0ub4dor&3-" + chars(ALNUM, 6),
}
PEM_BODY = "\n".join(base64.b64encode(bytes(rng.randrange(256) for _ in range(48))).decode() for _ in range(6))

# (text, secret that must disappear, kind expected in its place)
POSITIVES = [
    (f"OPENAI_API_KEY={S['openai_legacy']}", S["openai_legacy"], "openai_key"),
    (f"client = OpenAI(api_key=\"{S['openai_project']}\")", S["openai_project"], "openai_key"),
    (f"using {S['openai_service']} for batch jobs", S["openai_service"], "openai_key"),
    (f"export ANTHROPIC_API_KEY='{S['anthropic']}'", S["anthropic"], "anthropic_key"),
    (f"x-api-key: {S['anthropic']}", S["anthropic"], "anthropic_key"),
    (f"OPENROUTER_API_KEY={S['openrouter']}", S["openrouter"], "openrouter_key"),
    (f"aws_access_key_id = {S['aws']}", S["aws"], "aws_access_key"),
    (f"creds: {S['aws_session']},", S["aws_session"], "aws_access_key"),
    (f"aws_secret_access_key = {S['aws_secret']}", S["aws_secret"], "api_key"),
    (f"git clone https://{S['github_classic']}@github.com/org/repo.git", S["github_classic"], "github_token"),
    (f"GH_TOKEN={S['github_oauth']}", S["github_oauth"], "github_token"),
    (f"token {S['github_app']}", S["github_app"], "github_token"),
    (f"GITHUB_PAT: {S['github_fine']}", S["github_fine"], "github_token"),
    (f"SLACK_BOT_TOKEN={S['slack_bot']}", S["slack_bot"], "slack_token"),
    (f"slack: {S['slack_user']}", S["slack_user"], "slack_token"),
    (f"maps?key={S['google']}&q=paris", S["google"], "google_api_key"),
    (f"stripe.api_key = \"{S['stripe_live']}\"", S["stripe_live"], "stripe_key"),
    (f"{S['stripe_restricted']}", S["stripe_restricted"], "stripe_key"),
    (f"huggingface-cli login --token {S['huggingface']}", S["huggingface"], "huggingface_token"),
    (f"CI_JOB: glab auth login --token {S['gitlab']}", S["gitlab"], "gitlab_token"),
    (f"//registry.npmjs.org/:_authToken={S['npm']}", S["npm"], "npm_token"),
    (f"cookie: session={JWT}; path=/", JWT, "jwt"),
    (f'curl -H "Authorization: Bearer {S["opaque"]}" https://api.example.com', S["opaque"], "bearer_token"),
    (f"authorization: bearer {S['opaque']}", S["opaque"], "bearer_token"),
    (f'{{"headers": {{"Authorization": "Basic {base64.b64encode(b"admin:hunter22").decode()}"}}}}',
     base64.b64encode(b"admin:hunter22").decode(), "authorization"),
    (f"retrying with bearer {S['opaque']} after 401", S["opaque"], "bearer_token"),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", PEM_BODY, "private_key"),
    (f"key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n-----END OPENSSH PRIVATE KEY-----\nok",
     PEM_BODY, "private_key"),
    (f"DATABASE_URL=postgres://admin:{S['password']}@db.internal:5432/app", S["password"], "url_password"),
    (f"pip install --index-url https://deploy:{S['opaque']}@pypi.example.com/simple pkg", S["opaque"],
     "url_password"),
    (f"DB_PASSWORD={S['password']}", S["password"], "password"),
    (f"export SENTRY_AUTH_TOKEN={S['opaque']}", S["opaque"], "token"),
    (f'API_KEY: "{S["opaque"]}"', S["opaque"], "api_key"),
    (f'{{"api_key": "{S["opaque"]}", "model": "x"}}', S["opaque"], "api_key"),
    (f"password = '{S['password']}'", S["password"], "password"),
    (f"spring.datasource.password={S['password']}", S["password"], "password"),
    (f"clientSecret: {S['password']}", S["password"], "secret"),
    (f"mysql -u root --password={S['password']} app", S["password"], "password"),
    (f"Password: {S['password']}", S["password"], "password"),
    (f"GET /callback?access_token={S['opaque']}&state=x", S["opaque"], "token"),
    (f"SECRET_KEY=django-insecure-{S['opaque']}", S["opaque"], "api_key"),
    (f'"x-api-key": "{S["opaque"]}"', S["opaque"], "api_key"),
    (f'{{"key": "-----BEGIN EC PRIVATE KEY-----\\n{PEM_BODY[:80]}\\n-----END EC PRIVATE KEY-----"}}', PEM_BODY[:80],
     "private_key"),
    (f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY[:100]}", PEM_BODY[:100], "private_key"),  # cut off: last
]

NEGATIVES = [
    "def get_token(self):\n    token = self._cache.get(key)\n    return token",
    "tokenizer = AutoTokenizer.from_pretrained('gpt2')",
    "response = client.chat(max_tokens=4096, temperature=0)",
    "rows.sort(key=lambda r: r.seq)\nsort_key = lambda r: r.created_at",
    "primary_key: id\nforeign_key: user_id",
    "api_key = os.environ['OPENAI_API_KEY']",
    'api_key = os.environ.get("OPENAI_API_KEY")',
    "def connect(host: str, password: str = None, token: Optional[str] = None) -> Conn:",
    "client = Client(api_key=api_key, token=self.token)",
    "headers = {'Authorization': f'Bearer {token}'}",
    'headers = {"Authorization": "Bearer " + token}',
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main); short 3f78685",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    "The string SGVsbG8sIHdvcmxkIQ== decodes to 'Hello, world!'.",
    "Please rotate the token before the secret expires, and use a password manager.",
    "The bearer of this letter is a friend. Bearer tokens are described in RFC 6750.",
    "Authorization: required for every endpoint below.",
    "the token: expired yesterday, so the password: was reset",
    "sk-learn is not a package; scikit-learn is. See task-1234567890abcdefghijk and risk-assessment-v2.",
    "https://example.com:8443/path?q=1 and git@github.com:org/repo.git and ssh://git@github.com/org/repo",
    "mailto:user@example.com, https://user@example.com/repo",
    "DATABASE_URL=postgres://app:${DB_PASSWORD}@db/app",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
    "-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
    "-----END CERTIFICATE-----",
    '{"token_type": "Bearer", "expires_in": 3600, "max_tokens": 1024}',
    "TOKEN_LIMIT=4000\nPASSWORD_FILE=/run/secrets/db_password\nSECRET_NAME=prod-db",
    "secretName: my-secret\nsecretKeyRef:\n  name: db\n  key: password",
    "key: ${{ runner.os }}-pip-${{ hashFiles('**/requirements.txt') }}",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    'cache_key = f"{user}:{day}"',
    '{"key": "value", "name": "x"}',
    "from huggingface_hub import hf_hub_download; os.environ['HF_HUB_ENABLE_HF_TRANSFER'] = '1'",
    "npm_config_cache=/tmp/npm; eyJhbGciOiJIUzI1NiJ9 is just a base64 header",
    "Never use password123 as your password.",
    "API_KEY=<your-api-key>\nSECRET_KEY=changeme-later\n".split("\n")[0],
    "password: ********",
    'if line.startswith("-----BEGIN RSA PRIVATE KEY-----"):\n    return parse(line)',
    'BEGIN = "-----BEGIN PRIVATE KEY-----"\nEND = "-----END PRIVATE KEY-----"',
    "if token == expected_token and secret != '':",
    "AKIA is the prefix of AWS access key ids; AKIAEXAMPLE is too short.",
]


@pytest.mark.parametrize(("text", "secret", "kind"), POSITIVES, ids=[f"pos{i}" for i in range(len(POSITIVES))])
def test_secret_is_redacted(text: str, secret: str, kind: str) -> None:
    redacted, count = redact(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted
    assert count >= 1
    assert redact(redacted) == (redacted, 0)  # already-redacted text is left alone


@pytest.mark.parametrize("text", NEGATIVES, ids=[f"neg{i}" for i in range(len(NEGATIVES))])
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == (text, 0)


def test_url_password_keeps_scheme_user_and_host() -> None:
    redacted, count = redact(f"postgres://admin:{S['password']}@db.internal:5432/app")
    assert (redacted, count) == ("postgres://admin:[REDACTED:url_password]@db.internal:5432/app", 1)


def test_assignments_keep_their_shape() -> None:
    assert redact(f'export FOO_TOKEN="{S["opaque"]}"')[0] == 'export FOO_TOKEN="[REDACTED:token]"'
    assert redact(f'"password": "{S["password"]}"')[0] == '"password": "[REDACTED:password]"'
    assert redact(f"Authorization: Bearer {S['opaque']}")[0] == "Authorization: Bearer [REDACTED:bearer_token]"


def test_a_transcript_with_many_secrets_counts_each() -> None:
    text = "\n".join(t for t, _, _ in POSITIVES)
    redacted, count = redact(text)
    assert count >= len(POSITIVES)
    for _, secret, _ in POSITIVES:
        assert secret not in redacted


def test_redact_refuses_non_text() -> None:
    with pytest.raises(InvalidInput, match="redact takes text, not bytes"):
        redact(b"x")


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("OPENAI_API_KEY", True), ("apiKey", True), ("X-Api-Key", True), ("client_secret", True),
        ("db.password", True), ("PASSWD", True), ("aws_secret_access_key", True), ("refresh_token", True),
        ("stripeKey", True), ("max_tokens", False), ("token_type", False), ("sort_key", False),
        ("primary_key", False), ("key", False), ("tokenizer", False), ("PASSWORD_FILE", False),
        ("public_key", False), ("secretName", False), ("api_key_id", False), ("monkey", False),
    ],
)
def test_secret_key_names(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_redact_obj_walks_containers_and_knows_secret_keys() -> None:
    original = {
        "password": "hunter2",
        "pin_password": 123456,
        "empty_password": "",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": f"my key is {S['openai_legacy']}"}, ("tuple", S["github_classic"])],
        "nested": {"api_key": S["opaque"], "note": "the token is fine"},
        "flag": True,
    }
    snapshot = json.dumps(original, default=list)
    redacted, count = redact_obj(original)
    assert redacted["password"] == "[REDACTED:password]"
    assert redacted["pin_password"] == "[REDACTED:password]"
    assert redacted["empty_password"] == "" and redacted["max_tokens"] == 100 and redacted["flag"] is True
    assert redacted["messages"][0]["content"] == "my key is [REDACTED:openai_key]"
    assert redacted["messages"][1] == ("tuple", "[REDACTED:github_token]")
    assert redacted["nested"] == {"api_key": "[REDACTED:api_key]", "note": "the token is fine"}
    assert count == 5
    assert json.dumps(original, default=list) == snapshot  # the input is not modified
    assert redact_obj(redacted) == (redacted, 0)
    assert redact_obj(None) == (None, 0)


def test_content_fields_digest_the_original_and_redact_the_excerpt() -> None:
    secret = S["github_classic"]
    text = "x" * (EXCERPT_CHARS - 11) + " " + secret + " and more text " * 50
    fields = content_fields(text, store_content=False)
    assert fields["digest"] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    assert fields["length"] == len(text.encode())
    assert "text" not in fields
    assert secret[:8] not in fields["excerpt"]  # straddling the cut: redacted whole, marker kept whole
    assert fields["excerpt"].endswith("[REDACTED:github_token]")
    assert len(fields["excerpt"]) <= EXCERPT_CHARS + len("[REDACTED:github_token]")

    stored = content_fields(text, store_content=True)
    assert stored["text"] == text.replace(secret, "[REDACTED:github_token]")
    assert stored["excerpt"] == fields["excerpt"] and stored["digest"] == fields["digest"]


def test_content_fields_takes_bytes_and_odd_text() -> None:
    raw = b"caf\xc3\xa9 \xff\xfe " + f"DB_PASSWORD={S['password']}".encode()
    fields = content_fields(raw, store_content=True)
    assert fields["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest() and fields["length"] == len(raw)
    assert fields["text"] == "café \ufffd\ufffd DB_PASSWORD=[REDACTED:password]"
    lone = content_fields("a\ud800b", store_content=True)
    assert lone["text"] == "a\ufffdb" and lone["text"].encode("utf-8")
    assert content_fields("", store_content=False) == {
        "digest": "sha256:" + hashlib.sha256(b"").hexdigest(), "length": 0, "excerpt": ""
    }
    with pytest.raises(InvalidInput, match="content must be text or bytes"):
        content_fields(None, store_content=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "want"), [
    ("mysql -uroot -phunter2xyz db", "mysql -uroot -p[REDACTED:password] db"),
    ("mysqldump -p'S3cr3t!'", "mysqldump -p'[REDACTED:password]'"),
    ("mysql -uroot -psecret db", "mysql -uroot -p[REDACTED:password] db"),  # one plain word: attached, so a password
    ("mysql --password=secret app", "mysql --password=[REDACTED:password] app"),
    ("mysql --password hunter2xyz app", "mysql --password [REDACTED:password] app"),
    # look-alikes: a prompt followed by the database, ports, pids, options of other tools
    ("mysql -u root -p app", None), ("mysql --password app", None), ("-p 8080", None), ("mkdir -p dir", None),
    ("ssh -p 22 host", None), ("cp -pr a b", None), ("mysql -h db; cp -pr a b", None), ("ps -u root -p1234", None),
])
def test_mysql_style_password_flags(text: str, want: str | None) -> None:
    assert redact(text)[0] == (text if want is None else want)


def test_the_assignment_rule_is_skipped_only_where_its_key_word_cannot_be():
    """_scan skips `_ASSIGNMENT` (so a short text never compiles it) unless the text holds one of the words its key
    must hold: every word of the pattern's own alternation has to be covered by the skip check's list."""
    import re as _re

    from reef_cli.redact import scan, shapes

    words = _re.search(r"\(\?i:([a-z|]+)\)\)", shapes._ASSIGNMENT.pattern).group(1).split("|")
    assert words and all(any(short in word for short in scan._SECRET_KEY_WORDS) for word in words)
    assert redact("export MY_PAT=ghx9Lk2mQ7vRt4Wz8Yp1")[0] == "export MY_PAT=[REDACTED:secret]"


@pytest.mark.parametrize("text, want", [
    ('Authorization: DiGEST username="bob", realm="x", response="6629fae49393a05397450978507c4ef1"',
     "Authorization: DiGEST [REDACTED:authorization]"),
    ("Server=db;PaSsWoRd=hunter2secret;Database=x", "Server=db;PaSsWoRd=[REDACTED:password];Database=x"),
    ("a\nServer=db;pWd=hunter2secret;Database=x\nb", "a\nServer=db;pWd=[REDACTED:password];Database=x\nb"),
])
def test_a_prefilter_finds_its_word_in_any_case(text, want):
    """The rules ignore case but their prefilters did not: a mixed-case `DiGEST` kept the response hash and a
    `PaSsWoRd=` in a connection string kept the password."""
    from conftest import fixed

    fixed(text, want)
