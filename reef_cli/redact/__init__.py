"""Secret-shaped strings out of what reef stores: transcripts, feedback and excerpts pass through here first.

Best effort, tuned to miss as few real secrets as possible without mangling ordinary code and prose: provider
tokens are matched by their documented shapes; `KEY=value`-style assignments only when the key names a secret
and the value looks like a literal rather than code (`token = get_token()` stays); a value may sit on the next line
(YAML block scalars, INI continuations); a provider token may be wrapped over lines, and so may a random value under a
secret key; flags and arguments that only a password fills (`mysql -pX`, `ssh-keygen -N X`, `echo X | sudo -S`) are
read by the tool's own syntax; a secret said in words ("my password is X", "pw=X", "비밀번호는 X") when the value
reads as a credential rather than a word, code or a placeholder (`plain` has the rule). Text is also read with
invisible characters dropped and no-break spaces made plain, and base64 is decoded and read. Every replacement
reads `[REDACTED:<kind>]`, and text that is already redacted passes through unchanged (and uncounted).

The public API is here (`redact`, `redact_text`, `redact_obj`, `redact_argv`, `excerpt`, `content_fields`,
`is_secret_key`); the
rooms behind it: `shapes` (every pattern), `keys` (what a name and a value say), `readings` (invisible characters,
colour codes, JSON and URL escapes), `wrapped` (tokens broken over lines), `plain` (secrets said in words), `scan`
(one pass of every rule) and `rules` (what each match keeps and replaces).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from ..errors import InvalidInput
from .keys import _is_auth_switch, _is_literal_secret, _secret_kind, is_secret_key
from .readings import _CONTINUATION, _HIDDEN, _MARK_RE, _redact_colours, _redact_hidden, _replaced
from .shapes import _Lazy, _mark


EXCERPT_CHARS = 200
WINDOW = 4096  # how far past the excerpt a secret that starts inside it may run and still be found whole

_LONE_SURROGATE = _Lazy("[\ud800-\udfff]")


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
    if not text:
        return text, 0  # an empty output (`reef run -- true`): no rule to compile, nothing to read
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
        fields["excerpt"] = redacted[: _cut(redacted, EXCERPT_CHARS)]
        fields["text"] = redacted
    else:
        fields["excerpt"] = excerpt(decoded, EXCERPT_CHARS)[0]
    return fields


def excerpt(text: str, limit: int) -> tuple[str, bool]:
    """The first `limit` or so characters of `text`, redacted; and whether anything was cut off. Only a window of
    the text is redacted (a long output costs ~0.5 s/MB to scan), and the excerpt is cut from the *redacted* window,
    so the window must reach well past the cut in the original text: a PEM key early on shrinks to a short marker,
    and a cut made at `limit` redacted characters would otherwise land at the window's end, where a token cut short
    by the window is too short to match and would be kept. So the window grows until at least `WINDOW` characters
    of the original text follow the cut (counted as the characters left outside markers, which stand only for
    themselves) or it holds the whole text; a secret that starts inside the excerpt and is shorter than `WINDOW`
    is then seen whole. A redaction marker is never cut in half."""
    size = limit + WINDOW
    while True:
        out = redact(text[:size])[0]
        cut = _cut(out, limit)
        if size >= len(text):
            return out[:cut], cut < len(out)
        if len(_MARK_RE.sub("", out[cut:])) >= WINDOW:
            return out[:cut], True
        size *= 2


def _cut(text: str, limit: int) -> int:
    """Where to cut `text` near `limit` characters: at `limit`, or just after a redaction marker that spans it."""
    if len(text) <= limit:
        return len(text)
    cut = limit
    opened = text.rfind("[REDACTED:", 0, cut + len("[REDACTED:") - 1)  # one that starts before the cut
    if 0 <= opened < cut:
        closed = text.find("]", opened)
        if closed >= cut:
            cut = closed + 1
    return cut
