"""Secret-shaped strings out of what reef stores: transcripts, feedback and excerpts pass through here first.

Best effort, tuned to miss as few real secrets as possible without mangling ordinary code and prose: provider
tokens are matched by their documented shapes; `KEY=value`-style assignments only when the key names a secret
and the value looks like a literal rather than code (`token = get_token()` stays); a value may sit on the next line
(YAML block scalars, INI continuations); a provider token may be wrapped over lines, and so may a random value under a
secret key; flags and arguments that only a password fills (`mysql -pX`, `ssh-keygen -N X`, `echo X | sudo -S`) are
read by the tool's own syntax. Text is also read with invisible characters dropped and no-break spaces made plain,
and base64 is decoded and read. Every replacement reads `[REDACTED:<kind>]`, and text that is already redacted
passes through unchanged (and uncounted).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .errors import InvalidInput

EXCERPT_CHARS = 200
WINDOW = 4096  # how far past the excerpt a secret that starts inside it may run and still be found whole


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


class _Lazy:
    """A regex compiled on its first use: `reef run` imports this module on every call, and most texts never reach
    the rarer rules (compiling them all up front doubled the module's import time)."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return getattr(self._compiled, name)


# A token starts where no letter or digit runs into it: after "-" or "_" too (s-ghp_..., x-sk-proj-...), and right
# after a terminal colour code whose ESC was lost or escaped on the way (`[31msk-...`, `\u001b[1mghp_...` in a
# transcript's JSON): its final "m" follows a digit or "[".
_START = r"(?<![A-Za-ln-z0-9])(?<!(?<![0-9\[])m)"  # one class test, as before; an "m" only when it ends a code
_END = r"(?![A-Za-z0-9_-])"

# (kind, triggers, pattern): the whole match is the secret. A pattern runs only over text that contains one of its
# triggers (a substring search costs microseconds; a regex that starts with a boundary assertion is tried at every
# position), so forty providers cost little more than four on text that names none of them.
_TOKEN_SHAPES: list[tuple[str, tuple[str, ...], str]] = [
    ("anthropic_key", ("sk-ant-",), _START + r"sk-ant-[A-Za-z0-9_-]{20,}"),
    ("openrouter_key", ("sk-or-",), _START + r"sk-or-v\d+-[A-Za-z0-9]{32,}" + _END),
    ("openai_key", ("sk-",), _START + r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}"),
    ("openai_key", ("sk-",), _START + r"sk-[A-Za-z0-9]{20,}" + _END),
    ("stripe_key", ("k_live_", "k_test_"), _START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}" + _END),
    ("stripe_key", ("whsec_",), _START + r"whsec_[A-Za-z0-9]{24,}" + _END),
    ("aws_access_key", ("AKIA", "ASIA"), _START + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), _START + r"gh[pousr]_[A-Za-z0-9]{36,}" + _END),
    ("github_token", ("github_pat_",), _START + r"github_pat_[A-Za-z0-9_]{22,}" + _END),
    ("gitlab_token", ("glpat-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "gloas-", "glsoat-",
                      "glagent-", "glffct-", "glrtr-"),
     _START + r"gl(?:pat|dt|rt|cbt|ptt|ft|imt|oas|soat|agent|ffct|rtr)-[A-Za-z0-9_-]{20,}" + _END),
    ("gitlab_token", ("GR1348941",), _START + r"GR1348941[A-Za-z0-9_-]{20,}" + _END),
    ("slack_token", ("xox",), _START + r"(?:xoxe\.)?xox[abposrec]-[A-Za-z0-9-]{10,}" + _END),
    ("slack_token", ("xoxd-",), _START + r"xoxd-[A-Za-z0-9%/+=-]{20,}" + _END),  # the browser `d` cookie
    ("slack_token", ("xapp-",), _START + r"xapp-\d-[A-Z0-9]+-\d+-[A-Za-z0-9]{20,}" + _END),
    ("slack_webhook", ("hooks.slack.com",),
     r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{20,}"),
    ("google_api_key", ("AIza",), _START + r"AIza[0-9A-Za-z_-]{35}" + _END),
    ("google_oauth", ("ya29.", "GOCSPX-"), _START + r"(?:ya29\.|GOCSPX-)[A-Za-z0-9_-]{20,}" + _END),
    ("google_oauth", ("1//0",), _START + r"1//0[A-Za-z0-9_-]{40,}" + _END),  # a refresh token
    ("huggingface_token", ("hf_",), _START + r"hf_[A-Za-z0-9]{30,}" + _END),
    ("npm_token", ("npm_",), _START + r"npm_[A-Za-z0-9]{36,}" + _END),
    ("pypi_token", ("pypi-AgE",), _START + r"pypi-AgE[A-Za-z0-9_-]{50,}" + _END),
    ("twilio_key", ("SK",), _START + r"SK[0-9a-fA-F]{32}" + _END),
    ("sendgrid_key", ("SG.",), _START + r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}" + _END),
    ("mailgun_key", ("key-",), _START + r"key-[0-9a-f]{32}" + _END),
    ("shopify_token", ("shpat_", "shpss_", "shpca_", "shppa_"), _START + r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}" + _END),
    ("digitalocean_token", ("_v1_",), _START + r"do[opr]_v1_[a-f0-9]{64}" + _END),
    ("heroku_key", ("HRKU-",), _START + r"HRKU-[A-Za-z0-9_-]{20,}" + _END),
    ("telegram_token", (":AA",), r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}" + _END),
    ("databricks_token", ("dapi",), _START + r"dapi[a-f0-9]{32}(?:-\d+)?" + _END),
    ("groq_key", ("gsk_",), _START + r"gsk_[A-Za-z0-9]{48,}" + _END),
    ("xai_key", ("xai-",), _START + r"xai-[A-Za-z0-9]{70,}" + _END),
    ("replicate_token", ("r8_",), _START + r"r8_[A-Za-z0-9]{37}" + _END),
    ("linear_key", ("lin_api_", "lin_oauth_"), _START + r"lin_(?:api|oauth)_[A-Za-z0-9]{40}" + _END),
    ("atlassian_token", ("ATATT3",), _START + r"ATATT3[A-Za-z0-9_=-]{100,}" + _END),
    ("perplexity_key", ("pplx-",), _START + r"pplx-[A-Za-z0-9]{40,}" + _END),
    ("vault_token", ("hvs.", "hvb.", "hvr."), _START + r"hv[sbr]\.[A-Za-z0-9_-]{24,}" + _END),
    ("postman_key", ("PMAK-",), _START + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _END),
    ("sentry_token", ("sntrys_", "sntryu_"), _START + r"sntry[su]_[A-Za-z0-9+/=_-]{40,}" + _END),
    ("grafana_token", ("glsa_", "glc_"),
     _START + r"(?:glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/=_-]{32,})" + _END),
    ("doppler_token", ("dp.",), _START + r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}" + _END),
    ("jwt", ("eyJ",), _START + r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}" + _END),
]
_TOKEN_RES: dict[str, re.Pattern[str]] = {}  # compiled on first use: `reef run` redacts its small payload on every
# call, and compiling all forty up front would cost it ~10 ms of start-up for shapes its text never triggers


def _token_re(shape: str) -> re.Pattern[str]:
    pattern = _TOKEN_RES.get(shape)
    if pattern is None:
        pattern = _TOKEN_RES[shape] = re.compile(shape)
    return pattern

_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----"  # group 2 always takes part, so \2 can match
    r"(?P<body>.*?-----END \1PRIVATE KEY\2-----|(?:\\n|\s)*[A-Za-z0-9+/=][A-Za-z0-9+/=\s\\]*)",
    re.DOTALL,
)
_KEY_MATERIAL = re.compile(r"[A-Za-z0-9+/=]{40,}")  # a PEM body line; code that only names the header has none
_KEY_BODY = re.compile(r"[A-Za-z0-9+/=]{8,}")  # base64 between a BEGIN and its END
# The password runs to the last "@" before the host, so one that holds "@" itself (`u:p@ss@host`) goes whole.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@'\"<>\[\]]*:)(?P<secret>[^\s/'\"<>]+)"
    r"(?=@[^\s/@'\"<>]+(?:[/?#:\s'\"<>]|$))"
)
_AUTH_HEADER = re.compile(
    r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?P<scheme>bearer|basic|token|bot|digest)\s+)?)"
    r"(?P<secret>[^\s\"',;]+)",
    re.IGNORECASE,
)
# Digest credentials are parameters (`username="bob", response="<hash of the password>"`), quoted or JSON-escaped.
_DIGEST = _Lazy(
    r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?digest\s+)"
    r"(?P<secret>[A-Za-z-]+=(?:\\?\"(?:[^\"\\\n]|\\[^\"])*\\?\"|[^\s,\"]+)(?:,[ \t]*[A-Za-z-]+="
    r"(?:\\?\"(?:[^\"\\\n]|\\[^\"])*\\?\"|[^\s,\"]+))*)",
    re.IGNORECASE,
)
# ~/.pgpass: `host:port:database:user:password` (`:` and `\` escaped with a backslash), a host name, an IPv4 address
# or `*`, and a port or `*`; a line of its own or a quoted word (`echo "..." >> ~/.pgpass`).
_PGPASS = _Lazy(
    r"(?<![^\s'\"])(?P<head>(?:\*|(?:\d{1,3}\.){3}\d{1,3}|[A-Za-z][A-Za-z0-9.-]*|\[[0-9A-Fa-f:]+\]):(?:\d{1,5}|\*)"
    r":(?:[^\s:\\]|\\.)+:(?:[^\s:\\]|\\.)+:)(?P<secret>(?:[^\s:\\'\"]|\\.)+)(?=$|[\s'\"])",
    re.MULTILINE,
)
# Where a .pgpass line can be: its port field and the two fields after it (a literal `:` first: a fast scan).
_PGPASS_PORT = _Lazy(r":(?:\d{1,5}|\*):(?:[^\s:\\]|\\.)+:(?:[^\s:\\]|\\.)+:[^\s:'\"]")
# A PuTTY key file's private half: the base64 lines after `Private-Lines: N`.
_PPK = _Lazy(r"(?P<head>Private-Lines:[ \t]*\d+\r?\n)(?P<secret>(?:[A-Za-z0-9+/=]{4,}(?:\r?\n|$))+)")
# ADO.NET / ODBC connection strings: a password runs to the next `;` (spaces and all), or is `{braced}`: after a `;`
# (`Server=db;Password=a b;`), or first when another `key=` follows (`Password=a b;Server=db`; not `PWD=/x y; cd`).
_CONN_VALUE = r"(?:\{[^}\n]*\}|[^;\"'\n{]*[^;\"'\s{])"
_CONN_PASSWORD = _Lazy(
    r"(?P<head>(?<=;)[ \t]*(?i:password|pwd)[ \t]*=[ \t]*)(?P<secret>" + _CONN_VALUE + r")(?=[ \t]*(?:;|[\"']|$))"
    r"|(?P<head2>(?:^|(?<=[\"']))[ \t]*(?i:password|pwd)[ \t]*=[ \t]*)(?P<secret2>" + _CONN_VALUE + r")"
    r"(?=[ \t]*;[ \t]*[A-Za-z][A-Za-z0-9 _]*=)",
    re.MULTILINE,
)
_BEARER = re.compile(r"(?P<head>\bbearer\s+)(?P<secret>[A-Za-z0-9._~+/=-]{16,})", re.IGNORECASE)
_QUOTED = r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_ASSIGNMENT = re.compile(
    r"""
    (?P<head>
      (?<![A-Za-z0-9_.$-])
      (?P<export>export\s+)?
      (?P<flag>--?)?
      (?P<q>["']?)
      (?=[A-Za-z0-9_.-]*?(?i:key|token|secret|passphrase|credential|pwd|pass|auth|pat))
      (?P<key>[A-Za-z_][A-Za-z0-9_.-]*)
      (?P=q)
      (?P<sep>[ \t]*(?::=|=>|=|:)(?!=)[ \t]*)
      (?P<tag>!!(?:binary|str)[ \t]+)?
    )
    (?:
      (?P<open>\(\s*)(?P<paren>QUOTED(?:\s*\+?\s*QUOTED)*)
    | (?P<quoted>QUOTED(?:[ \t]*\+[ \t]*QUOTED|QUOTED)*)
    | (?P<wrapped>(?P<wq>["'])RUN{16,}+(?:[ \t]*\r?\n[ \t]*RUN++){1,64}(?P=wq))
    | (?P<wrapbare>RUN{16,}+(?:[ \t]*\r?\n[ \t]+RUN++(?=[ \t]*(?:\r?\n|\Z))){1,64})
    | (?P<bare>[^\s"'\\][^\s"']*)
    )
    """.replace("QUOTED", _QUOTED).replace("RUN", r"[A-Za-z0-9+/=_.~-]"),
    re.VERBOSE,
)
# `_ASSIGNMENT` without the two wrapped forms: a wrapped reading that is declined falls back to the first line.
_ASSIGNMENT_LINE = _Lazy(
    _ASSIGNMENT.pattern.replace(_ASSIGNMENT.pattern[_ASSIGNMENT.pattern.index("    | (?P<wrapped>"):
                                                     _ASSIGNMENT.pattern.index("    | (?P<bare>")], ""),
    re.VERBOSE,
)
# `--password X`, `--api-key 'X'`: a flag that names a secret, its value after a space (`=` is an assignment above).
_FLAG = re.compile(
    r"(?P<head>(?<![\w-])--?(?P<key>[A-Za-z][A-Za-z0-9_-]*)[ \t]+)(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-][^\s\"']*)"
)
# A value on the line after its key: a YAML block scalar (`password: |`, `>-`, `|2`) or a plain value on the next,
# deeper line (`password:` + newline + `  X` in YAML, `password =` + newline + `    X` as an INI continuation). The
# body is every following line indented deeper than the key's line; the rule trims it to the key's own column.
_NEXT_LINE = _Lazy(
    r"(?m)(?:^|(?<=\"))(?P<head>(?P<indent>[ \t]*)(?:-[ \t]+)?(?P<q>[\"']?)"
    r"(?=[A-Za-z0-9_.-]*?(?i:key|token|secret|passphrase|credential|pwd|pass|auth|pat))"
    r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)[ \t]*[:=][ \t]*(?:!!(?:binary|str)[ \t]*)?"
    r"(?P<block>[|>](?:[1-9][+-]?|[+-][1-9]?)?)?[ \t]*(?:#[^\n]*)?\r?\n)"
    # a block's lines (at most 500); a plain value's line, and the lines of one unbroken run after it that YAML folds
    # into it (a base64 body wrapped at 64 or 76 columns)
    r"(?P<body>(?(block)(?:_LINE){1,500}|_LINE(?:_RUN){0,64}))"
    .replace("_LINE", r"(?:[ \t]*\r?\n)*(?P=indent)[ \t]+[^ \t\r\n][^\n]*(?:\n|\Z)")
    .replace("_RUN", r"(?P=indent)[ \t]+[A-Za-z0-9+/=_.~-]+[ \t]*\r?(?:\n|\Z)")
)
_NEXT_INDENT = _Lazy(r"(?:[ \t]*\r?\n)*([ \t]*)(?=[^ \t\r\n])")
_WRAPPED_PIECE = _Lazy(r"[A-Za-z0-9+/=_.~-]+")
# Where `_NEXT_LINE` can start: a line that ends at a separator (or a block indicator, or a comment after it) and
# is followed by an indented line. Searching for these first is 10x cheaper than trying `^` at every position.
_NEXT_LINE_END = _Lazy(r"[:=][ \t]*(?:!!(?:binary|str)[ \t]*)?(?:[|>][1-9+-]{0,2}[ \t]*)?(?:#[^\n]*)?\r?\n[ \t\r\n]")
_BLOCK_INDICATOR = _Lazy(r"[|>](?:[1-9][+-]?|[+-][1-9]?)?(?:\\[rn].*)?")  # and a JSON-escaped line break after it
_MAPPING_LINE = _Lazy(r"[\"']?[A-Za-z0-9_.$-]+[\"']?[ \t]*:(?:[ \t]|$)|-(?:[ \t]|$)|#")
# `mysql -uroot -pX`, `docker login -u bob -p X`, `sshpass -p X`: `-p` is a password only beside a user or in these;
# `redis-cli -a X` / `--pass X`: redis-cli's `-a` takes nothing but the password; so does the `-p` of mongosh and
# the mongo tools (`mongosh -p X -u admin`: the port is `--port`).
# A MySQL/MariaDB client's `-p` takes its value attached or not at all (`-p app` prompts; `app` is the database), so
# an attached value is the password whatever it looks like; the scan from the command name stops at a shell
# separator (`mysql ...; cp -pr a b`), and the name is a command's, not a path's last part (`-I/usr/include/mysql
# -pthread`). A value never starts with a shell operator (`mysql -uroot -p < dump.sql` prompts) or a backslash (the
# `\"` of a JSON-escaped quote: the decoded reading finds what is inside).
_SHORT_P = re.compile(
    r"(?P<head>(?:(?P<mysql>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*(?:mysql[a-z]*|mariadb(?:-[a-z]+)*)\b(?!-)"
    r"[^\n;&|]*?[ \t]-p)"
    r"|(?P<sshpass>\bsshpass(?:[ \t]+-[a-oq-z]\S*)*[ \t]+-p[ \t]*)"
    r"|(?P<redis>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*redis-cli\b[^\n;&|]*?[ \t](?:-a[ \t]+|--pass(?:[ \t]+|=)))"
    r"|(?P<mongo>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*"
    r"mongo(?:sh|dump|restore|export|import|stat|top|files)?\b(?!-)[^\n;&|]*?[ \t]-p[ \t]+)"
    r"|[ \t]-u[ \t]*\S+[ \t]+-p[ \t]*))"
    r"(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-][^\s\"']*)"
)
# The password options of common tools: (needles, pattern). A pattern never crosses a line and runs only on the
# lines holding one of its needles (`_line_matches`); `head` is kept, `secret` is the password (`key`, when present,
# must name a secret). A value already redacted is stepped over, so a second pass finds a command's second password
# (`ssh-keygen -P old -N new`). The place says it is a password, so one plain word goes too; `$VAR`, `$(...)`,
# `env:`/`file:` references and an empty `''` stay.
_CMD = r"(?<![^\s;&|(`'\"/])"  # a command name starts a word (or follows a path's `/`)
_SEG = r"\b(?!-)[^\n;&|]*?[ \t]"  # ... and the flag comes later in the same command
_TOOL_VALUE = r"""(?!["']?\[REDACTED:)(?P<secret>"[^"\n]*"|'[^'\n]*'|[^\s"'\\<>|&;()`-][^\s"']*)"""
_TOOL_SHAPES: list[tuple[tuple[str, ...], str]] = [
    (("ssh-keygen",), _CMD + r"(?P<head>ssh-keygen" + _SEG + r"-[NP][ \t]*)"),
    (("zip",), _CMD + r"(?P<head>(?:zip|zipcloak|unzip|funzip)" + _SEG + r"-P[ \t]*)"),
    (("7z",), _CMD + r"(?P<head>7z[arz]?" + _SEG + r"-p)"),
    (("sqlcmd", "bcp", "osql"), _CMD + r"(?P<head>(?:sqlcmd|bcp|osql)" + _SEG + r"-P[ \t]*)"),
    (("ldap",), _CMD + r"(?P<head>ldap[a-z]*" + _SEG + r"-w[ \t]+)"),
    # a MySQL client takes any unique prefix of a long option (`--pass=X`), and mysqladmin's `password NEW` sets one
    (("--pass",), _CMD + r"(?P<head>(?:mysql[a-z]*|mariadb(?:-[a-z]+)*)" + _SEG + r"--pass(?:w|wo|wor)?=)"),
    (("mysqladmin", "mariadb-admin"), _CMD + r"(?P<head>(?:mysqladmin|mariadb-admin)" + _SEG + r"password[ \t]+)"),
    (("keytool", "jarsigner"),
     _CMD + r"(?P<head>(?:keytool|jarsigner)" + _SEG + r"-(?:(?:src|dest)?(?:store|key)pass|new)[ \t]+)"),
    (("pass:",), r"(?P<head>(?<![\w-])-(?:pass(?:in|out|word)?|kpass)[ \t]+pass:)"),
    (("openssl",), _CMD + r"(?P<head>openssl[ \t]+enc" + _SEG + r"-k[ \t]+)"),
    (("-U", "--user"), _CMD + r"(?P<head>(?:smbclient|rpcclient|smbcacls|smbget|smbmap|net|mount\.cifs)" + _SEG
     + r"(?:-U|--user(?:name)?)[ \t=]*['\"]?[^\s%'\"]+%)"),
    (("htpasswd",), _CMD + r"(?P<head>htpasswd(?=[^\n;&|]*[ \t]-[A-Za-z]*b)(?:[ \t]+[^\s;&|<>]+)*?[ \t]+)"
     + _TOOL_VALUE + r"(?=[ \t]*(?:$|[\n;&|<>\"]))"),
    (("ecureString", "ecurestring"),
     r"(?P<head>\b(?i:ConvertTo-SecureString)(?:[ \t]+-(?i:AsPlainText|Force|String))*[ \t]+)"),
    (("/user:", "/USER:", "/User:"), r"(?P<head>\b(?i:net)[ \t]+(?i:use)\b[^\n;&|]*?[ \t]/(?i:user):\S+[ \t]+)(?!/)"),
    (("setx", "SETX", "Setx"), r"(?P<head>\b(?i:setx)[ \t]+(?P<key>[A-Za-z_]\w*)[ \t]+)"),
    (("config",), r"(?P<head>\b(?:aws[ \t]+configure[ \t]+set|git[ \t]+config"
     r"|(?:npm|yarn|pnpm|pip|gcloud|conda)[ \t]+config[ \t]+set|dotnet[ \t]+user-secrets[ \t]+set)"
     r"(?:[ \t]+--?[\w-]+)*[ \t]+(?P<key>[^\s=\-][^\s=]*)[ \t]+)"),
    (("http-basic",), r"(?P<head>\bpoetry[ \t]+config[ \t]+http-basic\.\S+[ \t]+\S+[ \t]+)"),
    (("secret set",), r"(?P<head>\bgh[ \t]+secret set\b[^\n;&|]*?[ \t](?:--body|-b)(?:[ \t]+|=))"),
    # redis AUTH [user] password, given to redis-cli or typed at its `host:port>` prompt
    (("AUTH", "auth", "Auth"), r"(?P<head>(?:" + _CMD + r"redis-cli\b[^\n;&|]*?[ \t]|[\w.:-]+:\d+(?:\[\d+\])?>[ \t]*)"
     r"(?i:auth)[ \t]+(?:[^\s;&|]+[ \t]+(?=[^\s;&|]))?)" + _TOOL_VALUE + r"(?=[ \t]*(?:$|[\n;&|\"]))"),
    # a password piped into the tool that reads it from standard input
    (("-S", "stdin", "chpasswd"),
     r"(?P<head>\b(?:echo|printf)(?:[ \t]+-[neE]+)*(?:[ \t]+['\"]?%s(?:\\n)?['\"]?)?[ \t]+)"
     + _TOOL_VALUE + r"(?=[ \t]*\|[ \t]*(?:sudo(?:[ \t]+-\w+)*[ \t]+-S|chpasswd\b|[^\n;&|]*--stdin\b|"
     r"[^\n;&|]*--pass(?:word)?-stdin\b))"),
]
_TOOL_RES: dict[str, re.Pattern[str]] = {}


def _tool_re(shape: str) -> re.Pattern[str]:
    pattern = _TOOL_RES.get(shape)
    if pattern is None:
        pattern = _TOOL_RES[shape] = re.compile(shape if "(?P<secret>" in shape else shape + _TOOL_VALUE)
    return pattern


# A secret literal handed to code: a subscript assignment (`os.environ["API_KEY"] = "x"`, `headers['X-Api-Key'] =
# 'x'`), a setter call with the key and the value (`setdefault("SECRET_KEY", "x")`, `os.Setenv`, configparser's
# `set("section", "password", "x")`), or the password of a credentials call (`auth=("bob", "x")`,
# `HTTPBasicAuth("bob", "x")`, `smtp.login("bob", "x")`). Each stays on one line; (needles, pattern).
_CODE_QUOTED = r"""(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
_CODE_SHAPES: list[tuple[tuple[str, ...], _Lazy]] = [
    (('"]', "']"), _Lazy(r"(?P<head>\[[ \t]*[\"'](?P<key>[A-Za-z_][\w.-]*)[\"']\][ \t]*=[ \t]*)"
                             r"(?P<secret>" + _CODE_QUOTED + ")")),
    (("setdefault(", "setenv(", "putenv(", "Setenv(", "SetEnvironmentVariable(", "set(", "put(", "setItem(",
      "setProperty(", "set_key("), _Lazy(
        r"(?P<head>\b(?:setdefault|setenv|putenv|Setenv|SetEnvironmentVariable|set|put|setItem|setProperty|set_key)"
        r"\([ \t]*(?:" + _CODE_QUOTED + r"[ \t]*,[ \t]*)?[\"'](?P<key>[A-Za-z_][\w.-]*)[\"'][ \t]*,[ \t]*)"
        r"(?P<secret>" + _CODE_QUOTED + ")")),
    # a Dockerfile's `ENV NAME value` / `ARG NAME value` (the legacy space form): the value is the rest of the line
    (("ENV", "ARG", "env ", "arg "), _Lazy(
        r"(?P<head>(?:^|(?<=[\n\"]))[ \t]*(?i:env|arg)[ \t]+(?P<key>[A-Za-z_]\w*)[ \t]+)"
        r"(?P<secret>" + _CODE_QUOTED + r"|[^\s\"'=][^\n]*?)(?=[ \t]*(?:\r?\n|$|\"))")),
    (("auth=", "auth =", "Auth(", ".login("), _Lazy(
        r"(?P<head>(?:\bauth ?= ?\(|(?:Basic|Digest)Auth\(|\.login\()[ \t]*" + _CODE_QUOTED
        + r"[ \t]*,[ \t]*)(?P<secret>" + _CODE_QUOTED + ")")),
]
# `rclone config create|update NAME TYPE key value ...`: the pairs after the command, a secret-named key's value.
_RCLONE = _Lazy(r"\brclone[ \t]+config[ \t]+(?:create|update)\b[^\n;&|]*")
_RCLONE_PAIR = _Lazy(r"(?P<head>[ \t](?P<key>(?=[A-Za-z_]*(?:key|secret|pass|token))[A-Za-z_]+)[ \t]+)"
                     r"(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-][^\s\"']*)")
# `Basic <base64 of user:password>` outside an Authorization header.
# `Basic <base64>` outside a header, and a Docker config's `"auth": "<base64>"` (~/.docker/config.json): both only
# when the base64 decodes to `user:password`.
_BARE_BASIC = _Lazy(r"(?P<head>\b[Bb]asic[ \t]+|\"auth\"[ \t]*:[ \t]*\")(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"
                    r"(?![A-Za-z0-9+/=])")
# Base64 anywhere that decodes to text holding a secret (a token, a private key, an env file's password) or to
# `user:password`: a Kubernetes Secret's data, a `!!binary` YAML value, a blob echoed by `base64`. Only runs of 20+
# characters with both cases are decoded (a hex digest, a path or a lowercase word has one case), and only text
# that decodes to valid UTF-8 without control characters is read again: random bytes almost never do.
_B64_RUN = _Lazy(r"(?<![A-Za-z0-9+/_-])(?P<secret>[A-Za-z0-9+/]{20,}+={0,2}+)(?![A-Za-z0-9+/=_-])")
# A `!!binary` block scalar anywhere (`icon: !!binary |` + base64 lines): its lines are one blob.
_B64_BLOCK = _Lazy(r"(?P<head>!!binary[ \t]*(?:[|>][+-]?[ \t]*)?\r?\n(?P<lead>[ \t]+))"
                   r"(?P<secret>[A-Za-z0-9+/=]+(?:[ \t]*\r?\n[ \t]+[A-Za-z0-9+/=]+)*)")
_B64_LINE = _Lazy(r"(?:\r?\n|(?:\\r)?\\n)(?P<lead>[ \t]*)(?P<run>[A-Za-z0-9+/]{1,76}={0,2})"
                  r"(?=[ \t]*(?:\r?\n|\\r|\\n|\Z|\"))")  # a line break, raw or JSON-escaped
_USER_PASSWORD = _Lazy(r"(?=[\w.@+-]*[A-Za-z])[\w.@+-]{1,64}:(?![/\\])\S{3,128}")  # not `https://...`
_CONTROL = _Lazy(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# SQL that sets a password: `IDENTIFIED BY 'x'`, `WITH [ENCRYPTED] PASSWORD 'x'`, `ALTER ROLE app PASSWORD 'x'`,
# `PASSWORD('x')`, `SET PASSWORD [FOR u] = 'x'`. The value is a quoted literal, so it is data whatever it looks like.
_SQL_PASSWORD = re.compile(
    r"(?P<head>(?:\b(?i:user|role|grant)\b[^\n;]{0,200}?\b(?i:identified)[ \t]+(?:(?i:with)[ \t]+\w+[ \t]+)?(?i:by)"
    r"|\b(?:(?i:with)[ \t]+(?:(?i:encrypted)[ \t]+)?(?i:password)|PASSWORD)"
    r"|\b(?i:set)[ \t]+(?i:password)(?:[ \t]+(?i:for)[ \t]+\S+)?[ \t]*=)[ \t]*(?:(?i:password)[ \t]*)?\(?[ \t]*)"
    r"(?P<secret>'[^'\n]*'|\"[^\"\n]*\")"
)
# libpq's key=value conninfo (`psql "host=db user=app password=x"`, `psycopg2.connect("dbname=app password=x")`):
# beside another conninfo key separated by a space (not a comma: `connect(host=host, password=password)` is code).
_CONNINFO = re.compile(r"(?<![\w.-])(?:host|hostaddr|dbname|user|port|sslmode)=[^\s,()'\"=]+(?=[ \t]+\w+=|[ \t]*['\"])")
_CURL_USER = re.compile(r"(?P<head>(?<![\w-])(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:)(?P<secret>[^\s'\"]+)")
# netrc: `machine H login U password P`, on one line or several.
_NETRC = re.compile(
    r"(?P<head>\b(?:machine[ \t]+\S+|default)(?:\s+(?:login|account|port)[ \t]+\S+)*\s+password[ \t]+)(?P<secret>\S+)"
)
# `Cookie:` / `Set-Cookie:` headers, and curl's `-b` / `--cookie`: a cookie named for a session or a credential is
# one, however short (`sid=Xk3J9a`, `PHPSESSID=a1b2c3d4e5`: a test server's or an old framework's session id).
_COOKIE_LINE = re.compile(r"(?P<head>\b(?:set-)?cookie[\"']?[ \t]*[:=][ \t]*)(?P<value>[^\n]+)", re.IGNORECASE)
_CURL_COOKIE = _Lazy(r"(?P<head>(?<![\w-])(?:-b|--cookie)[ \t]+)(?P<value>[^\n]+)")
_COOKIE = re.compile(r"(?P<head>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*(?:sess|sid|auth|token|jwt|remember)[A-Za-z0-9_.-]*=)"
                     r"(?P<secret>[^\s;,\"']{6,})", re.IGNORECASE)
# The same session cookies outside a header (a URL's `;jsessionid=` or `?sid=`, a log's `session=...`): only the
# names a session id goes by, and only a value with letters and digits that ends where a value ends (not a call).
_SESSION = _Lazy(
    r"(?P<head>(?<![\w.-])(?i:(?:php|j|asp(?:\.net_)?)?sess(?:ion)?(?:[_-]?id)?|sid|connect\.sid)=)"
    r"(?P<secret>[A-Za-z0-9%._:+/-]{8,256}={0,2})(?![\w(\[.])"
)
# Cookies handed to code: a `cookies={...}` mapping (requests, httpx, aiohttp) and a `set_cookie("sid", "X")` call
# (Flask, Django, Selenium's `add_cookie`): a session-named cookie's value, as in a header. Only inside those, so
# a transcript's `"sessionId": "..."` (an agent's session, not a secret) stays.
_COOKIE_DICT = _Lazy(r"\bcookies[\"']?[ \t]*[=:][ \t]*(?:dict\()?\{(?P<body>[^}\n]*)\}")
_COOKIE_PAIR = _Lazy(r"(?P<head>[\"'](?P<name>[\w.-]*(?i:sess|sid|auth|token|jwt|remember)[\w.-]*)[\"'][ \t]*:[ \t]*"
                     r"(?P<q>[\"']))(?P<secret>[^\"'\s]{6,})(?=(?P=q))")
_SET_COOKIE_CALL = _Lazy(r"(?P<head>\b(?:set_cookie|setCookie|add_cookie|set)\([ \t]*(?:\{[ \t]*)?"
                         r"(?:[\"']?name[\"']?[ \t]*[:=][ \t]*)?"
                         r"[\"'](?P<name>[\w.-]*(?i:sess|sid|auth|token|jwt|remember)[\w.-]*)[\"'][ \t]*,[ \t]*"
                         r"(?:[\"']?value[\"']?[ \t]*[:=][ \t]*)?(?P<q>[\"']))(?P<secret>[^\"'\s]{6,})(?=(?P=q))")
_IDENTIFIER = _Lazy(r"[A-Za-z_]+[0-9]*|[0-9]+[A-Za-z]{1,3}|0[xX][0-9A-Fa-f]+")  # session2, 3600ms, 0x1f
_SAS_SIGNATURE = re.compile(r"(?P<head>[?&]sig=)(?P<secret>[A-Za-z0-9%+/=_-]{16,})")
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_JSON_ESCAPE = re.compile(r"\\(?:[\"\\/bfnrt]|u[0-9a-fA-F]{4})")
_JSON_CHARS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ECHO_MIN = 8  # a found secret this long, and not one word, is removed wherever else it appears, in any encoding
_NUMBERS = re.compile(r"[0-9.:/-]+")

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SECRET_WORDS = {
    "token", "secret", "password", "passwd", "passphrase", "apikey", "credential", "credentials", "privatekey",
    "secretkey", "accesskey", "authtoken",
}
_NOT_SECRET_LAST = {
    "count", "counts", "type", "types", "limit", "limits", "len", "length", "size", "url", "uri", "endpoint", "file",
    "files", "path", "paths", "dir", "name", "names", "id", "ids", "env", "var", "field", "header", "prefix", "suffix",
    "format", "kind", "mode", "policy", "ttl", "expiry", "expires", "expiration", "at", "hint", "label", "pattern",
    "regex", "used", "usage", "budget", "min", "max", "total", "index", "idx", "algorithm", "alg", "version",
    "location", "ref", "refs", "required", "enabled", "source", "provider", "store", "manager", "storage",
    "rotation", "lifetime", "timeout", "method", "scope", "scopes", "description",
}
_NOT_SECRET_KEY_QUALIFIERS = {
    "sort", "primary", "foreign", "cache", "partition", "hash", "lookup", "dict", "map", "idempotency", "group",
    "routing", "shard", "unique", "public", "pub", "row", "column", "composite", "natural", "surrogate", "object",
    "registry", "translation", "i18n", "config", "legend", "hot", "short", "index", "tree", "dedup", "join", "order",
    "search", "s3", "bucket", "react", "list", "dedupe", "entry", "sorting",
}
_PLACEHOLDER = re.compile(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{\{.*\}\}|\{\{.*\}\}|\{[A-Za-z_][A-Za-z0-9_.]*\}|<[^<>]*>|%\([^)]*\)s|"
    r"\*+|x{3,}|X{3,}|\.\.\.|…|-+",
    re.DOTALL,
)
_CODE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = re.compile(r"(?:~|\.{1,2})?/[^\s]*")
_NOT_SECRET_VALUES = {"none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off", "required",
                      "optional", "str", "string", "bytes", "int", "bool"}


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _key_words(key: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(key)]


_SECRET_SUFFIXES = ("password", "passwd", "secret", "token")  # PGPASSWORD, clientsecret, accesstoken
_NOT_SECRET_LAST.update({"stdin", "prompt", "command", "cmd", "helper", "method", "strength", "reset", "hash",
                         "hashed", "policy", "changed", "confirmation"})


def is_secret_key(key: str) -> bool:
    """Does this field or variable name say its value is a secret (`OPENAI_API_KEY`, `clientSecret`,
    `db.password`, `PGPASSWORD`, `REDIS_PASS`), as opposed to a name that merely mentions one (`max_tokens`,
    `sort_key`, `token_type`, `password-file`)?"""
    words = _key_words(key)
    while len(words) > 1 and words[-1].isdigit():
        words.pop()  # `KEY_FILE_2` is a file as `KEY_FILE` is; `API_KEY_2` a key
    if not words or words[-1] in _NOT_SECRET_LAST:
        return False
    if any(word in _SECRET_WORDS or word.endswith(_SECRET_SUFFIXES) for word in words):
        return True
    if "pwd" in words or (key.isupper() and {"pass", "pat"} & set(words)):
        return True  # MYSQL_PWD, REDIS_PASS, AZURE_DEVOPS_EXT_PAT; a lowercase `pass` is often a count or a round
    if words[-1] == "pass" and len(words) > 1 and words[-2] in _PASS_OWNERS:
        return True  # ansible_become_pass, db_pass, smtp_pass; not proxy_pass, first_pass, num_pass
    if key.isupper() and words[-1] == "auth":
        # REDISCLI_AUTH, REDIS_AUTH, NPM_CONFIG__AUTH, PROXY_AUTH hold a password; NO_AUTH, SKIP_AUTH are switches.
        # A lowercase `auth` is too often a setting (`auth: required`, `auth = get_auth()`).
        return len(words) == 1 or words[-2] not in _AUTH_SWITCHES
    if "key" in words:
        at = len(words) - 1 - words[::-1].index("key")
        return at > 0 and words[at - 1] not in _NOT_SECRET_KEY_QUALIFIERS
    return False


# Whose password a lowercase `*_pass` names (`pass` alone is as often a round or a count).
_PASS_OWNERS = {"ssh", "become", "sudo", "su", "ansible", "db", "database", "smtp", "mail", "email", "ftp", "sftp",
                "admin", "root", "user", "login", "bind", "ldap", "redis", "mysql", "pg", "postgres", "mongo", "amqp",
                "rabbitmq", "mq", "vnc", "wifi", "wpa", "keystore", "truststore", "store", "key", "http", "basic",
                "api", "app", "service", "svc", "vault", "git"}
# Words before AUTH that make the name a switch, and values of an AUTH name that name a scheme or a switch.
_AUTH_SWITCHES = {"no", "skip", "disable", "disabled", "enable", "enabled", "require", "required", "use", "with",
                  "without", "allow", "bypass", "need", "force", "has", "is"}
_AUTH_SCHEMES = {"0", "1", "basic", "bearer", "digest", "oauth", "oauth2", "oidc", "saml", "ldap", "kerberos", "ntlm",
                 "token", "password", "jwt", "apikey", "api_key", "iam", "mtls", "tls", "sasl", "scram", "trust",
                 "peer", "md5", "cert", "plain", "anonymous", "local", "none"}


def _is_auth_switch(key: str, value: str) -> bool:
    """`REDIS_AUTH=0`, `AUTH=basic`: an AUTH name whose value is a switch or a scheme, not the password."""
    return _key_words(key)[-1:] == ["auth"] and value.strip().lower() in _AUTH_SCHEMES


def _secret_kind(key: str) -> str:
    words = _key_words(key)
    if words[-1:] == ["auth"]:
        return "auth"
    if any(w.endswith(("password", "passwd")) or w in ("passphrase", "pwd", "pass") for w in words):
        return "password"
    if any(w.endswith("token") for w in words):
        return "token"
    if "key" in words or "apikey" in words:
        return "api_key"
    return "secret"


def _is_literal_secret(value: str, *, literal: bool) -> bool:
    """Is this assigned value a secret rather than a placeholder, a reference or code? `literal`: it was quoted
    or sits in an env-file line, so it is data whatever it looks like."""
    text = value.strip()
    if not text or text.startswith("[REDACTED:"):
        return False
    if text.lower() in _NOT_SECRET_VALUES or _PLACEHOLDER.fullmatch(text) or _PATH.fullmatch(text):
        return False
    if text.startswith(("$(", "`")):
        return False  # `-p$(cat /run/secrets/db)`: a command's output, not a literal
    if literal:
        return True
    if re.search(r"[()\[\]{}]", text) or _CODE_REF.fullmatch(text):
        return False  # a call, an index or an attribute: code
    if re.fullmatch(r"[a-z_]+|[A-Z][a-z]+", text):
        return False  # one plain word: a variable name, or prose ("the token: expired")
    return True


def _looks_random(text: str) -> bool:
    return len(text) >= 16 and any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def redact(text: str) -> tuple[str, int]:
    """Replace secret-shaped substrings with `[REDACTED:<kind>]`; returns the new text and how many were replaced.
    A provider token wrapped over lines (a backslash-newline, or a newline and indentation, inside it) is replaced
    whole, its line breaks with it.

    The text is also read through the encodings a secret hides behind in logs — terminal colour codes, JSON string
    escapes, URL percent-encoding — and a secret found in any of those readings is removed from the text in every
    form it appears in. A coloured text in which a secret is found loses its colour codes; so does a shell command
    continued over lines (`mysql -h db \\` + newline + `-pX`) lose its line breaks, read as the one line it is."""
    if not isinstance(text, str):
        raise InvalidInput(f"redact takes text, not {type(text).__name__}")
    hidden = 0
    if (not text.isascii() or "\\u" in text) and _HIDDEN.search(text):  # isascii: a quick no for most texts
        text, hidden = _redact_hidden(text)
    out, count = _redact_colours(text)
    count += hidden
    if "\\\n" in out or "\\\r\n" in out:
        # read again as one line, from what the first reading left: a token wrapped with a backslash-newline
        # (found above) and a flag continued on the next line (found here) are both removed
        joined, joined_count = _redact_colours(_CONTINUATION.sub(" ", out))
        if joined_count:
            return joined, count + joined_count
    return out, count


# Characters that render as nothing (zero-width space, non-joiner and joiner, word joiner, the invisible operators,
# a byte-order mark, a soft hyphen) and spaces other than the plain one (no-break U+00A0 and U+202F, the en/em/thin/
# hair spaces U+2000-U+200A, U+205F, the ideographic U+3000), raw or as a JSON `\uXXXX` escape. Pasted
# from a chat, a web page or a PDF they sit inside a token (`ghp_abc<U+200B>def`) or beside a key (`password:<NBSP>x`)
# and hide it from every pattern, while a terminal, a YAML loader or `.strip()` gives the secret back whole.
_INVISIBLE = "\u200b-\u200d\u2060-\u2064\ufeff\u00ad"
_SPACES = "\u00a0\u202f\u2000-\u200a\u205f\u3000"  # no-break, en/em/thin/hair, figure, ideographic spaces
_HIDDEN = _Lazy(f"[{_INVISIBLE}{_SPACES}]|\\\\u(?i:200[0-9a-d]|206[0-4]|feff|00ad|00a0|202f|205f|3000)")
_HIDDEN_SPACE = _Lazy(f"[{_SPACES}]|\\\\u(?i:200[0-9a]|00a0|202f|205f|3000)")
_MARK_RE = _Lazy(r"\[REDACTED:[a-z_]+\]")


def _redact_hidden(text: str) -> tuple[str, int]:
    """The lines holding an invisible character or a no-break space (and the line before each, where a value's key
    may be; and, after a line that ends at its key or under one, the indented lines of its value) read with the
    invisible characters dropped and the no-break spaces made plain, as every other reading is (`_redact_views`);
    each secret found there is removed from the text from its first character to its last, the invisible
    characters inside it with it. A secret is what a terminal shows, so the whole token, invisible characters
    included, is the secret: no piece of it is left on either side of one."""
    spans: list[list[int]] = []
    for hit in _HIDDEN.finditer(text):
        if spans and hit.start() < spans[-1][1]:
            continue
        line = text.rfind("\n", 0, hit.start()) + 1
        start = text.rfind("\n", 0, line - 1) + 1 if line else 0
        end = text.find("\n", hit.start())
        end = len(text) if end < 0 else end
        if any(_AWAITS_VALUE.search(_HIDDEN.sub("", text[a:b]).rstrip()) for a, b in ((line, end), (start, line))):
            for _ in range(500):  # a block scalar's lines under `password:<NBSP>|`
                if text[end + 1 : end + 2] not in (" ", "\t"):
                    break
                end = text.find("\n", end + 1)
                end = len(text) if end < 0 else end
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    view = "".join(_HIDDEN.sub(_plain, text[start:end]) + "\n" for start, end in spans)
    out, count = _redact_views(view)
    if not count:
        return text, 0
    # where each of the view's characters starts and ends in the text
    starts: list[int] = []
    ends: list[int] = []
    for start, end in spans:
        at = start
        for hit in _HIDDEN.finditer(text, start, end):
            starts.extend(range(at, hit.start()))
            ends.extend(range(at + 1, hit.start() + 1))
            if _HIDDEN_SPACE.fullmatch(hit.group(0)):
                starts.append(hit.start())
                ends.append(hit.end())
            at = hit.end()
        starts.extend(range(at, end + 1))
        ends.extend(range(at + 1, end + 2))
    parts, done = [], 0
    for begin, finish, marks in _replaced(view, out):
        parts += [text[done : starts[begin]], marks]
        done = ends[finish - 1]
    return "".join(parts) + text[done:], count


def _plain(hit: re.Match[str]) -> str:
    return " " if _HIDDEN_SPACE.fullmatch(hit.group(0)) else ""


_AWAITS_VALUE = _Lazy(r"[:=|>][1-9+-]{0,2}$")  # a key whose value is on the lines after it


def _replaced(before: str, after: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, marks): the spans of `before` that `after` (the same text with secrets replaced by marks, and
    nothing else changed) replaced, in order. The text after the last mark is the end of both; the text after any
    other mark, up to the next, is found again in `before`: the secret ended where it starts. Marks side by side
    make one span."""
    i = j = 0
    marks = list(_MARK_RE.finditer(after))
    k = 0
    while k < len(marks):
        mark = marks[k]
        i += mark.start() - j
        if before.startswith(mark.group(0), i):  # a mark the text held already
            i, j, k = i + len(mark.group(0)), mark.end(), k + 1
            continue
        group = mark.group(0)
        while k + 1 < len(marks) and marks[k + 1].start() == marks[k].end():
            k += 1
            group += marks[k].group(0)
        j = marks[k].end()
        if k + 1 < len(marks):
            end = before.find(after[j : marks[k + 1].start()], i)
        else:  # the last: what follows it runs to the end of both
            end = len(before) - (len(after) - j)
        if end <= i:
            return  # not a plain replacement: leave the text to the readings after this one
        yield i, end, group
        i, k = end, k + 1


# A token wrapped over lines (a terminal or a formatter breaking it at a column, a shell command continued with a
# backslash): its line ends inside a run of token characters and the next line, after indentation, runs on.
_RUN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.+/=:~-")
_RUN = _Lazy(r"[A-Za-z0-9_.+/=:~-]*")
_WRAP = _Lazy(r"\\?\r?\n[ \t]*(?=[A-Za-z0-9_.+/=-])")
_WRAP_LINES = 32  # a 2,500-character token at 80 columns
_WRAP_COLUMN = 40  # a line this long may have been broken at a column
_LINE_REST = _Lazy(r"[\"',;)\]}> \t\r]*(?:\n|$)")


def _wrapped_spans(text: str, triggers: list[str], pattern: re.Pattern[str]) -> list[tuple[int, int, str]]:
    """(start, end, token) of each `pattern` token split over lines in `text`, in order, not overlapping."""
    spans: list[tuple[int, int, str]] = []
    for trigger in triggers:
        at = text.find(trigger)
        while at >= 0:
            span = _wrapped_at(text, at, trigger, pattern)
            if span is not None:
                spans.append(span)
            at = text.find(trigger, span[1] if span is not None else at + 1)
    spans.sort(key=lambda span: (span[0], -span[1]))
    return [span for i, span in enumerate(spans) if not i or span[0] >= spans[i - 1][1]]


def _wrapped_at(text: str, at: int, trigger: str, pattern: re.Pattern[str]) -> tuple[int, int, str] | None:
    """(start, end, the token joined) in `text` of a `pattern` token that starts in the run holding `text[at]` and
    runs on past the run's line break; None when there is none. The next line joins when the token is not complete
    without it, or when the break is a backslash-newline; a token that is already complete at the break takes the
    next line only when that line holds nothing but a random-looking run and the first line is long enough to have
    been wrapped."""
    end = _RUN.match(text, at).end()
    if end - at < len(trigger) + 4:
        return None  # `grep ghp_` + newline: a prefix alone is not a wrapped token
    brk = _WRAP.match(text, end)
    if brk is None:
        return None
    start = at
    while start and text[start - 1] in _RUN_CHARS:
        start -= 1
    pieces = [(start, end)]
    joined = text[start:end]
    first = len(joined)
    while brk is not None and len(pieces) < _WRAP_LINES:
        nxt = brk.end()
        nend = _RUN.match(text, nxt).end()
        piece = text[nxt:nend]
        if trigger in piece:
            break  # the next token, not this one's rest
        if text[end] != "\\" and any(m.end() == len(joined) for m in pattern.finditer(joined)):
            line = text.rfind("\n", 0, end) + 1
            if (end - line < _WRAP_COLUMN or not _LINE_REST.match(text, nend) or len(piece) < 8
                    or not (any(c.isdigit() for c in piece) or piece[1:] != piece[1:].lower())):
                break
            # A complete token takes the next line only when the whole line is its rest: a line the pattern stops
            # inside (`8460733279:AA...`, `SG.x.y`, `https://...`) holds something else, often another secret,
            # which the join would cut in two and leave half in clear.
            if not any(m.start() < len(joined) and not (joined + piece)[m.end():].strip(".:")
                       for m in pattern.finditer(joined + piece)) or _starts_a_token(piece):
                break
        pieces.append((nxt, nend))
        joined += piece
        end = nend
        brk = _WRAP.match(text, end)
    if len(pieces) == 1:
        return None
    for m in pattern.finditer(joined):
        if m.start() < first < m.end():
            offset = m.end()
            for piece_start, piece_end in pieces:
                if offset <= piece_end - piece_start:
                    return start + m.start(), piece_start + offset, m.group(0)
                offset -= piece_end - piece_start
    return None


def _starts_a_token(piece: str) -> bool:
    """Does this line start with a provider token of its own (`key-<hex>` after an OpenAI key that would run on)?"""
    return any(any(t in piece for t in triggers) and _token_re(shape).match(piece)
               for _, triggers, shape in _TOKEN_SHAPES)


# A backslash ending a line continues a shell command on the next: a flag and its value can sit on two lines.
_CONTINUATION = re.compile(r"[ \t]*\\\r?\n[ \t]*")


def _redact_colours(text: str) -> tuple[str, int]:
    if "\x1b" in text:
        plain = _ANSI.sub("", text)
        if plain != text:
            out, count = _redact_views(plain)
            # nothing in the text between the codes: the codes themselves may hold one (an OSC 8 hyperlink's URL)
            return (out, count) if count else _redact_views(text)
    return _redact_views(text)


def _redact_views(text: str) -> tuple[str, int]:
    found: list[tuple[str, str]] = []
    out, count = _scan(text, found)
    if "\\" in text:
        view = _lines_with(_JSON_ESCAPE, text)
        in_context: list[tuple[str, str, str, int]] = []
        for depth in range(1, 4):  # JSON in a JSON string in a JSON string
            if not view:
                break
            view = _JSON_ESCAPE.sub(_json_unescape, view)
            _scan(view, found, in_context, depth, decode=False)  # base64 reads the same raw
            view = _lines_with(_JSON_ESCAPE, view)
        if in_context:
            out, count = _echo_in_context(out, in_context, count)
    if "%" in text:
        view = _lines_with(_URL_ESCAPE, text)
        if view:
            from urllib.parse import unquote, unquote_plus

            view = unquote(view)
            _scan(view, found)
            if _URL_ESCAPE.search(view):  # a URL inside a query parameter
                _scan(unquote_plus(view), found)
    if found:
        out, count = _echo(out, found, count)
    return out, count


def _lines_with(pattern: re.Pattern[str], text: str) -> str:
    """Only the lines an encoding touches are decoded and scanned again: the rest was read plain already."""
    return "\n".join(line for line in text.split("\n") if pattern.search(line))


def _json_unescape(match: re.Match[str]) -> str:
    esc = match.group(0)[1:]
    if esc[0] == "u":
        return chr(int(esc[1:], 16))
    return _JSON_CHARS.get(esc, esc)


def _echo_in_context(text: str, in_context: list[tuple[str, str, str, int]], count: int) -> tuple[str, int]:
    """A secret found in a JSON-decoded reading, put back in the text with what its rule read before it (`-p"`,
    `"password": "`, `mysql -h db\\n... -p`), escaped as many times as it was decoded: a one-word password
    (`mysql -p\\"hunter\\"` in a tool call's JSON arguments) is too common a word to remove everywhere, but beside
    its flag or key it is the secret."""
    import json

    for head, value, kind, depth in sorted(set(in_context), key=lambda f: -len(f[0]) - len(f[1])):
        head_form, value_form = head, value
        for _ in range(depth):
            head_form, value_form = json.dumps(head_form)[1:-1], json.dumps(value_form)[1:-1]
        hits = text.count(head_form + value_form)
        if hits:
            text = text.replace(head_form + value_form, head_form + _mark(kind))
            count += hits
    return text, count


def _echo(text: str, found: list[tuple[str, str]], count: int) -> tuple[str, int]:
    """Remove each found secret wherever else it appears — raw, JSON-escaped or percent-encoded: a password printed
    once after `--password` and again on its own is the same secret."""
    import json
    from urllib.parse import quote, quote_plus

    seen = set()
    for value, kind in sorted(found, key=lambda f: -len(f[0])):
        if len(value) < _ECHO_MIN or value.isalpha() or value in seen or value.startswith("[REDACTED:"):
            continue
        seen.add(value)
        forms = {value, json.dumps(value)[1:-1], quote(value, safe=""), quote(value), quote_plus(value)}
        for form in sorted(forms, key=len, reverse=True):
            hits = text.count(form) if len(form) >= _ECHO_MIN else 0
            if hits:
                text = text.replace(form, _mark(kind))
                count += hits
    return text, count


def _scan(text: str, found: list[tuple[str, str]], in_context: list[tuple[str, str, str, int]] | None = None,
          depth: int = 0, *, decode: bool = True) -> tuple[str, int]:
    """One pass of every rule over `text`; appends (secret, kind) for each replacement to `found`, and to
    `in_context` (a JSON-decoded reading, `depth` times) the secret with what its rule read before it. `decode`:
    base64 blobs are decoded and read too (not inside a decoded blob: one level is enough)."""
    count = 0

    def sub(pattern: re.Pattern[str], rule: Callable[[re.Match[str]], tuple[str, str, str, str] | None],
            source: str, matches: Iterable[re.Match[str]] | None = None) -> str:
        def one(match: re.Match[str]) -> str:
            nonlocal count
            hit = rule(match)
            if hit is None:
                return match.group(0)
            head, secret, kind, tail = hit
            count += 1
            found.append((secret, kind))
            if in_context is not None and head.strip():
                in_context.append((head, secret, kind, depth))
            return head + _mark(kind) + tail

        if matches is None:
            return pattern.sub(one, source)
        out, done = [], 0
        for match in matches:  # in order, not overlapping
            out += [source[done : match.start()], one(match)]
            done = match.end()
        return "".join(out) + source[done:]

    def unwrap(pattern: re.Pattern[str], triggers: list[str], kind: str, source: str) -> str:
        nonlocal count
        out, done = [], 0
        for start, end, secret in _wrapped_spans(source, triggers, pattern):
            out += [source[done:start], _mark(kind)]
            done, count = end, count + 1
            found.append((secret, kind))
        return "".join(out) + source[done:] if out else source

    def base64_runs(source: str) -> str:
        """Each base64 run that decodes to a secret, and each blob wrapped at 64 or 76 columns (`base64`'s own
        output, a PEM-style body) read as one: a secret that straddles two of its lines is whole only joined."""
        nonlocal count
        out, done = [], 0
        for run in _B64_RUN.finditer(source):
            if run.start() < done:
                continue
            start, end, blob = run.start(), run.end(), run.group("secret")
            if blob[0] in "nrt" and source[start - 1 : start] == "\\":
                start, blob = start + 1, blob[1:]  # after a JSON string's `\n`, the run starts past its `n`
            if len(blob) not in (64, 76):
                if blob.islower() or blob.isupper():  # a digest, a path, a constant: one case, not base64 of text
                    continue
            else:  # a wrapped blob's first line when alone on its line (indentation: at most 80 characters back)
                window = source[max(0, start - 80) : start]
                escaped = window.rfind("\\n")
                lead = window[max(window.rfind("\n") + 1, escaped + 2 if escaped >= 0 else 0) :]
                lines = [blob] if not lead.strip(" \t") else []
                while lines:
                    nxt = _B64_LINE.match(source, end)
                    if nxt is None or nxt.group("lead") != lead or len(nxt.group("run")) > len(blob):
                        break
                    lines.append(nxt.group("run"))
                    end = nxt.end()
                    if len(nxt.group("run")) < len(blob):
                        break  # the last line
                if len(lines) > 1:
                    blob = "".join(lines)
            kind = _decoded_secret(blob)
            if kind is None and end != run.end():
                blob, end = source[start : run.end()], run.end()
                kind = _decoded_secret(blob)
            if kind is not None:
                out += [source[done:start], _mark(kind)]
                done, count = end, count + 1
                found.append((blob, kind))
        return "".join(out) + source[done:] if out else source

    text = sub(_PRIVATE_KEY, _private_key, text)
    if "://" in text:
        text = sub(_URL_PASSWORD, _url_password, text)
    lines = "\n" in text
    for kind, triggers, shape in _TOKEN_SHAPES:
        present = [t for t in triggers if t in text]
        if present:
            if lines:  # before the one-line match, which would take a wrapped token's first line alone
                text = unwrap(_token_re(shape), present, kind, text)
            text = sub(_token_re(shape), lambda m, kind=kind: ("", m.group(0), kind, ""), text)
    if "igest" in text or "IGEST" in text:
        text = sub(_DIGEST, _digest, text)
    text = sub(_AUTH_HEADER, _auth_header, text)
    text = sub(_BEARER, _bearer, text)
    if "asic" in text or '"auth"' in text:
        text = sub(_BARE_BASIC, _bare_basic, text, _line_matches(_BARE_BASIC, text, ("Basic", "basic", '"auth"')))
    if ";" in text and ("assword" in text or "ASSWORD" in text or "wd" in text or "WD" in text):
        text = sub(_CONN_PASSWORD, _conn_password, text,
                   _line_matches(_CONN_PASSWORD, text, ("assword", "ASSWORD", "wd", "WD", "Wd"), also=";"))
    text = sub(_ASSIGNMENT, _assignment, text)
    if "-" in text:
        text = sub(_FLAG, _flag, text)
        if "-p" in text or "redis-cli" in text:  # `-p` also covers redis-cli's `--pass`
            text = sub(_SHORT_P, _short_p, text, _line_matches(_SHORT_P, text, ("-p", "-a")))
        if "-u" in text:
            text = sub(_CURL_USER, _curl_user, text, _line_matches(_CURL_USER, text, ("-u",)))
    for needles, shape in _TOOL_SHAPES:
        if any(needle in text for needle in needles):
            pattern = _tool_re(shape)
            for _ in range(3):  # a second password in the same command (`ssh-keygen -P old -N new`)
                before = count
                text = sub(pattern, _tool_value, text, _line_matches(pattern, text, needles))
                if count == before:
                    break
    for needles, pattern in _CODE_SHAPES:
        if any(needle in text for needle in needles):
            text = sub(pattern, _code_secret, text, _line_matches(pattern, text, needles))
    if "rclone" in text:
        text = sub(_RCLONE_PAIR, _tool_value, text, _rclone_matches(text))
    if "assword" in text or "ASSWORD" in text or "dentified" in text or "DENTIFIED" in text:
        text = sub(_SQL_PASSWORD, _sql_password, text)
    if "password" in text:
        text = sub(_NETRC, _loose_value, text)
    if ":" in text:
        text = sub(_PGPASS, _pgpass, text, _pgpass_matches(text))
    if "Private-Lines:" in text:
        text = sub(_PPK, _ppk, text)
    if "\n" in text:
        text = sub(_NEXT_LINE, _next_line_value, text, _next_line_matches(text))
    if "ookie" in text or "OOKIE" in text:
        text = _COOKIE_LINE.sub(lambda m: m.group("head") + sub(_COOKIE, _cookie, m.group("value")), text)
    if "-b" in text or "--cookie" in text:  # curl's cookie flag: its value is a cookie line
        parts, done = [], 0
        for match in _line_matches(_CURL_COOKIE, text, ("-b", "--cookie")):
            parts += [text[done : match.start("value")], sub(_COOKIE, _cookie, match.group("value"))]
            done = match.end()
        text = "".join(parts) + text[done:] if parts else text
    text = sub(_SESSION, _session, text,
               _line_matches(_SESSION, text, ("sess", "Sess", "SESS", "sid=", "Sid=", "SID=")))
    if "ookie" in text:
        parts, done = [], 0
        for match in _line_matches(_COOKIE_DICT, text, ("ookies",)):
            parts += [text[done : match.start("body")], sub(_COOKIE_PAIR, _cookie, match.group("body"))]
            done = match.end("body")
        text = "".join(parts) + text[done:] if parts else text
        text = sub(_SET_COOKIE_CALL, _cookie, text, _line_matches(_SET_COOKIE_CALL, text, ("ookie(", "ookies.set(")))
    if "sig=" in text:
        text = sub(_SAS_SIGNATURE, _sas_signature, text)
    if decode:  # last: a blob the rules above took (`password: <base64>`) keeps the kind they gave it
        if "!!binary" in text:
            text = sub(_B64_BLOCK, _b64_secret, text)
        text = base64_runs(text)
    return text, count


Hit = tuple[str, str, str, str] | None  # (kept before, the secret, its kind, kept after), or None: leave it


def _private_key(match: re.Match[str]) -> Hit:
    body = match.group("body")
    # A whole BEGIN...END block is a key whatever its lines' length (a short test key, a key re-wrapped at 29
    # columns); an open header needs a body line of key length, or code that only names the header would go too.
    whole = "-----END " in body and _KEY_BODY.search(body.split("-----END ", 1)[0])
    return ("", match.group(0), "private_key", "") if whole or _KEY_MATERIAL.search(body) else None


def _url_password(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or _PLACEHOLDER.fullmatch(secret):
        return None
    return match.group("head"), secret, "url_password", ""


def _auth_header(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith(("[REDACTED:", "{", "$", "<", "%")):
        return None
    if match.group("scheme") is None and not _looks_random(secret):
        return None  # "Authorization: required" in prose
    kind = "bearer_token" if (match.group("scheme") or "").lower() == "bearer" else "authorization"
    return match.group("head"), secret, kind, ""


def _digest(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return None if "[REDACTED:" in secret else (match.group("head"), secret, "authorization", "")


def _rclone_matches(text: str) -> Iterator[re.Match[str]]:
    for command in _RCLONE.finditer(text):
        yield from _RCLONE_PAIR.finditer(text, command.start(), command.end())


def _pgpass_matches(text: str) -> Iterator[re.Match[str]]:
    done = 0
    for port in _PGPASS_PORT.finditer(text):
        low = max(0, port.start() - 256)  # a host name is at most 253 characters: the scan back stays short
        start = max(text.rfind(c, low, port.start()) for c in " \t\n'\"") + 1
        if start == 0 and low:
            continue
        if start >= done:
            match = _PGPASS.match(text, start)
            if match is not None:
                yield match
                done = match.end()


def _pgpass(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if not _is_literal_secret(secret, literal=True) or _NUMBERS.fullmatch(secret):
        return None  # `12:30:45:123:456`
    return match.group("head"), secret, "password", ""


def _ppk(match: re.Match[str]) -> Hit:
    body = match.group("secret")
    if not _KEY_MATERIAL.search(body):
        return None
    kept = body.rstrip("\r\n")
    return match.group("head"), kept, "private_key", body[len(kept) :]


def _conn_password(match: re.Match[str]) -> Hit:
    head, secret = (match.group("head"), match.group("secret")) if match.group("head") is not None else (
        match.group("head2"), match.group("secret2"))
    quote = secret[0] if secret.startswith("{") else ""
    value = secret[1:-1] if quote else secret
    if not _is_literal_secret(value, literal=True):
        return None
    return head + quote, value, "password", "}" if quote else ""


def _bearer(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    if secret.startswith("[REDACTED:") or not _looks_random(secret):
        return None
    return match.group("head"), secret, "bearer_token", ""


def _unquote(value: str) -> tuple[str, str]:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1], value[0]
    return value, ""


# The shell ends an unquoted word at a control or redirection operator: in `mysql -pX; ls` the password is `X`.
_SHELL_OPERATOR = _Lazy(r"[;&|<>`)]")


def _shell_word(value: str, quote: str) -> tuple[str, str]:
    """An unquoted flag value cut where the shell cuts it, and the rest of the command line after it."""
    cut = None if quote else _SHELL_OPERATOR.search(value)
    return (value, "") if cut is None else (value[: cut.start()], value[cut.start() :])


def _flag(match: re.Match[str]) -> Hit:
    key = match.group("key")
    if not is_secret_key(key):
        return None
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    if not _is_literal_secret(value, literal=bool(quote)):
        return None
    return match.group("head") + quote, value, _secret_kind(key), quote + rest


def _loose_value(match: re.Match[str], *, shell: bool = False) -> Hit:
    """A value whose place says it is a password (`-p`, `-u user:`, netrc's `password`): taken unless it is a
    placeholder or one plain word (`mysql -u root -p app` prompts, and `app` is the database). `shell`: a command
    line's word, which ends at a shell operator."""
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote) if shell else (value, "")
    if not _is_literal_secret(value, literal=False) or _NUMBERS.fullmatch(value):
        return None  # `docker run -u 1000:1000 -p 8080:80`: ids and ports
    return match.group("head") + quote, value, "password", quote + rest


def _curl_user(match: re.Match[str]) -> Hit:
    return _loose_value(match, shell=True)


def _short_p(match: re.Match[str]) -> Hit:
    """`-p` beside a user or in a password-taking client. Quoted, it is data; attached (`-pX`) to a MySQL client's
    `-p`, or after sshpass's, it can be nothing but the password, so even one plain word or digits (`-psecret`,
    `-p123456`) go; otherwise as `_loose_value` (`-u root -p app` prompts, `-u 1000 -p 8080` is a port)."""
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    certain = any(match.group(name) is not None for name in ("mysql", "sshpass", "redis", "mongo"))
    attached = match.group("head")[-1:] == "p"
    if not _is_literal_secret(value, literal=bool(quote) or certain or attached):
        return None
    if not (quote or certain) and _NUMBERS.fullmatch(value):
        return None  # `ps -u root -p1234`, `docker run -u 1000:1000 -p 8080:80`: ids and ports
    return match.group("head") + quote, value, "password", quote + rest


def _tool_value(match: re.Match[str]) -> Hit:
    key = match.groupdict().get("key")
    if key is not None and not is_secret_key(key):
        return None  # `setx PATH ...`, `git config user.name ...`
    value, quote = _unquote(match.group("secret"))
    value, rest = _shell_word(value, quote)
    if not _is_literal_secret(value, literal=True) or value.startswith(("env:", "file:", "fd:")):
        return None
    kind = "password" if key is None else _secret_kind(key)
    return match.group("head") + quote, value, kind, quote + rest


def _code_secret(match: re.Match[str]) -> Hit:
    key = match.groupdict().get("key")
    if key is not None and not is_secret_key(key):
        return None
    value, quote = _unquote(match.group("secret"))
    if not _is_literal_secret(value, literal=True):
        return None
    return match.group("head") + quote, value, "password" if key is None else _secret_kind(key), quote


def _bare_basic(match: re.Match[str]) -> Hit:
    """Only a base64 that decodes to `user:password`: `Basic QWxhZGRpbg` is a word, not a credential."""
    import base64
    import binascii

    secret = match.group("secret")
    try:
        decoded = base64.b64decode(secret + "=" * (-len(secret) % 4), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not (user and colon and password and decoded.isprintable()):
        return None
    return match.group("head"), secret, "authorization", ""


def _decoded_secret(blob: str) -> str | None:
    """The kind of secret base64 `blob` decodes to (text holding a secret, or `user:password`), or None."""
    import binascii

    data = "".join(blob.split()).rstrip("=")
    if len(data) % 4 == 1 or data.islower() or data.isupper():
        return None
    try:
        text = binascii.a2b_base64(data + "=" * (-len(data) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if len(text) < 8 or _CONTROL.search(text):
        return None
    if _USER_PASSWORD.fullmatch(text.strip()):
        return "password"
    found: list[tuple[str, str]] = []
    _scan(text, found, decode=False)
    return found[0][1] if found else None


def _b64_secret(match: re.Match[str]) -> Hit:
    kind = _decoded_secret(match.group("secret"))
    return None if kind is None else (match.group("head") if "head" in match.re.groupindex else "",
                                      match.group("secret"), kind, "")


def _sql_password(match: re.Match[str]) -> Hit:
    value, quote = _unquote(match.group("secret"))
    if not _is_literal_secret(value, literal=True):
        return None  # `IDENTIFIED BY '<password>'`, `PASSWORD '***'`
    return match.group("head") + quote, value, "password", quote


def _line_matches(pattern: re.Pattern[str], text: str, needles: tuple[str, ...],
                  also: str = "") -> Iterator[re.Match[str]]:
    """`pattern`'s matches, in order, searched only on the lines that hold one of `needles`: for a pattern that
    never crosses a line break and cannot match without a needle, the same matches as `pattern.finditer(text)`,
    without trying the pattern at every position of every other line (a lookbehind still sees the line before).
    `also`: a string the pattern needs on the same line too."""
    lines = set()
    for needle in needles:
        at = text.find(needle)
        while at >= 0:
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            start = text.rfind("\n", 0, at) + 1
            if not also or text.find(also, start, end) >= 0:
                lines.add((start, end))
            at = text.find(needle, end)
    for start, end in sorted(lines):
        yield from pattern.finditer(text, start, end)


def _next_line_matches(text: str) -> Iterator[re.Match[str]]:
    """The `_NEXT_LINE` matches whose value is a secret. One the rule declines does not hide the lines under it:
    `auth:` + `  api_key:` + `    X` is a mapping under `auth` and a value under `api_key`."""
    done = 0
    for end in _NEXT_LINE_END.finditer(text):
        line = text.rfind("\n", 0, end.start()) + 1
        if line >= done:
            match = _NEXT_LINE.match(text, line)
            if match is None:  # a JSON string's first line, decoded: the key starts after the string's quote
                quote = text.rfind('"', line, end.start())
                match = _NEXT_LINE.match(text, quote + 1) if quote >= 0 else None
            if match is not None and _next_line_value(match) is not None:
                yield match
                done = match.end()


def _next_line_value(match: re.Match[str]) -> Hit:
    """A secret key's value on the following lines: a block scalar's lines are data whatever they hold; a plain
    value must be one line, one word (or quoted), and not a nested mapping, a list or a comment."""
    key = match.group("key")
    if not is_secret_key(key):
        return None
    column = match.start("q") - match.start()  # past a list item's `- `
    lines = match.group("body").splitlines(keepends=True)
    taken = 0
    for line in lines:
        stripped = line.strip()
        if stripped and len(line) - len(line.lstrip(" \t")) <= column:
            break
        taken += 1
    while taken and not lines[taken - 1].strip():
        taken -= 1  # trailing blank lines are not the value's
    values = [line.strip() for line in lines[:taken] if line.strip()]
    if not values or any("[REDACTED:" in value for value in values):
        return None
    first = next(line for line in lines if line.strip())
    lead = first[: len(first) - len(first.lstrip(" \t"))]
    last = lines[taken - 1]
    ending = last[len(last.rstrip("\r\n")) :]
    tail = ending + "".join(lines[taken:])
    kind = _secret_kind(key)
    if match.group("block"):
        value = "\n".join(values)
        if not _is_literal_secret(value, literal=True):
            return None
        return match.group("head") + lead, value, kind, tail
    if len(values) > 1:
        # a plain scalar folded over lines: a base64 body wrapped at 64 or 76 columns under `private_key:`
        value = "".join(values)
        if not all(_WRAPPED_PIECE.fullmatch(v) for v in values) or not _looks_random(value):
            return None  # a mapping, a list, prose, or lines that do not read as one random value
        return match.group("head") + lead, "\n".join(values), kind, tail
    after = _NEXT_INDENT.match(match.string, match.end())
    if _MAPPING_LINE.match(values[0]) or (after and len(after.group(1)) > column):
        return None  # a mapping, a list, a comment, or a value running on over more lines
    value, quote = _unquote(values[0])
    if not quote and (re.search(r"\s", value) or not _is_literal_secret(value, literal=False)):
        return None  # prose under a heading (`Password:` + `  then press enter`), a variable, a command
    if quote and not _is_literal_secret(value, literal=True):
        return None
    return match.group("head") + lead + quote, value, kind, quote + tail


def _session_value(value: str) -> bool:
    """A session cookie's value, however short: six characters or more with letters and digits (`Xk3J9a`,
    `a1b2c3d4e5`), eight with both cases, or sixteen of anything. A counter (`sid=1`, `session_count=3`), one
    lowercase word (`deleted`, `expired`, `true`) or a placeholder is not one."""
    if value.startswith("[REDACTED:") or not _is_literal_secret(value, literal=True) or value.lower() == "deleted":
        return False
    letters = any(c.isalpha() for c in value)
    if len(value) >= 6 and letters and any(c.isdigit() for c in value):
        return True
    return (len(value) >= 8 and any(c.isupper() for c in value) and any(c.islower() for c in value)
            ) or (len(value) >= 16 and (letters or value.isdigit()))


def _cookie(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return (match.group("head"), secret, "cookie", "") if _session_value(secret) else None


def _session(match: re.Match[str]) -> Hit:
    """Outside a header the value also needs a digit and must not read as code (`session=session2`)."""
    secret = match.group("secret")
    if (not any(c.isdigit() for c in secret) or _IDENTIFIER.fullmatch(secret) or _CODE_REF.fullmatch(secret)
            or not _session_value(secret)):
        return None
    return match.group("head"), secret, "cookie", ""


def _sas_signature(match: re.Match[str]) -> Hit:
    secret = match.group("secret")
    return (match.group("head"), secret, "signature", "") if not secret.startswith("[REDACTED:") else None


_DOCKER_AUTH_KEYS = {"auth", "_auth"}
_RANDOM_WORD = _Lazy(r"[A-Za-z0-9+/=_]{16,}")
_TRAILING_OPERATORS = _Lazy(r"[;&|]+$")
_BASE64ISH = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")


def _wrapped_value(match: re.Match[str]) -> Hit:
    """A secret key's value wrapped over lines with no prefix to follow: a quoted string whose closing quote is on
    a later line, every line between one unbroken run (`"client_secret": "abc` + newline + `def"`), or a YAML/INI
    value whose continuation lines sit deeper than the key's line (`private_key: <base64>` + indented base64
    lines: a plain scalar folded over lines). Taken whole when it reads as random, not as words."""
    key = match.group("key")
    raw = match.group("wrapped") or match.group("wrapbare")
    if not is_secret_key(key):
        return None
    quote = match.group("wq") or ""
    body = raw[len(quote) : len(raw) - len(quote)]
    pieces = [piece.strip() for piece in body.split("\n")]
    if not quote:
        line = match.string.rfind("\n", 0, match.start()) + 1
        indent = len(match.string[line : match.start()]) - len(match.string[line : match.start()].lstrip(" \t"))
        for piece in body.split("\n")[1:]:
            if len(piece) - len(piece.lstrip(" \t")) <= indent:
                return None  # the next key of the same mapping, not this value's rest
        if any(not (len(piece) >= 16 or _RANDOMISH.search(piece)) for piece in pieces[1:]):
            return None  # a word on the next line is not a wrapped random value
    if not _looks_random("".join(pieces)):
        return None
    return match.group("head") + quote, body, _secret_kind(key), quote


_RANDOMISH = _Lazy(r"[0-9A-Z+/=]")


def _assignment(match: re.Match[str]) -> Hit:
    if match.re is _ASSIGNMENT and (match.group("wrapped") is not None or match.group("wrapbare") is not None):
        hit = _wrapped_value(match)
        if hit is not None:
            return hit
        line = _ASSIGNMENT_LINE.match(match.string, match.start())
        hit = _assignment(line) if line is not None else None
        if hit is None:
            return None
        return hit[:3] + (hit[3] + match.string[line.end() : match.end()],)
    key = match.group("key")
    quoted = match.group("quoted") or match.group("paren")
    if key == "KEY" and match.group("sep") == "=":
        # A bare KEY names a loop variable or a cache key as often as a secret: taken when its value looks random.
        value = quoted[1:-1] if quoted and len(quoted) >= 2 else match.group("bare") or ""
        if not _RANDOM_WORD.fullmatch(value) or not _looks_random(value):
            return None
        quote = quoted[0] if quoted else ""
        return match.group("head") + (match.group("open") or "") + quote, value, "api_key", quote
    if not is_secret_key(key):
        # docker config and .npmrc keep base64 `user:password` under a bare `auth` / `_auth`
        value = quoted[1:-1] if quoted and len(quoted) >= 2 else match.group("bare") or ""
        if key.lower() not in _DOCKER_AUTH_KEYS or not _BASE64ISH.fullmatch(value) or not _looks_random(value):
            return None
        if quoted:
            return match.group("head") + (match.group("open") or "") + quoted[0], value, "auth", quoted[0]
        return match.group("head"), value, "auth", ""
    if quoted:
        parts = re.findall(r""""((?:[^"\\\n]|\\.)*)"|'([^'\n]*)'""", quoted)
        value = "".join(dq or sq for dq, sq in parts)
        if not _is_literal_secret(value, literal=True) or _is_auth_switch(key, value):
            return None
        quote = quoted[0]
        return match.group("head") + (match.group("open") or "") + quote, value, _secret_kind(key), quote
    value = match.group("bare")
    if _BLOCK_INDICATOR.fullmatch(value) or value in ("!!binary", "!!str"):
        return None  # `password: |`, `password: !!binary`: the value is on the next lines (`_next_line_value`)
    rest = ""
    env_line = bool(match.group("export")) or (
        match.group("sep") == "=" and re.fullmatch(r"[A-Z][A-Z0-9_]*", key) is not None
    )
    # A long flag's value (`--password=secret`) is data like an env-file line's, even when it is one plain word.
    flag_value = match.group("flag") == "--" and match.group("sep") == "="
    if not flag_value and match.group("sep") == "=" and key.lower() in ("password", "passwd", "pwd"):
        # the conninfo string around it: the same line, at most 200 characters either side
        start = max(match.string.rfind("\n", 0, match.start()) + 1, match.start() - 200)
        end = match.string.find("\n", match.end(), match.end() + 200)
        flag_value = bool(_CONNINFO.search(match.string, start, end if end >= 0 else match.end() + 200))
    if not env_line:
        # Outside an env file a bare value ends at punctuation, and inside a query string at the next parameter.
        in_query = match.string[match.start() - 1 : match.start()] in ("?", "&")
        value = re.match(r"[^,;}\]&]*" if in_query else r"[^,;}\]]*", value).group(0)
        rest = match.group("bare")[len(value) :]
    else:
        # `PGPASSWORD=x; psql`, `export X=y&& z`: the shell operator that ends the line's command is kept (inside
        # the value, `a;b` stays whole: an env file takes it literally).
        operators = _TRAILING_OPERATORS.search(value)
        if operators and operators.start():
            value, rest = value[: operators.start()], value[operators.start() :]
    literal = env_line or flag_value or bool(match.group("tag"))  # `password: !!binary X`: YAML data, tagged
    if not _is_literal_secret(value, literal=literal) or _is_auth_switch(key, value):
        return None
    return match.group("head"), value, _secret_kind(key), rest


@functools.lru_cache(maxsize=8192)
def redact_text(text: str) -> str:
    """`redact` for short text that recurs — lesson and pattern wording on its way into pattern memory and the
    harness's published files — remembered, since the same lesson is observed again and again."""
    return redact(text)[0]


@functools.lru_cache(maxsize=4096)
def _redacted_key(key: str) -> tuple[str, int]:
    """`redact` for a mapping's key, remembered: the same few keys recur in every record, and a key that is itself
    a secret (a gateway tag named by a token: `x-reef-tag-<token>`) is rare."""
    return redact(key)


def redact_obj(obj: Any) -> tuple[Any, int]:
    """`redact` over every string in nested dicts, lists and tuples, keys included (a key that holds a secret is
    replaced like a value; one that collides with another key after that gets a `#2`, `#3`... suffix, so no value
    is dropped), plus any string or number stored under a key that names a secret (`{"password": "hunter2"}`),
    which no pattern inside the value would catch. Returns a new object and the number of replacements."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        out: dict = {}
        total = 0
        for key, value in obj.items():
            # a key redacted before (`[REDACTED:github_token]`) names no secret: redacting twice changes nothing
            secret_key = isinstance(key, str) and not key.startswith("[REDACTED:") and is_secret_key(key)
            stored = key
            if isinstance(key, str):
                shown, replaced = _redacted_key(key)
                if replaced:
                    total += replaced
                    stored, n = shown, 2
                    while stored in out or stored in obj:
                        stored, n = f"{shown}#{n}", n + 1
            if secret_key and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[stored], total = _mark(_secret_kind(key)), total + 1
                continue
            new, count = redact_obj(value)
            if (secret_key and count == 0 and isinstance(value, str) and _is_literal_secret(value, literal=True)
                    and not _is_auth_switch(key, value)):
                new, count = _mark(_secret_kind(key)), 1
            out[stored] = new
            total += count
        return out, total
    if isinstance(obj, (list, tuple)):
        items = []
        total = 0
        for value in obj:
            new, count = redact_obj(value)
            items.append(new)
            total += count
        return (items if isinstance(obj, list) else tuple(items)), total
    return obj, 0


def redact_argv(argv: list[str]) -> list[str]:
    """A command line's words, each redacted where the line as a whole says it holds a secret: `-pS3cret` is a
    password only after `mysql`, `hunter2` only after `--password` — one word alone says neither. The words are
    read joined by spaces (as typed), and each replacement is put back into the words it covered; each word is
    then read alone too. The number of words never changes."""
    words = [w if isinstance(w, str) else str(w) for w in argv]
    joined = " ".join(words)
    out, count = redact(joined)
    if count:
        bounds, at = [], 0
        for word in words:
            bounds.append((at, at + len(word)))
            at += len(word) + 1
        cuts: list[list[tuple[int, int, str]]] = [[] for _ in words]
        for start, end, marks in _replaced(joined, out):
            for i, (lo, hi) in enumerate(bounds):
                if start < hi and end > lo:
                    cuts[i].append((max(start, lo) - lo, min(end, hi) - lo, marks))
        for i, spans in enumerate(cuts):
            word = words[i]
            for start, end, marks in reversed(spans):
                word = word[:start] + marks + word[end:]
            words[i] = word
    return [redact(word)[0] for word in words]


def content_fields(text: str | bytes, store_content: bool) -> dict:
    """What a record keeps of some content: always its digest (of the original bytes), length in bytes and a
    redacted excerpt; the redacted text too when the scenario stores content. The excerpt is cut after
    redacting, so a secret that straddles the cut is still caught and no marker is cut in half."""
    if isinstance(text, bytes):
        raw = text
        decoded = text.decode("utf-8", errors="replace")
    elif isinstance(text, str):
        raw = text.encode("utf-8", errors="surrogatepass")
        decoded = _LONE_SURROGATE.sub("\ufffd", text)  # so the redacted text can be encoded and stored
    else:
        raise InvalidInput(f"content must be text or bytes, not {type(text).__name__}")
    fields: dict[str, Any] = {"digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "length": len(raw)}
    if store_content:
        redacted, _ = redact(decoded)
        fields["excerpt"] = _excerpt(redacted)
        fields["text"] = redacted
    else:
        fields["excerpt"] = _excerpt(redact(decoded[: EXCERPT_CHARS + WINDOW])[0])
    return fields


def _excerpt(text: str) -> str:
    if len(text) <= EXCERPT_CHARS:
        return text
    cut = EXCERPT_CHARS
    opened = text.rfind("[REDACTED:", 0, cut)
    if opened >= 0:
        closed = text.find("]", opened)
        if closed >= cut:
            cut = closed + 1
    return text[:cut]
