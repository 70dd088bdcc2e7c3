"""The catalogue: every secret's shape as a pattern (provider tokens, headers, assignments, the password flags of
common tools, code, cookies, encodings), compiled on first use: `reef run` imports this on every call."""

from __future__ import annotations

import re
from typing import Any


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


class _Lazy:
    """A regex compiled on its first use: `reef run` imports this module on every call, and most texts never reach
    the rarer rules (compiling them all up front doubled the module's import time)."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    @property
    def pattern(self) -> str:
        """The source, without compiling: a pattern built from another's reads it at import."""
        return self._args[0]

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


def _token_re(shape: str) -> re.Pattern[str]:
    pattern = _TOKEN_RES.get(shape)
    if pattern is None:
        pattern = _TOKEN_RES[shape] = re.compile(shape)
    return pattern


_PRIVATE_KEY = _Lazy(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY((?: BLOCK)?)-----"  # group 2 always takes part, so \2 can match
    r"(?P<body>.*?-----END \1PRIVATE KEY\2-----|(?:\\n|\s)*[A-Za-z0-9+/=][A-Za-z0-9+/=\s\\]*)",
    re.DOTALL,
)
_KEY_MATERIAL = _Lazy(r"[A-Za-z0-9+/=]{40,}")  # a PEM body line; code that only names the header has none
_KEY_BODY = _Lazy(r"[A-Za-z0-9+/=]{8,}")  # base64 between a BEGIN and its END
# The password runs to the last "@" before the host, so one that holds "@" itself (`u:p@ss@host`) goes whole.
_URL_PASSWORD = _Lazy(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s/:@'\"<>\[\]]*:)(?P<secret>[^\s/'\"<>]+)"
    r"(?=@[^\s/@'\"<>]+(?:[/?#:\s'\"<>]|$))"
)
_AUTH_HEADER = _Lazy(
    r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?(?:(?P<scheme>bearer|basic|token|bot|digest)\s+)?)"
    r"(?P<secret>[^\s\"',;]+)",
    re.IGNORECASE,
)
# Digest credentials are parameters (`username="bob", response="<hash of the password>"`), quoted or JSON-escaped
# (once or more: the quote's backslashes double with each level).
_DIGEST = _Lazy(
    r"(?P<head>\bauthorization[\"']?\s*[:=]\s*[\"']?digest\s+)"
    r"(?P<secret>[A-Za-z-]+=(?:\\*\"(?:[^\"\\\n]|\\[^\"])*\\*\"|[^\s,\"]+)(?:,[ \t]*[A-Za-z-]+="
    r"(?:\\*\"(?:[^\"\\\n]|\\[^\"])*\\*\"|[^\s,\"]+))*)",
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
_BEARER = _Lazy(r"(?P<head>\bbearer\s+)(?P<secret>[A-Za-z0-9._~+/=-]{16,})", re.IGNORECASE)
# The rest of an unquoted value: it ends at a space or a quote, and a backslash run just before a quote is that
# quote's escape, not the value's (`echo \"API_KEY=x\"` in a JSON string: the value is `x`, and the `\` stays
# with its quote, so the JSON around it is still valid after the value is replaced); so is a JSON-escaped line
# break or tab (`"password: x\nuser: bob"`: the value is `x`, and `user:` is the next line's, not the value's):
# a run of 1, 2 or 4 backslashes before `n`, `r` or `t` (the escape at depth 1, 2, 3). Other runs are a shell's
# backslash-newline escaped (3 at depth 1, 6 at depth 2): the value runs on over it, as it does unescaped.
_WORD_REST = r"""[^\s"'\\]*(?:(?:\\++(?![nrt"'])|\\{3}(?=[nrt])|\\{5,}+(?=[nrt]))[^\s"'\\]*)*"""  # the loop unrolled
_QUOTED = r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_ASSIGNMENT = _Lazy(
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
    | (?P<bare>[^\s"'\\]WORD_REST)
    )
    """.replace("QUOTED", _QUOTED).replace("WORD_REST", _WORD_REST).replace("RUN", r"[A-Za-z0-9+/=_.~-]"),
    re.VERBOSE,
)
# `_ASSIGNMENT` without the two wrapped forms: a wrapped reading that is declined falls back to the first line.
_ASSIGNMENT_LINE = _Lazy(
    _ASSIGNMENT.pattern.replace(_ASSIGNMENT.pattern[_ASSIGNMENT.pattern.index("    | (?P<wrapped>"):
                                                     _ASSIGNMENT.pattern.index("    | (?P<bare>")], ""),
    re.VERBOSE,
)
# `--password X`, `--api-key 'X'`: a flag that names a secret, its value after a space (`=` is an assignment above).
_FLAG = _Lazy(
    r"(?P<head>(?<![\w-])--?(?P<key>[A-Za-z][A-Za-z0-9_-]*)[ \t]+)"
    r"(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-]" + _WORD_REST + ")"
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
# `|`, `>-`, `|2`: a block scalar's indicator, and a JSON-escaped line break after it (escaped once or more)
_BLOCK_INDICATOR = _Lazy(r"[|>](?:[1-9][+-]?|[+-][1-9]?)?(?:\\+[rn].*)?")
_MAPPING_LINE = _Lazy(r"[\"']?[A-Za-z0-9_.$-]+[\"']?[ \t]*:(?:[ \t]|$)|-(?:[ \t]|$)|#")
# `mysql -uroot -pX`, `docker login -u bob -p X`, `sshpass -p X`: `-p` is a password only beside a user or in these;
# `redis-cli -a X` / `--pass X`: redis-cli's `-a` takes nothing but the password; so does the `-p` of mongosh and
# the mongo tools (`mongosh -p X -u admin`: the port is `--port`).
# A MySQL/MariaDB client's `-p` takes its value attached or not at all (`-p app` prompts; `app` is the database), so
# an attached value is the password whatever it looks like; the scan from the command name stops at a shell
# separator (`mysql ...; cp -pr a b`), and the name is a command's, not a path's last part (`-I/usr/include/mysql
# -pthread`). A value never starts with a shell operator (`mysql -uroot -p < dump.sql` prompts) or a backslash (the
# `\"` of a JSON-escaped quote: the decoded reading finds what is inside).
_SHORT_P = _Lazy(
    r"(?P<head>(?:(?P<mysql>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*(?:mysql[a-z]*|mariadb(?:-[a-z]+)*)\b(?!-)"
    r"[^\n;&|]*?[ \t]-p)"
    r"|(?P<sshpass>\bsshpass(?:[ \t]+-[a-oq-z]\S*)*[ \t]+-p[ \t]*)"
    r"|(?P<redis>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*redis-cli\b[^\n;&|]*?[ \t](?:-a[ \t]+|--pass(?:[ \t]+|=)))"
    r"|(?P<mongo>(?<![^\s;&|(`'\"])(?:(?:[\w.~][\w.~-]*)?/)*"
    r"mongo(?:sh|dump|restore|export|import|stat|top|files)?\b(?!-)[^\n;&|]*?[ \t]-p[ \t]+)"
    r"|[ \t]-u[ \t]*\S+[ \t]+-p[ \t]*))"
    r"(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-]" + _WORD_REST + ")"
)
# The password options of common tools: (needles, pattern). A pattern never crosses a line and runs only on the
# lines holding one of its needles (`_line_matches`); `head` is kept, `secret` is the password (`key`, when present,
# must name a secret). A value already redacted is stepped over, so a second pass finds a command's second password
# (`ssh-keygen -P old -N new`). The place says it is a password, so one plain word goes too; `$VAR`, `$(...)`,
# `env:`/`file:` references and an empty `''` stay.
_CMD = r"(?<![^\s;&|(`'\"/])"  # a command name starts a word (or follows a path's `/`)
_SEG = r"\b(?!-)[^\n;&|]*?[ \t]"  # ... and the flag comes later in the same command
_TOOL_VALUE = r"""(?!["']?\[REDACTED:)(?P<secret>"[^"\n]*"|'[^'\n]*'|[^\s"'\\<>|&;()`-]""" + _WORD_REST + ")"
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
                     r"(?P<secret>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'\\<>|&;()`-]" + _WORD_REST + ")")
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
_B64_LINE = _Lazy(r"(?:\r?\n|(?:\\+r)?\\+n)(?P<lead>[ \t]*)(?P<run>[A-Za-z0-9+/]{1,76}={0,2})"
                  r"(?=[ \t]*(?:\r?\n|\\+r|\\+n|\Z|\\*\"))")  # a line break, raw or JSON-escaped (once or more)
_USER_PASSWORD = _Lazy(r"(?=[\w.@+-]*[A-Za-z])[\w.@+-]{1,64}:(?![/\\])\S{3,128}")  # not `https://...`
_CONTROL = _Lazy(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# SQL that sets a password: `IDENTIFIED BY 'x'`, `WITH [ENCRYPTED] PASSWORD 'x'`, `ALTER ROLE app PASSWORD 'x'`,
# `PASSWORD('x')`, `SET PASSWORD [FOR u] = 'x'`. The value is a quoted literal, so it is data whatever it looks like.
_SQL_PASSWORD = _Lazy(
    r"(?P<head>(?:\b(?i:user|role|grant)\b[^\n;]{0,200}?\b(?i:identified)[ \t]+(?:(?i:with)[ \t]+\w+[ \t]+)?(?i:by)"
    r"|\b(?:(?i:with)[ \t]+(?:(?i:encrypted)[ \t]+)?(?i:password)|PASSWORD)"
    r"|\b(?i:set)[ \t]+(?i:password)(?:[ \t]+(?i:for)[ \t]+\S+)?[ \t]*=)[ \t]*(?:(?i:password)[ \t]*)?\(?[ \t]*)"
    r"(?P<secret>'[^'\n]*'|\"[^\"\n]*\")"
)
# libpq's key=value conninfo (`psql "host=db user=app password=x"`, `psycopg2.connect("dbname=app password=x")`):
# beside another conninfo key separated by a space (not a comma: `connect(host=host, password=password)` is code).
_CONNINFO = _Lazy(r"(?<![\w.-])(?:host|hostaddr|dbname|user|port|sslmode)=[^\s,()'\"=]+(?=[ \t]+\w+=|[ \t]*['\"])")
_CURL_USER = _Lazy(r"(?P<head>(?<![\w-])(?:-u|--user)[ \t]+['\"]?[^\s:'\"]+:)(?P<secret>[^\s'\"]+)")
# netrc: `machine H login U password P`, on one line or several.
_NETRC = _Lazy(
    r"(?P<head>\b(?:machine[ \t]+\S+|default)(?:\s+(?:login|account|port)[ \t]+\S+)*\s+password[ \t]+)(?P<secret>\S+)"
)
# `Cookie:` / `Set-Cookie:` headers, and curl's `-b` / `--cookie`: a cookie named for a session or a credential is
# one, however short (`sid=Xk3J9a`, `PHPSESSID=a1b2c3d4e5`: a test server's or an old framework's session id).
_COOKIE_LINE = _Lazy(r"(?P<head>\b(?:set-)?cookie[\"']?[ \t]*[:=][ \t]*)(?P<value>[^\n]+)", re.IGNORECASE)
_CURL_COOKIE = _Lazy(r"(?P<head>(?<![\w-])(?:-b|--cookie)[ \t]+)(?P<value>[^\n]+)")
_COOKIE = _Lazy(r"(?P<head>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*(?:sess|sid|auth|token|jwt|remember)[A-Za-z0-9_.-]*=)"
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
_SAS_SIGNATURE = _Lazy(r"(?P<head>[?&]sig=)(?P<secret>[A-Za-z0-9%+/=_-]{16,})")
_ANSI = _Lazy(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_URL_ESCAPE = _Lazy(r"%[0-9A-Fa-f]{2}")
_JSON_ESCAPE = _Lazy(r"\\(?:[\"\\/bfnrt]|u[0-9a-fA-F]{4})")
_JSON_CHARS = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ECHO_MIN = 8  # a found secret this long, and not one word, is removed wherever else it appears, in any encoding
_NUMBERS = _Lazy(r"[0-9.:/-]+")
