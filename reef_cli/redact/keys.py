"""What a name and a value say: does a key or variable name a secret (`DB_PASSWORD`, not `max_tokens`), and does
the value it holds read as a literal secret rather than a placeholder, a reference or code."""

from __future__ import annotations

import re

from .shapes import _Lazy

_WORD = _Lazy(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
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
_PLACEHOLDER = _Lazy(
    r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\$\{\{.*\}\}|\{\{.*\}\}|\{[A-Za-z_][A-Za-z0-9_.]*\}|<[^<>]*>|%\([^)]*\)s|"
    r"\*+|x{3,}|X{3,}|\.\.\.|…|-+",
    re.DOTALL,
)
_CODE_REF = _Lazy(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_PATH = _Lazy(r"(?:~|\.{1,2})?/[^\s]*")
_NOT_SECRET_VALUES = {"none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off", "required",
                      "optional", "str", "string", "bytes", "int", "bool"}


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
