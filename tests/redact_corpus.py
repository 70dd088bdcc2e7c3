"""The redaction corpus: secret formats as they show up in agent output, feedback and config files, and look-alikes
that must come through untouched. Shared by tests/test_redact_corpus.py and bench/redact_bench.py.

Every fake is generated here from a seeded RNG, so no secret-shaped literal sits in the repository (secret scanners
stay quiet) and every run sees the same strings. `FORMATS` entries are (name, text, secrets): each secret must be
gone from the redacted text, and so must every 8-character run of it (a half-redacted secret is a leak).
"""

from __future__ import annotations

import base64
import json
import random
import string
import urllib.parse

rng = random.Random(20261201)
ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"


def chars(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def randbytes(n: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(n))


def password() -> str:
    return chars(string.ascii_letters, 3) + chars(string.digits, 2) + rng.choice("!#%^*") + chars(ALNUM, 8)


def pem(kind: str, lines: int = 6) -> tuple[str, str]:
    body = "\n".join(b64(randbytes(48)) for _ in range(lines))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----", body


JWT = ".".join([b64url(b'{"alg":"HS256","typ":"JWT"}'),
                b64url(b'{"sub":"1234567890","name":"Jo Doe","iat":1516239022}'), b64url(randbytes(32))])
RSA, RSA_BODY = pem("RSA ")
EC, EC_BODY = pem("EC ", 3)
PKCS8, PKCS8_BODY = pem("")
ENCRYPTED, ENCRYPTED_BODY = pem("ENCRYPTED ", 4)
OPENSSH_BODY = "\n".join(b64(randbytes(51)) for _ in range(5))
OPENSSH = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{OPENSSH_BODY}\n-----END OPENSSH PRIVATE KEY-----"
PGP_BODY = "\n".join(b64(randbytes(48)) for _ in range(4))
PGP = f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=Ab12\n-----END PGP PRIVATE KEY BLOCK-----"
GCP_LINES = [b64(randbytes(48)) for _ in range(5)]
GCP = json.dumps({
    "type": "service_account", "project_id": "demo-project", "private_key_id": chars(HEX, 40),
    "private_key": "-----BEGIN PRIVATE KEY-----\n" + "\n".join(GCP_LINES) + "\n-----END PRIVATE KEY-----\n",
    "client_email": "ci@demo-project.iam.gserviceaccount.com", "client_id": chars("0123456789", 21),
}, indent=2)

V = {  # one fake per provider
    "aws_id": "AKIA" + chars(UPPER, 16),
    "aws_secret": chars(B64, 40),
    "aws_session_id": "ASIA" + chars(UPPER, 16),
    "aws_session_token": "FwoGZXIvYXdzE" + chars(B64, 300),
    "gcp_api": "AIza" + chars(URLSAFE, 35),
    "azure_account_key": b64(randbytes(64)),
    "azure_client_secret": chars(ALNUM, 3) + "8Q~" + chars(URLSAFE + "~.", 34),
    "azure_sas_sig": urllib.parse.quote(b64(randbytes(32)), safe=""),
    "ghp": "ghp_" + chars(ALNUM, 36),
    "gho": "gho_" + chars(ALNUM, 36),
    "ghs": "ghs_" + chars(ALNUM, 36),
    "ghu": "ghu_" + chars(ALNUM, 36),
    "github_pat": "github_pat_" + chars(ALNUM, 22) + "_" + chars(ALNUM, 59),
    "glpat": "glpat-" + chars(URLSAFE, 20),
    "glrt": "glrt-" + chars(URLSAFE, 20),
    "gldt": "gldt-" + chars(URLSAFE, 20),
    "xoxb": "xoxb-" + chars(string.digits, 12) + "-" + chars(string.digits, 13) + "-" + chars(ALNUM, 24),
    "xoxp": "xoxp-" + chars(string.digits, 12) + "-" + chars(string.digits, 12) + "-" + chars(ALNUM, 32),
    "xoxe": "xoxe.xoxp-1-" + chars(ALNUM, 140),
    "xapp": "xapp-1-A0" + chars(UPPER, 9) + "-" + chars(string.digits, 13) + "-" + chars(HEX, 64),
    "slack_hook": ("https://hooks.slack.com/services/T0" + chars(UPPER, 8) + "/B0" + chars(UPPER, 8) + "/"
                   + chars(ALNUM, 24)),
    "sk_live": "sk_live_" + chars(ALNUM, 24),
    "rk_live": "rk_live_" + chars(ALNUM, 99),
    "whsec": "whsec_" + chars(ALNUM, 32),
    "openai": "sk-" + chars(ALNUM, 20) + "T3BlbkFJ" + chars(ALNUM, 20),
    "openai_proj": "sk-proj-" + chars(URLSAFE, 74) + "T3BlbkFJ" + chars(URLSAFE, 74),
    "anthropic": "sk-ant-api03-" + chars(URLSAFE, 93) + "AA",
    "anthropic_admin": "sk-ant-admin01-" + chars(URLSAFE, 93) + "AA",
    "hf": "hf_" + chars(string.ascii_letters, 34),
    "npm": "npm_" + chars(ALNUM, 36),
    "pypi": "pypi-AgEIcHlwaS5vcmc" + chars(URLSAFE, 140),
    "twilio_token": chars(HEX, 32),
    "twilio_key": "SK" + chars(HEX, 32),
    "sendgrid": "SG." + chars(URLSAFE, 22) + "." + chars(URLSAFE, 43),
    "mailgun": "key-" + chars(HEX, 32),
    "shopify": "shpat_" + chars(HEX, 32),
    "shopify_secret": "shpss_" + chars(HEX, 32),
    "digitalocean": "dop_v1_" + chars(HEX, 64),
    "heroku": f"{chars(HEX, 8)}-{chars(HEX, 4)}-{chars(HEX, 4)}-{chars(HEX, 4)}-{chars(HEX, 12)}",
    "telegram": chars(string.digits, 10) + ":AA" + chars(URLSAFE, 33),
    "databricks": "dapi" + chars(HEX, 32),
    "groq": "gsk_" + chars(ALNUM, 52),
    "xai": "xai-" + chars(ALNUM, 80),
    "replicate": "r8_" + chars(ALNUM, 37),
    "linear": "lin_api_" + chars(ALNUM, 40),
    "atlassian": "ATATT3xFfGF0" + chars(URLSAFE, 180) + "=" + chars(HEX.upper(), 8),
    "opaque": chars(string.ascii_lowercase + string.digits, 40),
    "ado_pat": chars(string.ascii_lowercase + string.digits, 52),
    "cookie": chars(ALNUM, 32),
    "pw1": password(), "pw2": password(), "pw3": password(), "pw4": password(), "pw5": password(),
    "pw6": password(), "pw7": password(), "pw8": password(), "pw9": password(),
}
PW_AT = chars(string.ascii_letters, 4) + "@" + chars(ALNUM, 5) + "@" + chars(ALNUM, 4) + "9"
DOCKER_AUTH = b64(b"deploy:" + chars(ALNUM, 20).encode())
K8S_VALUE = b64(V["pw5"].encode())
BASIC = b64(("admin:" + V["pw6"]).encode())
ESC = "\x1b"
# Passwords that look like nothing: one lowercase word, or digits only (the flag's place alone says what they are).
PW_WORD = [chars(string.ascii_lowercase, 10) for _ in range(5)]
PW_DIGITS = chars(string.digits, 10)
# ... and the same inside a JSON string (an agent's tool-call arguments, a command's JSON output in a transcript).
PW_JSON = [chars(string.ascii_lowercase, 10) for _ in range(5)]
# ... and in a libpq conninfo string or the SQL that sets a password.
PW_SQL = [chars(string.ascii_lowercase, 10) for _ in range(5)]

FORMATS: list[tuple[str, str, tuple[str, ...]]] = [
    # cloud providers
    ("aws access key id (env)", f"AWS_ACCESS_KEY_ID={V['aws_id']}", (V["aws_id"],)),
    ("aws credentials file",
     f"[default]\naws_access_key_id = {V['aws_id']}\naws_secret_access_key = {V['aws_secret']}\n",
     (V["aws_id"], V["aws_secret"])),
    ("aws secret in json", f'{{"AccessKeyId": "{V["aws_session_id"]}", "SecretAccessKey": "{V["aws_secret"]}"}}',
     (V["aws_session_id"], V["aws_secret"])),
    ("aws session token", f"export AWS_SESSION_TOKEN={V['aws_session_token']}", (V["aws_session_token"],)),
    ("gcp service-account json", GCP, tuple(GCP_LINES)),
    ("gcp api key in url", f"GET https://maps.googleapis.com/maps/api/geocode/json?address=x&key={V['gcp_api']}",
     (V["gcp_api"],)),
    ("azure storage connection string",
     f"DefaultEndpointsProtocol=https;AccountName=demo;AccountKey={V['azure_account_key']};"
     "EndpointSuffix=core.windows.net",
     (V["azure_account_key"],)),
    ("azure client secret", f"AZURE_CLIENT_SECRET={V['azure_client_secret']}", (V["azure_client_secret"],)),
    ("azure sas url", "https://demo.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r"
     "&se=2026-12-31T00:00:00Z"
     f"&sig={V['azure_sas_sig']}", (V["azure_sas_sig"],)),
    ("digitalocean token", f"doctl auth init --access-token {V['digitalocean']}", (V["digitalocean"],)),
    ("heroku api key", f"HEROKU_API_KEY={V['heroku']}", (V["heroku"],)),
    ("azure devops pat", f"AZURE_DEVOPS_EXT_PAT={V['ado_pat']}", (V["ado_pat"],)),
    ("databricks token", f"host = https://x.cloud.databricks.com\ntoken = {V['databricks']}", (V["databricks"],)),
    # code hosts and registries
    ("github ghp in remote url", f"git remote set-url origin https://{V['ghp']}@github.com/o/r.git", (V["ghp"],)),
    ("github gho in log", f"oauth ok: {V['gho']} (expires in 8h)", (V["gho"],)),
    ("github ghp glued to a dash (a session id)", f"x-reef-session: s-{V['ghp']}", (V["ghp"],)),
    ("github ghp glued to an underscore", f"token_id=id_{V['ghp']}", (V["ghp"],)),
    ("github ghs header", f"Authorization: token {V['ghs']}", (V["ghs"],)),
    ("github ghu bare", f"user-to-server token {V['ghu']}", (V["ghu"],)),
    ("github fine-grained pat", f"GITHUB_TOKEN: {V['github_pat']}", (V["github_pat"],)),
    ("gitlab glpat", f"PRIVATE-TOKEN: {V['glpat']}", (V["glpat"],)),
    ("gitlab runner token", f"gitlab-runner register --token {V['glrt']}", (V["glrt"],)),
    ("gitlab deploy token", f"using deploy token {V['gldt']} for the registry", (V["gldt"],)),
    ("npm token in npmrc", f"//registry.npmjs.org/:_authToken={V['npm']}", (V["npm"],)),
    ("pypi token in pypirc", f"[pypi]\nusername = __token__\npassword = {V['pypi']}", (V["pypi"],)),
    ("pypi token flag", f"twine upload -u __token__ -p {V['pypi']} dist/*", (V["pypi"],)),
    ("huggingface token", f"huggingface-cli login --token {V['hf']}", (V["hf"],)),
    # chat, payments, mail
    ("slack bot token", f"SLACK_BOT_TOKEN={V['xoxb']}", (V["xoxb"],)),
    ("slack user token", f"slack: {V['xoxp']}", (V["xoxp"],)),
    ("slack refresh token", f"refreshed: {V['xoxe']}", (V["xoxe"],)),
    ("slack app token", f"socket mode with {V['xapp']}", (V["xapp"],)),
    ("slack webhook", f"curl -X POST {V['slack_hook']} -d '{{}}'", (V["slack_hook"].rsplit("/", 1)[1],)),
    ("stripe secret key", f'stripe.api_key = "{V["sk_live"]}"', (V["sk_live"],)),
    ("stripe restricted key", f"key {V['rk_live']} rejected", (V["rk_live"],)),
    ("stripe webhook secret", f"STRIPE_WEBHOOK={V['whsec']}", (V["whsec"],)),
    ("twilio auth token", f"TWILIO_AUTH_TOKEN={V['twilio_token']}", (V["twilio_token"],)),
    ("twilio api key", f"client = Client('{V['twilio_key']}', secret)", (V["twilio_key"],)),
    ("sendgrid key", f"sg = SendGridAPIClient('{V['sendgrid']}')", (V["sendgrid"],)),
    ("mailgun key", f"curl -s --user 'api:{V['mailgun']}' https://api.mailgun.net/v3/x/messages", (V["mailgun"],)),
    ("shopify access token", f"X-Shopify-Access-Token: {V['shopify']}", (V["shopify"],)),
    ("shopify shared secret", f"shared secret {V['shopify_secret']}", (V["shopify_secret"],)),
    ("telegram bot token", f"https://api.telegram.org/bot{V['telegram']}/getMe", (V["telegram"],)),
    ("atlassian api token", f"jira token {V['atlassian']}", (V["atlassian"],)),
    # model providers
    ("openai legacy key", f"OPENAI_API_KEY={V['openai']}", (V["openai"],)),
    ("openai project key", f"client = OpenAI(api_key=\"{V['openai_proj']}\")", (V["openai_proj"],)),
    ("anthropic key", f"x-api-key: {V['anthropic']}", (V["anthropic"],)),
    ("anthropic admin key", f"admin key {V['anthropic_admin']} lacks scope", (V["anthropic_admin"],)),
    ("groq key", f"GROQ={V['groq']}", (V["groq"],)),
    ("xai key", f"model call with {V['xai']} failed", (V["xai"],)),
    ("replicate token", f"replicate: {V['replicate']}", (V["replicate"],)),
    ("linear key", f"Authorization: {V['linear']}", (V["linear"],)),
    # tokens and keys by shape
    ("jwt in cookie", f"cookie: session={JWT}; path=/", (JWT,)),
    ("jwt in log", f"decoded claims of {JWT} ok", (JWT,)),
    ("pem rsa private key", f"key.pem:\n{RSA}\n", (RSA_BODY,)),
    ("pem ec private key", EC, (EC_BODY,)),
    ("pem pkcs8 private key", f"-----\n{PKCS8}", (PKCS8_BODY,)),
    ("pem encrypted private key", ENCRYPTED, (ENCRYPTED_BODY,)),
    ("openssh private key", f"cat ~/.ssh/id_ed25519\n{OPENSSH}\n$ ", (OPENSSH_BODY,)),
    ("pgp private key block", PGP, (PGP_BODY,)),
    ("basic auth header", f'{{"headers": {{"Authorization": "Basic {BASIC}"}}}}', (BASIC,)),
    ("bearer token header", f'curl -H "Authorization: Bearer {V["opaque"]}" https://api.example.com', (V["opaque"],)),
    ("session cookie", f"< Set-Cookie: sessionid={V['cookie']}; Path=/; HttpOnly\n> Cookie: theme=dark; "
     f"connect.sid=s%3A{V['cookie'][::-1]}", (V["cookie"], V["cookie"][::-1])),
    ("curl user password", f"curl -u admin:{V['pw7']} https://ci.example.com/api", (V["pw7"],)),
    # URLs
    ("postgres url", f"DATABASE_URL=postgres://admin:{V['pw1']}@db.internal:5432/app", (V["pw1"],)),
    ("mysql url", f"engine = create_engine('mysql+pymysql://root:{V['pw2']}@localhost/app')", (V["pw2"],)),
    ("mongodb+srv url", f"MONGO_URI=mongodb+srv://svc:{V['pw3']}@cluster0.ab1cd.mongodb.net/db?retryWrites=true",
     (V["pw3"],)),
    ("redis url without user", f"redis://:{V['pw4']}@cache:6379/0", (V["pw4"],)),
    ("url password containing @", f"fetching https://bob:{PW_AT}@git.example.com/r.git", (PW_AT,)),
    ("url password percent-encoded", f"amqp://bob:{urllib.parse.quote(PW_AT, safe='')}@mq:5672/",
     (urllib.parse.quote(PW_AT, safe=""),)),
    ("jdbc query password", f"Caused by: jdbc:mysql://db:3306/app?user=root&password={V['pw8']}&ssl=true", (V["pw8"],)),
    # config files
    ("dotenv quoted", f'DB_PASSWORD="{V["pw9"]}"', (V["pw9"],)),
    ("dotenv pg env var", f"PGPASSWORD={V['pw1']} psql -h db -U app", (V["pw1"],)),
    ("yaml nested", f"database:\n  user: app\n  password: {V['pw2']}\n  host: db\n", (V["pw2"],)),
    ("kubernetes secret", f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n"
     f"  password: {K8S_VALUE}\n  username: YWRtaW4=\n", (K8S_VALUE,)),
    ("docker config auth", json.dumps({"auths": {"ghcr.io": {"auth": DOCKER_AUTH}}}, indent=2), (DOCKER_AUTH,)),
    ("netrc one line", f"machine api.example.com login bob password {V['pw3']}", (V["pw3"],)),
    ("netrc multi line", f"machine git.example.com\n  login bob\n  password {V['pw4']}\n", (V["pw4"],)),
    # flags
    ("--password X", f"mysql --user root --password {V['pw5']} app", (V["pw5"],)),
    ("--password=X", f"psql --password={V['pw6']}", (V["pw6"],)),
    ("--password 'X'", f"tool --password '{V['pw7']}' --verbose", (V["pw7"],)),
    ("-pX (mysql)", f"mysqldump -uroot -p{V['pw8']} app > dump.sql", (V["pw8"],)),
    ("-p X (docker login)", f"docker login -u bob -p {V['pw9']} registry.example.com", (V["pw9"],)),
    ("--token=X", f"tool login --token={V['pw3'][::-1]}", (V["pw3"][::-1],)),
    ("--token X (opaque)", f"vault login --token {V['opaque']}", (V["opaque"],)),
    ("--api-key X", f"tool --api-key {V['opaque'][::-1]} run", (V["opaque"][::-1],)),
    ("--client-secret=X", f"az login --service-principal --client-secret={V['pw1']} --tenant t", (V["pw1"],)),
    ("sshpass -p", f"sshpass -p '{V['pw2']}' ssh deploy@host", (V["pw2"],)),
    ("redis-cli -a X", f"redis-cli -h cache -p 6379 -a {V['pw3']} --no-auth-warning info", (V["pw3"],)),
    ("redis-cli -a WORD", "redis-cli -a hunter2 ping", ("hunter2",)),
    ("redis-cli --pass WORD", "redis-cli -h cache --user app --pass hunter3 ping", ("hunter3",)),
    ("redis-cli --pass=X", f"redis-cli --pass={V['pw4']} info", (V["pw4"],)),
    ("mongosh -p X before -u", f"mongosh -p {V['pw5']} -u admin --authenticationDatabase admin", (V["pw5"],)),
    ("mongosh -u U -p WORD", "mongosh mongodb://db:27017 -u admin -p hunter4", ("hunter4",)),
    ("-pWORD on a continued line (mysql)", "mysql -h db.internal \\\n  -phunter5 app", ("hunter5",)),
    ("redis-cli -a on a continued line", "redis-cli -h cache \\\r\n    -a hunter6 ping", ("hunter6",)),
    ("mongodump -p X", f"mongodump --host db -u backup -p '{V['pw6']}' --out /bk", (V["pw6"],)),
    ("-pX (mysql, no user)", f"mysql -h db -p{V['pw1']} app", (V["pw1"],)),
    ("-p'X' (mysqldump)", f"mysqldump -p'{V['pw2']}' --all-databases > all.sql", (V["pw2"],)),
    ("-pWORD (mysql)", f"mysql -uroot -p{PW_WORD[0]} db", (PW_WORD[0],)),
    ("-p'WORD' (mysqldump)", f"mysqldump -p'{PW_WORD[1]}' app", (PW_WORD[1],)),
    ("-pDIGITS (mariadb)", f"mariadb-dump -u backup -p{PW_DIGITS} shop", (PW_DIGITS,)),
    ("-pWORD (mysqlimport)", f"mysqlimport --local -uroot -p{PW_WORD[2]} db data.csv", (PW_WORD[2],)),
    ("--password=WORD", f"mysql --user=root --password={PW_WORD[3]} app", (PW_WORD[3],)),
    ("-u U -pWORD (any tool)", f"tool -u deploy -p{PW_WORD[4]} sync", (PW_WORD[4],)),
    ("-p\\\"WORD\\\" (tool call json)", json.dumps({"type": "tool_use", "name": "Bash",
                                                "input": {"command": f'mysql -uroot -p"{PW_JSON[0]}" app'}}),
     (PW_JSON[0],)),
    ("--password=\\\"WORD\\\" (json)", json.dumps({"command": f'mysqldump --password="{PW_JSON[1]}" app'}),
     (PW_JSON[1],)),
    ("MYSQL_PWD=\\\"WORD\\\" (json)", json.dumps({"command": f'MYSQL_PWD="{PW_JSON[2]}" mysql -uroot app'}),
     (PW_JSON[2],)),
    ("-pWORD after an escaped newline (json)", json.dumps({"command": f"cd /srv\nmysql -h db -p{PW_JSON[3]} app"}),
     (PW_JSON[3],)),
    ("password WORD in json printed in json", json.dumps({"output": json.dumps({"user": "app",
                                                                              "password": PW_JSON[4]})}),
     (PW_JSON[4],)),
    ("conninfo password=WORD (psql)", f'psql "host=db port=5432 dbname=app user=app password={PW_SQL[0]}"',
     (PW_SQL[0],)),
    ("conninfo password=WORD (psycopg2)", f'conn = psycopg2.connect("dbname=app user=app password={PW_SQL[1]}")',
     (PW_SQL[1],)),
    ("IDENTIFIED BY 'WORD' (mysql -e)", f"mysql -uroot -e \"CREATE USER 'app'@'%' IDENTIFIED BY '{PW_SQL[2]}';\"",
     (PW_SQL[2],)),
    ("WITH PASSWORD 'WORD' (postgres)", f"CREATE ROLE app LOGIN WITH ENCRYPTED PASSWORD '{PW_SQL[3]}';", (PW_SQL[3],)),
    ("SET PASSWORD = PASSWORD('WORD')", f"SET PASSWORD FOR 'app'@'%' = PASSWORD('{PW_SQL[4]}');", (PW_SQL[4],)),
    # encodings and wrappers
    ("ansi before provider key", f"{ESC}[32m{V['ghp']}{ESC}[0m", (V["ghp"],)),
    ("ansi before aws key", f"{ESC}[1;31mAKIA{V['aws_id'][4:]}{ESC}[0m leaked", (V["aws_id"],)),
    ("ansi between key and value", f"{ESC}[33mpassword:{ESC}[0m {V['pw3']}", (V["pw3"],)),
    ("json-escaped inside json", json.dumps({"log": json.dumps({"api_key": V["opaque"]})}), (V["opaque"],)),
    ("json-escaped pem", json.dumps({"key": EC}), (EC_BODY.replace("\n", "\\n"), EC_BODY.split("\n")[1])),
    ("url-encoded form body", "body=" + urllib.parse.quote(f"user=bob&password={V['pw4']}&x=1", safe=""),
     (urllib.parse.quote(V["pw4"], safe=""),)),
    ("url-encoded provider key", "redirect=" + urllib.parse.quote(f"https://x/?t={V['sk_live']}", safe=""),
     (V["sk_live"],)),
    ("split across quotes (shell)", f"export API_TOKEN=\"{V['pw5'][:8]}\"'{V['pw5'][8:]}'",
     (V["pw5"][:8], V["pw5"][8:])),
    ("split across quotes (python)", f'secret = ("{V["pw6"][:8]}"\n          "{V["pw6"][8:]}")',
     (V["pw6"][:8], V["pw6"][8:])),
    ("stack trace locals", "Traceback (most recent call last):\n  File \"app.py\", line 9, in connect\n"
     f"    conn = db.connect(dsn)\n  dsn = 'postgresql://app:{V['pw7']}@db/app'\n  api_key = '{V['opaque']}'\n"
     "psycopg2.OperationalError: could not connect", (V["pw7"], V["opaque"])),
    ("rich traceback locals", f"│   password = '{V['pw8']}'                     │", (V["pw8"],)),
    ("python repr kwargs", f"Client(base_url='https://x', token='{V['pw9']}')", (V["pw9"],)),
]


SHA1 = chars(HEX, 40)
NEGATIVES: list[tuple[str, str]] = [
    ("git sha", f"commit {SHA1}\nAuthor: Jo <jo@example.com>"),
    ("short sha", f"HEAD is now at {SHA1[:7]} fix the build"),
    ("uuid", "request id 123e4567-e89b-12d3-a456-426614174000 failed"),
    ("content hash", "digest sha256:" + chars(HEX, 64)),
    ("docker image digest", "image: python@sha256:" + chars(HEX, 64)),
    ("npm integrity", f'"integrity": "sha512-{b64(randbytes(64))}"'),
    ("pip hash", f"requests==2.32.3 --hash=sha256:{chars(HEX, 64)}"),
    ("reef record id", "receipt rec_01JDQ3ZK8W4X2N5M7P9R0T1V3Y; see evidence rec_01JDQ3ZK8W4X2N5M7P9R0T1V4Z"),
    ("reef release id", "published rel_01JDQ40AB2CD3EF4GH5JK6MN7P (content c_" + chars(HEX, 12) + ")"),
    ("base64 of text", "The string " + b64(b"Hello, world! This is ordinary text.") + " is base64."),
    ("password in prose", "Please rotate the token before the secret expires, and use a password manager."),
    ("password-file flag", "mysql --password-file /run/secrets/db_password app"),
    ("token-file flag", "vault login --token-file=~/.vault-token"),
    ("password-stdin flag", "echo $PW | docker login -u bob --password-stdin ghcr.io"),
    ("-a that is not redis-cli's", "ls -a /tmp; tar -a -cf out.tgz dir; redis-cli -h cache ping"),
    ("mongo's port is --port", "mongod --port 27017 --dbpath /data; mongosh --port 27017 -p; cp -p a b"),
    ("redis-cli -a from the environment", "redis-cli -a \"$REDIS_PASSWORD\" --no-auth-warning ping"),
    ("password prompt flag", "psql -h db -U app --password"),
    ("env var reference", "DATABASE_URL=postgres://app:${DB_PASSWORD}@db/app"),
    ("file paths", "wrote /home/jo/.config/app/secrets.yaml and ./keys/id_ed25519.pub"),
    ("url without credentials", "see https://docs.example.com/api/v2/auth?tab=tokens#bearer"),
    ("ssh url", "git@github.com:org/repo.git and ssh://git@github.com/org/repo"),
    ("email", "mailto:user@example.com, https://user@example.com/repo"),
    ("version strings", "python 3.11.9, node v20.11.1, reef 0.4.0rc1, pkg==1.2.3.post4"),
    ("port flags", "ssh -p 2222 host && docker run -p8080:80 nginx && nc -p 4444 h 80"),
    ("mysql prompt flag", "mysql -u root -p app"),
    ("mysql prompt then database", "mysql -h db -u app -p app_db < dump.sql && mysql -uroot -p -e 'select 1'"),
    ("mysql password from env", "mysql -uroot -p$MYSQL_PWD db; mysqldump -p\"${DB_PASS}\" app; mysql --password=$PW"),
    ("mysql placeholder password", "mysql -u root -p<password> db  # or -p*** in the docs"),
    ("mkdir -p", "mkdir -p build/dir && install -d -m 755 out"),
    ("cp -pr after mysql", "mysql -h db -e 'select 1'; cp -pr backup/ /srv/ && git log -p"),
    ("port and pid after -u", "ps -u root -p1234 && ssh -p 22 host && kubectl port-forward svc/db -p 8080"),
    ("mysql prompt reading a dump", "mysql -uroot -p < dump.sql && mysql -uroot -p$(cat /run/secrets/db) app"),
    ("include path then -pthread", "gcc -c _mysql.c -I/usr/include/mysql -pthread -o build/_mysql.o"),
    ("mysql env ref (json)", json.dumps({"command": 'mysql -uroot -p"$MYSQL_ROOT_PASSWORD" app'})),
    ("db connect kwargs", "conn = psycopg2.connect(host=host, user=user, password=password, dbname=db)"),
    ("sql password placeholders", "CREATE USER app IDENTIFIED BY '<password>'; ALTER ROLE app WITH PASSWORD NULL;"),
    ("mysql port flags", "mysql -P 3306 --port=3306 -h 127.0.0.1 -u app -p app"),
    ("ordinary cookies", "Set-Cookie: theme=dark; Path=/; SameSite=Lax\nCookie: lang=en; session_count=3"),
    ("flags in prose", "Pass --password to be prompted, or --token-file to read it from disk; see --help."),
    ("author flag", "git commit --author 'Jo Doe <jo@example.com>' -m 'fix auth retries'"),
    ("user and port flags", "docker run -u 1000:1000 -p 8080:80 nginx; curl -u 1000:1000 -p 443 x"),
    ("url password word reused", "postgres://app:${PGPASS}@db/app — rotate the password every secret review"),
    ("code get token", "def get_token(self):\n    token = self._cache.get(key)\n    return token"),
    ("tokenizer", "tokenizer = AutoTokenizer.from_pretrained('gpt2')"),
    ("max tokens", "response = client.chat(max_tokens=4096, temperature=0)"),
    ("env lookup", "api_key = os.environ['OPENAI_API_KEY']"),
    ("signature", "def connect(host: str, password: str = None, token: Optional[str] = None) -> Conn:"),
    ("f-string bearer", "headers = {'Authorization': f'Bearer {token}'}"),
    ("public key", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
     "-----END PUBLIC KEY-----"),
    ("ssh public key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + chars(B64, 43) + " jo@laptop"),
    ("token type json", '{"token_type": "Bearer", "expires_in": 3600, "max_tokens": 1024}'),
    ("k8s secret ref", "secretName: my-secret\nsecretKeyRef:\n  name: db\n  key: password"),
    ("gha secrets expr", "token: ${{ secrets.GITHUB_TOKEN }}"),
    ("placeholder", "API_KEY=<your-api-key>"),
    ("masked", "password: ********"),
    ("docker auth disabled", '{"auth": "none", "credsStore": "desktop"}'),
    ("netrc prose", "The netrc file lists a machine, a login and a password for each host."),
    ("sk- words", "sk-learn is not a package; scikit-learn is. See task-1234567890abcdefghijk and risk-assessment-v2."),
    ("ansi colours", f"{ESC}[32mPASSED{ESC}[0m tests/test_auth.py::test_password_reset {ESC}[1m[100%]{ESC}[0m"),
    ("percent-encoded path", "GET /search?q=password%20reset%20flow&lang=en"),
    ("json-escaped prose", json.dumps({"log": json.dumps({"msg": "token refreshed", "user": "bob"})})),
    ("stack trace", "Traceback (most recent call last):\n  File \"/app/auth.py\", line 42, in check_password\n"
     "    raise AuthError('password authentication failed for user \"app\"')\n"
     "AuthError: password authentication failed"),
    ("git log line", f"{SHA1[:10]} (tag: v1.4.0) Merge pull request #42 from org/rotate-tokens"),
]

# Session 6 (hx-secrets): the gaps a hostile pass found and the sweep after it. Generated after everything above, so
# the fakes above keep their values.
PW_GAP = [chars(string.ascii_lowercase, 10) for _ in range(8)]
GHP_WRAP = "ghp_" + chars(ALNUM, 36)
PROJ_WRAP = "sk-proj-" + chars(URLSAFE, 74) + "T3BlbkFJ" + chars(URLSAFE, 74)
DIGEST_RESPONSE = chars(HEX, 32)
REFRESH = "1//0" + chars(URLSAFE, 100)
FORMATS += [
    ("REDISCLI_AUTH=WORD (env assignment)", f"REDISCLI_AUTH={PW_GAP[0]} redis-cli -h cache ping", (PW_GAP[0],)),
    ("yaml block scalar password", f"db:\n  password: |-\n    {V['pw1']}\n  host: db\n", (V["pw1"],)),
    ("yaml value on the next line", f"auth:\n  api_key:\n    {V['opaque']}\n", (V["opaque"],)),
    ("token wrapped with a backslash-newline", f"GH_TOKEN={GHP_WRAP[:20]}\\\n{GHP_WRAP[20:]} gh pr list", (GHP_WRAP,)),
    ("token wrapped at a column", f"OPENAI_API_KEY={PROJ_WRAP[:65]}\n{PROJ_WRAP[65:]}\n", (PROJ_WRAP,)),
    ("ssh-keygen -P old -N new", f"ssh-keygen -p -P {PW_GAP[1]} -N {PW_GAP[2]} -f id", (PW_GAP[1], PW_GAP[2])),
    ("openssl pass:X", f"openssl pkcs12 -export -passout pass:{V['pw2']} -out a.p12", (V["pw2"],)),
    ("echo PW | sudo -S", f"echo '{PW_GAP[3]}' | sudo -S systemctl restart app", (PW_GAP[3],)),
    (".pgpass line", f"db.internal:5432:app:app:{V['pw3']}", (V["pw3"],)),
    ("digest authorization", f'Authorization: Digest username="bob", nonce="x", response="{DIGEST_RESPONSE}"',
     (DIGEST_RESPONSE,)),
    ("connection string password with spaces", f"Server=db;User Id=sa;Password={PW_GAP[4]} {PW_GAP[5]};",
     (PW_GAP[4], PW_GAP[5])),
    ("os.environ subscript", f'os.environ["API_KEY"] = "{PW_GAP[6]}"', (PW_GAP[6],)),
    ("requests auth tuple", f'requests.get(url, auth=("bob", "{PW_GAP[7]}"))', (PW_GAP[7],)),
    ("google refresh token", f"refresh_token: {REFRESH}", (REFRESH,)),
]
NEGATIVES += [
    ("auth switches", "NO_AUTH=1 SKIP_AUTH=true AUTH_URL=https://auth.example.com HTTP_AUTH=basic REDIS_AUTH=0 ./x"),
    ("yaml mapping under a secret key", "inputs:\n  token:\n    description: 'GitHub token'\n    required: true\n"),
    ("prose under a password heading", "Password:\n  then press enter to continue\n"),
    ("a token prefix then a sha", "grep -rn ghp_\n" + SHA1),
    ("tool flags without secrets", "ssh-keygen -N '' -f k && zip -r out.zip d && openssl req -passin env:PW"),
    ("colons in times and compiler output", "12:30:45:123:456 and src/app.py:12:4:E501:line"),
    ("code passing variables", "requests.get(url, auth=(user, password)); os.environ['API_KEY'] = api_key"),
    ("a shell operator after a prompt flag", "mysql -uroot -p; ls && mysql -p < dump.sql"),
]

# Session 7 (hx-redact): secrets disguised by invisible characters, short session cookies, base64 blobs and
# prefix-less values wrapped over lines. Generated after everything above, so the fakes above keep their values.
ZW_GHP = "ghp_" + chars(ALNUM, 36)
ZW_PROJ = "sk-proj-" + chars(URLSAFE, 74) + "T3BlbkFJ" + chars(URLSAFE, 74)
ZW_AKIA = "AKIA" + chars(UPPER, 16)
NBSP_PW = password()
FORMATS += [
    ("token split by a zero-width space", f"remote: {ZW_GHP[:12]}\u200b{ZW_GHP[12:]} rejected", (ZW_GHP[12:],)),
    ("key split by a word joiner (json)", json.dumps({"env": f"OPENAI_API_KEY={ZW_PROJ[:40]}\u2060{ZW_PROJ[40:]}"}),
     (ZW_PROJ[:40], ZW_PROJ[40:])),
    ("aws key with a soft hyphen", f"aws_access_key_id = AKIA\u00ad{ZW_AKIA[4:]}", (ZW_AKIA[4:],)),
    ("password after a no-break space", f"database:\n  password:\u00a0{NBSP_PW}\n", (NBSP_PW,)),
]
NEGATIVES += [
    ("prose with no-break spaces", "Mot de passe\u00a0: voir le gestionnaire\u202f; token\u00a0count 3\ufeff"),
]
SHORT_SID = chars(ALNUM, 4) + chars(string.digits, 2)
SHORT_PHP = chars(HEX, 10) + "7"
SHORT_JSESSION = chars(UPPER, 9) + "1"
FORMATS += [
    ("short session cookie", f"< Set-Cookie: sid={SHORT_SID}; Path=/; HttpOnly", (SHORT_SID,)),
    ("short PHPSESSID in a cookie header", f"> Cookie: lang=en; PHPSESSID={SHORT_PHP}", (SHORT_PHP,)),
    ("jsessionid in a url", f"GET /app/cart;jsessionid={SHORT_JSESSION}?item=3 HTTP/1.1", (SHORT_JSESSION,)),
]
NEGATIVES += [
    ("short cookies that are not sessions",
     "Cookie: sid=1; lang=en; theme=dark\nSet-Cookie: sessionid=deleted; Max-Age=0"),
    ("session in code", "client = Client(session=session2, sid=os.getsid(0))\ngit checkout -b session-cookies"),
]
BIN_PW = password()
B64_GHP = "ghp_" + chars(ALNUM, 36)
B64_PW = password()
B64_ENV_PW = password()
B64_BIN = b64(BIN_PW.encode())
B64_TOKEN = b64(f"token={B64_GHP}\n".encode())
B64_CREDS = b64(f"deploy-bot:{B64_PW}".encode())
B64_ENV = b64(f"DEBUG=1\nDB_PASSWORD={B64_ENV_PW}\n".encode())
FORMATS += [
    ("yaml !!binary under a secret key", f"db:\n  password: !!binary {B64_BIN}\n", (B64_BIN, BIN_PW)),
    ("base64 of a token (echoed)", f"$ echo {B64_TOKEN} | base64 -d", (B64_TOKEN, B64_GHP)),
    ("base64 of user:password", f"creds={B64_CREDS}", (B64_CREDS, B64_PW)),
    ("base64 of an env file (k8s secret data)", f"data:\n  app.env: {B64_ENV}\n", (B64_ENV, B64_ENV_PW)),
]
NEGATIVES += [
    ("yaml !!binary of bytes", "icon: !!binary |\n  " + b64(randbytes(48)) + "\n  " + b64(randbytes(30)) + "\n"),
    ("base64 of a url and camel case",
     "see " + b64(b"https://example.com/docs/index.html") + " AbstractContextManager"),
]
WRAP_SECRET = chars(ALNUM, 64)
WRAP_KEY_LINES = [b64(randbytes(48)) for _ in range(4)] + [b64(randbytes(20))]
FORMATS += [
    ("client secret wrapped in a quoted string", f'{{"client_id": "app", "client_secret": "{WRAP_SECRET[:30]}\n'
     f'{WRAP_SECRET[30:]}"}}', (WRAP_SECRET[:30], WRAP_SECRET[30:])),
    ("pem-less key body under private_key:", "service:\n  private_key: " + "\n    ".join(WRAP_KEY_LINES)
     + "\n  user: ci\n", tuple(WRAP_KEY_LINES)),
    ("pem-less key body on the lines after private_key:", "private_key:\n  " + "\n  ".join(WRAP_KEY_LINES[::-1])
     + "\nuser: ci\n", tuple(WRAP_KEY_LINES)),
]
NEGATIVES += [
    ("words under a secret key", "token:\n  description\n  required\npassword: |\n  ${DB_PASSWORD}\n"),
]
B64_WRAP_PW = password()
B64_WRAP_ENV = (f"DEBUG=1\nLOG_LEVEL=info\nSERVICE=billing-api\nREGION=eu\nDB_PASSWORD={B64_WRAP_PW}\nX=1\n").encode()
B64_WRAPPED = base64.encodebytes(B64_WRAP_ENV).decode()
FORMATS += [
    ("base64 of an env file wrapped at 76 columns", f"$ base64 app.env\n{B64_WRAPPED}$ ",
     tuple(line for line in B64_WRAPPED.split("\n") if line) + (B64_WRAP_PW,)),
]
FORMATS += [
    ("base64 env file in a transcript's json",
     json.dumps({"type": "tool_result", "content": f"$ base64 app.env\n{B64_WRAPPED}"}),
     (B64_WRAP_PW,) + tuple(line for line in B64_WRAPPED.split("\n") if line)),
]
# Session 9 (redactplain): secrets said in plain words (feedback, a chat turn, a note), and prose that names a
# secret without holding one. Generated after everything above, so the fakes above keep their values.
PLAIN = [password() for _ in range(7)]
PLAIN_WORD = chars(string.ascii_lowercase, 7) + chars(string.digits, 1)
PLAIN_CAMEL = "".join(rng.choice(string.ascii_uppercase) + chars(string.ascii_lowercase, 4) for _ in range(2))
PLAIN_TOKEN = [chars(ALNUM, 24) + chars(string.digits, 1) for _ in range(2)]
FORMATS += [
    ("password said in a sentence", f"fyi my password is {PLAIN[0]} until friday", (PLAIN[0],)),
    ("pw= in a chat turn", f"log in as ops with pw={PLAIN[1]} please", (PLAIN[1],)),
    ("passwd after a space", f"root passwd {PLAIN[2]}", (PLAIN[2],)),
    ("pass: in feedback", f"it used the wrong account (pass: {PLAIN_WORD})", (PLAIN_WORD,)),
    ("the token is", f"the token is {PLAIN_TOKEN[0]}, rotate it", (PLAIN_TOKEN[0],)),
    ("api key: in prose", f"The API key: {PLAIN_TOKEN[1]}.", (PLAIN_TOKEN[1],)),
    ("credentials are user/password", f"credentials are deploy/{PLAIN[3]}", (PLAIN[3],)),
    ("korean password with a particle", f"비밀번호는 {PLAIN[4]}입니다", (PLAIN[4],)),
    ("korean short word for password", f"비번: {PLAIN[5]}", (PLAIN[5],)),
    ("the password for root, quoted", f'the password for root is "{PLAIN[6]}".', (PLAIN[6],)),
    ("a camel-case password in backticks", f"my password is `{PLAIN_CAMEL}`", (PLAIN_CAMEL,)),
]
NEGATIVES += [
    ("prose that names a password",
     "The password is required. Use the password reset link if the password is wrong; the password field is empty."),
    ("prose that names a token or a secret",
     "The token is expired, the secret is to test early, passwords are hashed with bcrypt, and my password is the "
     "same as before; password is sha256-hashed."),
    ("masked and placeholder values in prose", "pw=<redacted>, password: ********, api key: $OPENAI_API_KEY"),
    ("code that reads a password",
     "password = getpass()\npassword=os.environ[\"PW\"]\npw = request.form['pw']\nif token is None:\n    pass"),
    ("type annotations and defaults", "password: str\npassword=None\ntoken: Optional[str] = None"),
    ("korean prose about passwords", "비밀번호는 8자 이상이어야 합니다. 비밀번호 변경 완료. 암호화 키를 바꿨다. 암호는 AES256"),
    ("html prose about a password", "printf(&quot;Password is correct.&quot;);"),
    ("a token named by its id in a log", "revoked token 3f9a12bc7d; passwd anonymous@"),
]
