"""Redaction gaps a hostile pass found (session 6): shell env assignments named for an auth secret, YAML/INI values
on the line after their key, tokens wrapped over two lines, and the shell operator after a flag's value. Each case
pins the exact redacted text, so a fix that swallows the text around a secret fails as surely as one that leaks it."""

from __future__ import annotations

import json
import random
import string

import pytest

from conftest import fixed
from reef_cli.redact import is_secret_key, redact, redact_obj

rng = random.Random(20261202)
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"


def chars(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


# 1. Env assignments: a name that ends in AUTH holds a password (REDISCLI_AUTH is redis-cli's, REDIS_AUTH and
# NPM_CONFIG__AUTH are common), unless a word before AUTH makes it a switch (NO_AUTH, SKIP_AUTH) or the value is a
# switch or a scheme (0/1, true, basic); the rest of the family (PGPASSWORD, MYSQL_PWD, *_SECRET_*, *_TOKEN,
# *_API_KEY) already redacted and is pinned here. A bare KEY is a secret only when its value looks random.
@pytest.mark.parametrize(("text", "want"), [
    ("REDISCLI_AUTH=s3cretpw redis-cli -h host", "REDISCLI_AUTH=[REDACTED:auth] redis-cli -h host"),
    ("REDISCLI_AUTH=hunter redis-cli ping", "REDISCLI_AUTH=[REDACTED:auth] redis-cli ping"),
    ("sudo -E REDIS_AUTH='s3cret pw' ./start", "sudo -E REDIS_AUTH='[REDACTED:auth]' ./start"),
    ("docker run -e REDIS_AUTH=s3cretPw9 redis", "docker run -e REDIS_AUTH=[REDACTED:auth] redis"),
    ("export NPM_CONFIG__AUTH=dXNlcjpodW50ZXIy", "export NPM_CONFIG__AUTH=[REDACTED:auth]"),
    ("env PROXY_AUTH=bob:hunter2 curl x", "env PROXY_AUTH=[REDACTED:auth] curl x"),
    ("KEY=8f3a9c2b7d1e4f6a0b5c ./deploy", "KEY=[REDACTED:api_key] ./deploy"),
    # already redacted before the fix; pinned
    ("PGPASSWORD=hunter psql -h db", "PGPASSWORD=[REDACTED:password] psql -h db"),
    ("MYSQL_PWD=hunter mysql -uroot", "MYSQL_PWD=[REDACTED:password] mysql -uroot"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY aws s3 ls",
     "AWS_SECRET_ACCESS_KEY=[REDACTED:api_key] aws s3 ls"),
    ("DB_PASS=hunter API_TOKEN=hunter ./run", "DB_PASS=[REDACTED:password] API_TOKEN=[REDACTED:token] ./run"),
    ("SECRET=hunter PASSWD=hunter ./run", "SECRET=[REDACTED:secret] PASSWD=[REDACTED:password] ./run"),
    # look-alikes
    ("PATH=/usr/local/bin:$PATH ls", None),
    ("KEY_COUNT=3 PASS_COUNT=2 TOKEN_LIMIT=4096 ./x", None),
    ("NO_AUTH=1 SKIP_AUTH=true DISABLE_AUTH=yes ENABLE_AUTH=0 REQUIRE_AUTH=1 ./x", None),
    ("AUTH_URL=https://auth.example.com/x AUTH_MODE=oidc OAUTH_PROVIDER=github ./x", None),
    ("HTTP_AUTH=basic REDIS_AUTH=0 AUTH=none ./x", None),
    ("SSH_AUTH_SOCK=/tmp/ssh-x/agent.1 ssh host", None),
    ("KEY=release KEY=$1 KEY=prod-eu-1 ./x", None),
    ("GIT_AUTHOR_NAME=Jo AUTHOR=jo TOKENIZERS_PARALLELISM=false ./x", None),
    ("auth=required redis_auth = get_auth()", None),
])
def test_env_assignments_named_for_an_auth_secret(text: str, want: str | None) -> None:
    fixed(text, want)


# 4. A flag's unquoted value ends at a shell operator: the shell itself splits there, so what follows is the next
# command, kept.
@pytest.mark.parametrize(("text", "want"), [
    ("mysql -pPw12; ls", "mysql -p[REDACTED:password]; ls"),
    ("mysql -pPw12;ls", "mysql -p[REDACTED:password];ls"),
    ("mysql -uroot -pPw12|tee log", "mysql -uroot -p[REDACTED:password]|tee log"),
    ("mysql -pPw12&&echo ok", "mysql -p[REDACTED:password]&&echo ok"),
    ("mysql -pPw12>out.txt", "mysql -p[REDACTED:password]>out.txt"),
    ("redis-cli -a hunter2; echo ok", "redis-cli -a [REDACTED:password]; echo ok"),
    ("tool --password hunter2x; ls", "tool --password [REDACTED:password]; ls"),
    ("curl -u bob:Pw12x9; ls", "curl -u bob:[REDACTED:password]; ls"),
    ("PGPASSWORD=hunter2x; psql", "PGPASSWORD=[REDACTED:password]; psql"),
    ("export PGPASSWORD=hunter2x&& psql", "export PGPASSWORD=[REDACTED:password]&& psql"),
    ("echo $(mysql -pPw12)", "echo $(mysql -p[REDACTED:password])"),
])
def test_a_shell_operator_after_a_value_is_kept(text: str, want: str) -> None:
    fixed(text, want)


@pytest.mark.parametrize(("key", "secret"), [
    ("REDISCLI_AUTH", True), ("REDIS_AUTH", True), ("NPM_CONFIG__AUTH", True), ("AUTH", True),
    ("NO_AUTH", False), ("SKIP_AUTH", False), ("AUTH_URL", False), ("SSH_AUTH_SOCK", False), ("auth", False),
    ("redis_auth", False), ("KEY", False),
])
def test_auth_key_names(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_structured_auth_values() -> None:
    assert redact_obj({"REDIS_AUTH": "hunter", "NO_AUTH": "1", "AUTH": "basic", "PROXY_AUTH": "0"}) == (
        {"REDIS_AUTH": "[REDACTED:auth]", "NO_AUTH": "1", "AUTH": "basic", "PROXY_AUTH": "0"}, 1)


# 2. A YAML/INI value on the line after its key: a block scalar (`password: |`, `>-`, `|2`) under a secret key is
# data whatever it holds; a plain or quoted value on the next, deeper-indented line is taken as a same-line value
# would be. A nested mapping, a list, a comment, a placeholder or prose (words with spaces) under the key is not.
@pytest.mark.parametrize(("text", "want"), [
    ("database:\n  password: |\n    s3cretPw9\n  host: db\n",
     "database:\n  password: |\n    [REDACTED:password]\n  host: db\n"),
    ("database:\n  password: >-\n    s3cretPw9\n  host: db\n",
     "database:\n  password: >-\n    [REDACTED:password]\n  host: db\n"),
    ("stringData:\n  password: |-\n    hunter\n", "stringData:\n  password: |-\n    [REDACTED:password]\n"),
    ("secret: |  # rotated monthly\n  line1abc\n\n  line2def\nnext: 1",
     "secret: |  # rotated monthly\n  [REDACTED:secret]\nnext: 1"),
    ("- api_key: |2\n      Zm9vYmFyYmF6\n  name: x\n", "- api_key: |2\n      [REDACTED:api_key]\n  name: x\n"),
    ("password:\n  s3cretPw9\nhost: db", "password:\n  [REDACTED:password]\nhost: db"),
    ("[db]\npassword =\n    s3cretPw9\nuser = app\n", "[db]\npassword =\n    [REDACTED:password]\nuser = app\n"),
    ('api_key:\n  "s3cret pw 9"\n', 'api_key:\n  "[REDACTED:api_key]"\n'),
    ("  client_secret:\r\n    s3cretPw9\r\n", "  client_secret:\r\n    [REDACTED:secret]\r\n"),
    # look-alikes
    ("password:\n  min_length: 8\n  require_digits: true\n", None),
    ("inputs:\n  token:\n    description: 'GitHub token'\n    required: true\n", None),
    ("tokens:\n  - name: ci\n    scope: read\n", None),
    ("password: |\n  ${DB_PASSWORD}\n", None),
    ("password:\nhost: db\n", None),
    ("Password:\n  then press enter to continue\n", None),
    ("token:\n\techo\nsecret:\n\t./gen-secret.sh\n", None),
    ("token:\n  # set in CI\nname: x\n", None),
    ("run: |\n  echo s3cretPw9\n", None),
])
def test_value_on_the_next_line(text: str, want: str | None) -> None:
    fixed(text, want)


# 3. A token wrapped over lines: a known-prefix token whose line ends inside it (a backslash-newline, or a newline
# and indentation) and whose next line continues its characters is redacted whole. A token that already looks
# complete at the line's end takes the next line only when that line is nothing but a random-looking run and the
# first line is long (a wrap at a column), so a word or a second token on the next line stays its own.
GHP = "ghp_" + chars(ALNUM, 36)
GHP2 = "ghp_" + chars(ALNUM, 36)
PROJ = "sk-proj-" + chars(URLSAFE, 74) + "T3BlbkFJ" + chars(URLSAFE, 74)
ANT = "sk-ant-api03-" + chars(URLSAFE, 93) + "AA"
JWT = "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvIn0." + chars(URLSAFE, 43)
HF = "hf_" + chars(string.ascii_letters, 34)


@pytest.mark.parametrize(("text", "want"), [
    (f"token: {GHP[:20]}\\\n{GHP[20:]}\nnext: 1", "token: [REDACTED:github_token]\nnext: 1"),
    (f"export GH_TOKEN={GHP[:20]}\n    {GHP[20:]}\n", "export GH_TOKEN=[REDACTED:github_token]\n"),
    (f"git clone https://{GHP[:30]}\\\r\n{GHP[30:]}@github.com/o/r",
     "git clone https://[REDACTED:github_token]@github.com/o/r"),
    (f"OPENAI_API_KEY={PROJ[:65]}\n{PROJ[65:145]}\n{PROJ[145:]}\nnext line",
     "OPENAI_API_KEY=[REDACTED:openai_key]\nnext line"),
    (f'curl -H "x-api-key: {ANT[:50]}\\\n{ANT[50:]}" https://api.anthropic.com',
     'curl -H "x-api-key: [REDACTED:anthropic_key]" https://api.anthropic.com'),
    (f"Authorization: Bearer {JWT[:30]}\n  {JWT[30:70]}\n  {JWT[70:]}\n", "Authorization: Bearer [REDACTED:jwt]\n"),
    (f'{{"token": "{HF[:12]}\n{HF[12:]}"}}', '{"token": "[REDACTED:huggingface_token]"}'),
    # look-alikes: the next line is not the token's rest
    (f"grep -rn ghp_\n3f786850e387550fdab836ed7e6dc881de23001b", None),
    (f"see task-12345\n67890abcdefghijklmnop", None),
    (f"{GHP}\n{GHP2}\n", "[REDACTED:github_token]\n[REDACTED:github_token]\n"),
    (f"token {GHP}\nnext step", "token [REDACTED:github_token]\nnext step"),
    (f"token {GHP[:20]}\nnext step", None),
    (f"x = {PROJ}\nrun_tests()", "x = [REDACTED:openai_key]\nrun_tests()"),
    # a wrapped token and a flag continued on the next line, in one text: both go
    (f"GH_TOKEN={GHP[:20]}\\\n{GHP[20:]} mysql -h db \\\n  -phunter5 app",
     "GH_TOKEN=[REDACTED:github_token] mysql -h db -p[REDACTED:password] app"),
])
def test_a_token_wrapped_over_lines(text: str, want: str | None) -> None:
    fixed(text, want)


# Hostile sweep: the password options of common command-line tools, each in the place only a password takes.
@pytest.mark.parametrize(("text", "want"), [
    ("ssh-keygen -t ed25519 -N 's3cret pw' -f k", "ssh-keygen -t ed25519 -N '[REDACTED:password]' -f k"),
    ("ssh-keygen -p -P oldPw9x -N newPw9x -f k", "ssh-keygen -p -P [REDACTED:password] -N [REDACTED:password] -f k"),
    ("zip -r -P hunter out.zip dir; ls", "zip -r -P [REDACTED:password] out.zip dir; ls"),
    ("unzip -P hunter out.zip", "unzip -P [REDACTED:password] out.zip"),
    ("7z a -phunter9 out.7z f", "7z a -p[REDACTED:password] out.7z f"),
    ("sqlcmd -S db -U sa -P 'Str0ng!Pw' -Q 'select 1'", "sqlcmd -S db -U sa -P '[REDACTED:password]' -Q 'select 1'"),
    ("ldapsearch -x -D cn=admin,dc=x -w hunter -b dc=x",
     "ldapsearch -x -D cn=admin,dc=x -w [REDACTED:password] -b dc=x"),
    ("keytool -genkey -storepass hunter1 -keypass hunter2 -alias a",
     "keytool -genkey -storepass [REDACTED:password] -keypass [REDACTED:password] -alias a"),
    ("openssl pkcs12 -export -passout pass:hunter -out a.p12",
     "openssl pkcs12 -export -passout pass:[REDACTED:password] -out a.p12"),
    ("openssl enc -aes256 -k hunter -in f", "openssl enc -aes256 -k [REDACTED:password] -in f"),
    ("smbclient //host/share -U bob%hunter", "smbclient //host/share -U bob%[REDACTED:password]"),
    ("htpasswd -bc /etc/nginx/.htpasswd admin hunter", "htpasswd -bc /etc/nginx/.htpasswd admin [REDACTED:password]"),
    ("htpasswd -nbB admin 'h pw' > users", "htpasswd -nbB admin '[REDACTED:password]' > users"),
    ("$pw = ConvertTo-SecureString 'hunter' -AsPlainText -Force",
     "$pw = ConvertTo-SecureString '[REDACTED:password]' -AsPlainText -Force"),
    ("net use Z: \\\\srv\\share /user:bob hunter9 /persistent:no",
     "net use Z: \\\\srv\\share /user:bob [REDACTED:password] /persistent:no"),
    ("setx API_TOKEN hunter9", "setx API_TOKEN [REDACTED:token]"),
    ("aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "aws configure set aws_secret_access_key [REDACTED:api_key]"),
    ("git config --global credential.password hunter", "git config --global credential.password [REDACTED:password]"),
    ("npm config set //registry.npmjs.org/:_authToken s3cretTok9",
     "npm config set //registry.npmjs.org/:_authToken [REDACTED:token]"),
    ("poetry config http-basic.corp bob hunter", "poetry config http-basic.corp bob [REDACTED:password]"),
    ("gh secret set API_KEY --body hunter9 -R o/r", "gh secret set API_KEY --body [REDACTED:password] -R o/r"),
    ("echo 'hunter' | sudo -S apt-get update", "echo '[REDACTED:password]' | sudo -S apt-get update"),
    ("printf '%s' hunter9 | docker login -u bob --password-stdin ghcr.io",
     "printf '%s' [REDACTED:password] | docker login -u bob --password-stdin ghcr.io"),
    ('echo "bob:hunter" | chpasswd', 'echo "[REDACTED:password]" | chpasswd'),
    # look-alikes
    ("ssh-keygen -t ed25519 -N '' -f k && ssh-keygen -l -f k.pub", None),
    ("zip -r out.zip dir -x '*.git*' && unzip -l out.zip && 7z x -o/tmp a.7z", None),
    ("openssl req -passin env:KEY_PW -passout file:pw.txt -k $PW", None),
    ("sqlcmd -S db -P $SA_PASSWORD; ldapsearch -w \"$LDAP_PW\" -b dc=x", None),
    ("git config --global credential.helper store && git config user.name Jo && aws configure set region x", None),
    ("setx PATH C:\\tools && setx JAVA_HOME C:\\jdk", None),
    ("echo hunter | grep hunt && echo $PW | docker login --password-stdin && echo done | sudo tee f", None),
    ("htpasswd -c /etc/nginx/.htpasswd admin", None),
    ("net use Z: \\\\srv\\share /user:bob /persistent:no", None),
])
def test_password_options_of_common_tools(text: str, want: str | None) -> None:
    fixed(text, want)


def test_tool_rules_match_any_casing_windows_accepts() -> None:
    fixed("$p = convertto-securestring 'hunter' -asplaintext -force",
          "$p = convertto-securestring '[REDACTED:password]' -asplaintext -force")
    fixed("NET USE Z: \\\\srv\\s /USER:bob hunter9", "NET USE Z: \\\\srv\\s /USER:bob [REDACTED:password]")
    fixed("SETX DB_PASSWORD hunter9", "SETX DB_PASSWORD [REDACTED:password]")


# Hostile sweep: credential shapes of headers, files and providers that leaked or came out mangled.
@pytest.mark.parametrize(("text", "want"), [
    # Digest: the parameters (the response is a hash of the password; the marker used to replace `username=`)
    ('Authorization: Digest username="bob", realm="x", nonce="abc", uri="/", response="6629fae49393a05397450978"',
     "Authorization: Digest [REDACTED:authorization]"),
    ('curl -H "Authorization: Digest username=\\"bob\\", response=\\"6629fae4\\"" x',
     'curl -H "Authorization: Digest [REDACTED:authorization]" x'),
    # .pgpass: host:port:database:user:password
    ("db.example.com:5432:app:bob:hunter9", "db.example.com:5432:app:bob:[REDACTED:password]"),
    ("cat ~/.pgpass\n*:*:*:postgres:hunter\nlocalhost:5433:*:app:s3\\:cr\\:et\n",
     "cat ~/.pgpass\n*:*:*:postgres:[REDACTED:password]\nlocalhost:5433:*:app:[REDACTED:password]\n"),
    # PuTTY private key: the Private-Lines body
    ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIM\n"
     "Private-Lines: 2\nAAAAIFr1kG6vN3Zp8bQ2xW0eYtLc9HuM4aSdJfKgRqTzEo5Xw\n"
     "AAAAIBc7mN2pQ4rS6tU8vW0xY2zA4bC6dE8fG0hI2jK4lM6n\n"
     "Private-MAC: 0a1b2c3d\n",
     "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\nAAAAC3NzaC1lZDI1NTE5AAAAIM\n"
     "Private-Lines: 2\n[REDACTED:private_key]\nPrivate-MAC: 0a1b2c3d\n"),
    # Google OAuth refresh tokens, Slack client and cookie tokens
    ("refresh_token 1//0g" + "Ab1Cd2Ef3Gh4" * 6 + "-_xY", "refresh_token [REDACTED:google_oauth]"),
    ("xoxc-1234567890-1234567890-1234567890-" + "ab12" * 16, "[REDACTED:slack_token]"),
    ("d=xoxd-" + "Ab1%2B" * 8 + ";", "d=[REDACTED:slack_token];"),
    # ADO.NET / ODBC connection strings: the password runs to the next `;`
    ("Server=db;User Id=sa;Password=s3cret Pw9;Encrypt=true",
     "Server=db;User Id=sa;Password=[REDACTED:password];Encrypt=true"),
    ('"Driver={ODBC};Server=db;UID=sa;PWD=two words;"', '"Driver={ODBC};Server=db;UID=sa;PWD=[REDACTED:password];"'),
    ("Password=s3cret Pw9;Server=db;", "Password=[REDACTED:password];Server=db;"),
    # look-alikes
    ('WWW-Authenticate: Digest realm="x", nonce="abc", qop="auth"', None),
    ("src/app.py:12:4:E501:line", None),
    ("12:30:45:123:456", None),
    ("Private-Lines: 2 is a field of the PuTTY key format", None),
    ("1//comment and 1//0 are not tokens", None),
    ("Server=db;Database=app;Trusted_Connection=True;", None),
    ("PWD=/home/jo/src ls; cd $PWD", None),
])
def test_sweep_shapes(text: str, want: str | None) -> None:
    fixed(text, want)


# Hostile sweep: a secret literal handed to code by a secret-named key or a credentials call.
@pytest.mark.parametrize(("text", "want"), [
    ('os.environ["API_KEY"] = "hunter2x9abc"', 'os.environ["API_KEY"] = "[REDACTED:api_key]"'),
    ("headers['X-Api-Key'] = 'hunter'", "headers['X-Api-Key'] = '[REDACTED:api_key]'"),
    ('os.environ.setdefault("SECRET_KEY", "hunter2x9abc")',
     'os.environ.setdefault("SECRET_KEY", "[REDACTED:api_key]")'),
    ('os.Setenv("DB_PASSWORD", "hunter")', 'os.Setenv("DB_PASSWORD", "[REDACTED:password]")'),
    ('config.set("auth", "password", "hunter2x9")', 'config.set("auth", "password", "[REDACTED:password]")'),
    ('requests.get(url, auth=("bob", "hunter2x9"))', 'requests.get(url, auth=("bob", "[REDACTED:password]"))'),
    ("HTTPBasicAuth('bob', 'hunter')", "HTTPBasicAuth('bob', '[REDACTED:password]')"),
    ('smtp.login("bob@example.com", "hunter2x9")', 'smtp.login("bob@example.com", "[REDACTED:password]")'),
    ("sent Basic YWRtaW46aHVudGVyMng5 to the proxy", "sent Basic [REDACTED:authorization] to the proxy"),
    # look-alikes
    ('os.environ["API_KEY"] = api_key; env.get("TOKEN", "") ; os.environ.setdefault("SECRET_KEY", "")', None),
    ('fields = ("password", "email"); d["password"] = "********"', None),
    ('requests.get(url, auth=(user, password)); smtp.login(user, pw)', None),
    ("Basic auth is simpler than Basic QWxhZGRpbg (a word, not user:password)", None),
])
def test_secret_literals_handed_to_code(text: str, want: str | None) -> None:
    fixed(text, want)


def test_a_value_on_the_next_line_nested_under_another_key() -> None:
    fixed("auth:\n  api_key:\n    s3cretPw9\n  mode: x\n", "auth:\n  api_key:\n    [REDACTED:api_key]\n  mode: x\n")
    fixed("password:\n  policy: strict\n  token: |\n    s3cretPw9\n",
          "password:\n  policy: strict\n  token: |\n    [REDACTED:token]\n")


def test_adversarial_line_shapes_stay_linear() -> None:
    """400 nested `token:` headers (each a mapping over all the lines under it) took 6 s for 400 KB while the
    next-line rule read every header's whole body; a 160 KB line of `a:1:b:c:` scanned back to the line start for
    every .pgpass candidate. Now a plain value reads one line (a block at most 500), and the scan back 256 chars."""
    import time

    for text in ("".join(" " * i + "token:\n" for i in range(400)) * 5, "a:1:b:c:" * 20000):
        start = time.process_time()  # CPU, not wall: a loaded CI machine must not fail a linear scan
        assert redact(text) == (text, 0)
        assert time.process_time() - start < 3.0


# Hostile sweep, second round: Dockerfile ENV/ARG in the space form, redis AUTH, Ansible's *_pass variables, rclone.
@pytest.mark.parametrize(("text", "want"), [
    ("ENV DB_PASSWORD hunter2x9\nRUN make", "ENV DB_PASSWORD [REDACTED:password]\nRUN make"),
    ("ARG NPM_TOKEN s3cretTok9", "ARG NPM_TOKEN [REDACTED:token]"),
    ("127.0.0.1:6379> AUTH hunter2x9\nOK", "127.0.0.1:6379> AUTH [REDACTED:password]\nOK"),
    ("redis-cli -h cache AUTH default hunter; redis-cli ping",
     "redis-cli -h cache AUTH default [REDACTED:password]; redis-cli ping"),
    ("cache:6379> auth hunter", "cache:6379> auth [REDACTED:password]"),
    ("ansible_become_pass: hunter2x9", "ansible_become_pass: [REDACTED:password]"),
    ("ansible all -e ansible_ssh_pass=hunter2x9 -m ping",
     "ansible all -e ansible_ssh_pass=[REDACTED:password] -m ping"),
    ("db_pass = 'hunter'", "db_pass = '[REDACTED:password]'"),
    ("rclone config create r s3 provider AWS secret_access_key hunter2x9 region eu",
     "rclone config create r s3 provider AWS secret_access_key [REDACTED:api_key] region eu"),
    # look-alikes
    ("ENV PATH /usr/local/bin:$PATH\nENV NODE_ENV production\nARG VERSION 1.2", None),
    ("127.0.0.1:6379> AUTH\n(error) ERR wrong number of arguments; redis-cli CONFIG GET requirepass", None),
    ("proxy_pass http://backend; first_pass = 3; num_pass: 2; bypass: true", None),
    ("psql -W app; mysql --password app", None),
])
def test_sweep_second_round(text: str, want: str | None) -> None:
    fixed(text, want)


def tool_call(command: str) -> str:
    return json.dumps({"type": "tool_use", "name": "Bash", "input": {"command": command}})


# The same shapes inside a tool call's JSON arguments (what an agent transcript mostly is).
@pytest.mark.parametrize(("command", "want"), [
    ("db:\n  password: |\n    hunter\n", "db:\n  password: |\n    [REDACTED:password]\n"),
    ("password:\n  s3cretPw9\n", "password:\n  [REDACTED:password]\n"),
    ("cat <<EOF > Dockerfile\nENV DB_PASSWORD hunter2x9\nEOF",
     "cat <<EOF > Dockerfile\nENV DB_PASSWORD [REDACTED:password]\nEOF"),
    ("ENV DB_PASSWORD hunter2x9", "ENV DB_PASSWORD [REDACTED:password]"),
    ("127.0.0.1:6379> AUTH hunter", "127.0.0.1:6379> AUTH [REDACTED:password]"),
    ("htpasswd -nb admin hunter", "htpasswd -nb admin [REDACTED:password]"),
    ("REDISCLI_AUTH=hunter redis-cli ping", "REDISCLI_AUTH=[REDACTED:auth] redis-cli ping"),
    ("echo hunter | sudo -S ls", "echo [REDACTED:password] | sudo -S ls"),
    ("mysql -pPw12; ls", "mysql -p[REDACTED:password]; ls"),
])
def test_shapes_inside_a_tool_call(command: str, want: str) -> None:
    fixed(tool_call(command), tool_call(want))


def test_a_token_right_after_a_colour_code_whose_escape_was_lost_or_json_escaped() -> None:
    """A hostile pass: `\\u001b[31msk-proj-...` in a request body stored with --store-content (JSON escapes the ESC)
    kept the key in clear, as did `[1mghp_...` and `^[[0;32mAKIA...`: the colour code's final "m" ran into the token."""
    from reef_cli.redact import redact_text

    sk = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
    gh = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    for text, secret in (("\\u001b[31m" + sk + "\\u001b[0m", sk), ("[1m" + gh, gh),
                         ("^[[0;32mAKIAIOSFODNN7EXAMPLE^[[m", "AKIAIOSFODNN7EXAMPLE"), ("[m" + gh, gh)):
        assert secret not in redact_text(text), text
    assert redact_text("xm" + gh) == "xm" + gh  # a letter running into it is still not a token start


def test_a_whole_private_key_block_with_short_lines_is_redacted() -> None:
    """A hostile pass: a BEGIN...END block whose base64 lines were under 40 characters (a short test key, or one
    re-wrapped) was stored in clear, the OPENSSH form with CRLF too."""
    from reef_cli.redact import redact_text

    for text in ("-----BEGIN RSA PRIVATE KEY-----\nMIIEQ10pemBODYabcdefghijklmnop\n-----END RSA PRIVATE KEY-----",
                 "-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEAAAA\r\n-----END OPENSSH PRIVATE KEY-----"):
        out = redact_text(text)
        assert "pemBODY" not in out and "b3BlbnNzaC1rZXkt" not in out and "[REDACTED:private_key]" in out, out
    code = 'if line.startswith("-----BEGIN RSA PRIVATE KEY-----"): return "-----END RSA PRIVATE KEY-----"'
    assert redact_text(code) == code  # code naming the markers, no key between them


def test_a_password_inside_a_terminal_hyperlink_is_redacted() -> None:
    """A hostile pass: OSC 8 hyperlinks (`ESC ]8;;URL ESC \\`) were stripped as colour codes before the search and the
    text kept as it was when nothing was found outside them, so a URL password inside one was stored in clear."""
    from reef_cli.redact import redact_text

    text = "\x1b]8;;https://u:Qosc8pw@h/\x1b\\link\x1b]8;;\x1b\\"
    assert "Qosc8pw" not in redact_text(text)
    assert redact_text("\x1b[31mplain red\x1b[0m") == "\x1b[31mplain red\x1b[0m"  # colour without a secret is kept


def test_a_docker_config_auth_that_decodes_to_user_and_password_is_redacted() -> None:
    """A hostile pass: `{"auth": "<base64 of user:password>"}` (~/.docker/config.json) was stored in clear: a
    lowercase `auth` key is not a secret name. Only a value that decodes to `user:password` counts."""
    from reef_cli.redact import redact_text

    assert "dXNlcjpR" not in redact_text('{"auths": {"r.io": {"auth": "dXNlcjpRMTliNjRwYXNz"}}}')
    for benign in ('{"auth": "none"}', '{"auth": "QWxhZGRpbg"}', '{"auth": "oauth2"}'):
        assert redact_text(benign) == benign


@pytest.mark.parametrize(("text", "want"), [
    ("mysql --pass=S3cr3tPw db", "mysql --pass=[REDACTED:password] db"),
    ("mysqldump --passw='hunter 2' --all-databases", "mysqldump --passw='[REDACTED:password]' --all-databases"),
    ("mysqladmin -u root -pOldPw9 password NewPw9x",
     "mysqladmin -u root -p[REDACTED:password] password [REDACTED:password]"),
    ('mysqladmin -uroot password "NewPw9x"', 'mysqladmin -uroot password "[REDACTED:password]"'),
    ("mariadb-admin -uroot password newpw", "mariadb-admin -uroot password [REDACTED:password]"),
    # look-alikes: a prompt, a variable, another tool's option, the word in another command
    ("mysqladmin -uroot -p password", None),
    ("mysqladmin -uroot password $NEW_PW", None),
    ("mysql --passport=x; grep --pass=x f", None),
    ("mysqladmin status; echo password x", None),
])
def test_mysql_option_prefixes_and_mysqladmins_password_command(text: str, want: str | None) -> None:
    """A hostile pass: a MySQL client takes any unique prefix of `--password` (`--pass=X`), and `mysqladmin
    password NEW` sets a new one; both were stored in clear (a lowercase `pass` names a count as often)."""
    fixed(text, want)
