"""Secrets said in plain words ("my password is X", "pw=X", "비밀번호는 X"): the value after a keyword goes when it
reads as a credential, and prose, code and placeholders that name a secret come through untouched (the rule is in
reef_cli/redact/plain.py). Each case pins the exact redacted text; one test goes through the real `reef report`."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import fixed, reef_init, run_reef
from reef_cli.redact import redact, redact_argv, redact_obj


@pytest.mark.parametrize(("text", "want"), [
    ("my password is Hunter5Secret", "my password is [REDACTED:password]"),
    ("The password is Hunter5Secret.", "The password is [REDACTED:password]."),
    ("pw=Hunter5Secret", "pw=[REDACTED:password]"),
    ("PW: Hunter5Secret", "PW: [REDACTED:password]"),
    ("passwd Hunter5Secret", "passwd [REDACTED:password]"),
    ("pass: Hunter5Secret", "pass: [REDACTED:password]"),
    ("it failed (pass: hunter22)", "it failed (pass: [REDACTED:password])"),
    ("password - Hunter5Secret", "password - [REDACTED:password]"),
    ("password -> Hunter5Secret", "password -> [REDACTED:password]"),
    ("passphrase Hunter5Secret", "passphrase [REDACTED:password]"),
    ("password is hunter2", "password is [REDACTED:password]"),
    ("my password is P@ssword", "my password is [REDACTED:password]"),
    ("my password is CorrectHorse", "my password is [REDACTED:password]"),
    ("my password is correcthorsebattery", "my password is [REDACTED:password]"),
    ("my password is 12345678", "my password is [REDACTED:password]"),
    ("password is now Hunter5Secret!", "password is now [REDACTED:password]"),
    ("password changed to Hunter5Secret", "password changed to [REDACTED:password]"),
    ("the password for root is Hunter5Secret", "the password for root is [REDACTED:password]"),
    ("password of the db: Hunter5Secret", "password of the db: [REDACTED:password]"),
    ('my password is "Hunter5Secret", ok?', 'my password is "[REDACTED:password]", ok?'),
    ("the password is `Hunter5Secret`", "the password is `[REDACTED:password]`"),
    ("the password is **Hunter5Secret**", "the password is **[REDACTED:password]**"),
    ("<p>the password is Hunter5Secret</p>", "<p>the password is [REDACTED:password]</p>"),
    ("token is abc123def456ghi789", "token is [REDACTED:token]"),
    ("the token: abc123def456ghi789, rotate it", "the token: [REDACTED:token], rotate it"),
    ("api key: Zx8kP2mQ9vL4", "api key: [REDACTED:api_key]"),
    ("The API key is Zx8kP2mQ9vL4.", "The API key is [REDACTED:api_key]."),
    ("access key = AbCdEf123456", "access key = [REDACTED:api_key]"),
    ("client secret is Zx8kP2mQ9vL4", "client secret is [REDACTED:secret]"),
    ("the secret is Zx8kP2mQ9vL4", "the secret is [REDACTED:secret]"),
    ("credentials are admin/Hunter5Secret", "credentials are admin/[REDACTED:password]"),
    ("creds: deploy:Hunter5Secret", "creds: deploy:[REDACTED:password]"),
    ("credentials are admin/admin", "credentials are admin/[REDACTED:password]"),
    ("the creds are root/toor", "the creds are root/[REDACTED:password]"),
])
def test_a_secret_said_in_words_is_redacted(text: str, want: str) -> None:
    fixed(text, want)


@pytest.mark.parametrize(("text", "want"), [
    ("비밀번호는 Hunter5Secret", "비밀번호는 [REDACTED:password]"),
    ("비밀번호는 Hunter5Secret입니다", "비밀번호는 [REDACTED:password]입니다"),
    ("제 비밀번호가 Hunter5Secret 이에요", "제 비밀번호가 [REDACTED:password] 이에요"),
    ("비번: Hunter5Secret", "비번: [REDACTED:password]"),
    ("암호 Hunter5Secret", "암호 [REDACTED:password]"),
    ("패스워드 = Hunter5Secret", "패스워드 = [REDACTED:password]"),
    ("토큰은 abc123def456ghi", "토큰은 [REDACTED:token]"),
    ("새 비밀번호를 hunter22로 바꿨어요", "새 비밀번호를 [REDACTED:password]로 바꿨어요"),
])
def test_a_secret_said_in_korean_is_redacted(text: str, want: str) -> None:
    fixed(text, want)


@pytest.mark.parametrize("text", [
    # prose that names a secret
    "the password is required",
    "password reset link",
    "password is wrong",
    "token is expired",
    "the secret is to test early",
    "password field",
    "passwords are hashed with bcrypt",
    "my password is the same as before",
    "the password must be at least 8 characters",
    "password is sha256-hashed; the token is base64-encoded; password hashing: argon2id",
    "password: see 1Password",
    "the secret sauce is TypeScript",
    "credentials are user/pass; credentials are read/write",
    "secret is stored in vault01.prod; token endpoint: auth2.example.com",
    "pass 2 of 3 failed; the pass rate was 98.5%; pass: 12 fail: 0",
    "token count: 4096; max tokens: 8192 tokens; token is 3600s; token is 123456",
    "revoked token 3f9a12bc7d (a log names a token by its id)",
    "password123 is a bad password",
    "passwd anonymous@",
    "printf(&quot;Password is correct.&quot;);",
    # masks, placeholders, references
    "pw=<redacted>",
    "password: ********",
    "api key: $OPENAI_API_KEY; api key: sk-xxxxxxxx; token: ${{ secrets.TOKEN }}",
    "password: %(password)s; pw={pw}",
    # code
    "password = getpass()",
    'password=os.environ["PW"]',
    "pw = request.form['pw']",
    "password: str",
    "password=None",
    "password: Optional[str] = None",
    "if token is None:\n    pass",
    "if password == password2:",
    "password = self.password2\npw = pw_hash123\n$pw = ConvertTo-SecureString",
    "pass: tests/test_v2.py::test_x; token file: token.json",
    "password: !!binary",
    # Korean prose
    "비밀번호는 8자 이상이어야 합니다",
    "비밀번호 변경 완료",
    "암호화 키를 바꿨다",
    "암호는 AES256",
    "비밀번호는 1234",
    "토큰 3f9a12bc7d 폐기됨; 토큰 span을 검증한다",
])
def test_prose_and_code_that_name_a_secret_are_untouched(text: str) -> None:
    fixed(text, None)


def test_the_rule_reads_each_value_of_a_line() -> None:
    fixed("pw=Hunter5Secret and the token is abc123def456ghi789; password field",
          "pw=[REDACTED:password] and the token is [REDACTED:token]; password field")


def test_structured_feedback_and_a_command_line() -> None:
    out, count = redact_obj({"lesson": "my password is Hunter5Secret", "notes": ["비번: Hunter5Secret"]})
    assert out == {"lesson": "my password is [REDACTED:password]", "notes": ["비번: [REDACTED:password]"]}
    assert count == 2
    assert redact_argv(["echo", "my", "password", "is", "Hunter5Secret"]) == [
        "echo", "my", "password", "is", "[REDACTED:password]"]


def test_in_a_transcript_line_escaped_once_and_twice() -> None:
    line = json.dumps({"role": "user", "content": "my password is Hunter5Secret\nthanks"})
    assert redact(line) == (json.dumps({"role": "user", "content": "my password is [REDACTED:password]\nthanks"}), 1)
    korean = json.dumps({"content": json.dumps({"text": "비밀번호는 Hunter5Secret입니다"})})  # \uXXXX escapes
    out, count = redact(korean)
    assert "Hunter5Secret" not in out and count >= 1
    assert json.loads(json.loads(out)["content"]) == {"text": "비밀번호는 [REDACTED:password]입니다"}


def test_reef_report_never_stores_a_password_said_in_words(tmp_path) -> None:
    """Through the real CLI: feedback that says a password in words reaches the ledger file without it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    reef_init(tmp_path)
    receipt = run_reef("run", "--", "true", cwd=tmp_path).stderr.split("receipt ", 1)[1].split()[0]
    feedback = "it logged in, but my password is Hunter5Secret and 비밀번호는 Zx8kP2mQ9vL4입니다; password field ok"
    r = run_reef("report", "--score", "0", "--feedback", feedback, "--receipt", receipt, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stored = b"".join(p.read_bytes() for p in (tmp_path / ".reef").rglob("*") if p.is_file())
    ledger = (tmp_path / ".reef" / "scenarios" / "default" / "ledger.jsonl").read_bytes()
    assert b"Hunter5Secret" not in stored and b"Zx8kP2mQ9vL4" not in stored
    assert b"my password is [REDACTED:password]" in ledger
    assert "비밀번호는 [REDACTED:password]입니다".encode() in ledger or (
        json.dumps("비밀번호는 [REDACTED:password]입니다")[1:-1].encode() in ledger)
    assert b"password field ok" in ledger
