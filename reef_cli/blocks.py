"""Managed blocks: the marked regions of CLAUDE.md / AGENTS.md / notes files that reef may edit, bullet by bullet.

    <!-- reef:begin learned -->
    - Always run the tests before finishing. <!-- reef:b3f2a1 -->
    <!-- reef:end learned -->

Why it is built this way:

* **Only the inside changes.** A file is split into prefix (up to and including the begin marker line), inner
  lines and suffix (from the end marker line on); a render joins the same prefix and suffix bytes around new inner
  lines, so text outside the block is byte-identical by construction, and `outside_unchanged` re-checks it.
* **Damage is reported, never guessed at.** A begin marker without its end, an end without a begin, a second block
  of the same name, a duplicated bullet id or a malformed reef id comment raises InvalidInput naming file and line;
  reef does not write that file until a human fixes it.
* **Stable ids.** Each bullet carries `<!-- reef:ID -->` (6-16 lowercase hex digits, assigned from its pattern key
  in patterns.py), so add/update/remove address one bullet and a re-run never duplicates it.
* **Lines inside the block that are not reef bullets** (blank lines, a note a human typed) are kept in place,
  count toward the character budget and are never evicted: reef only removes bullets it can name.
* **Budgets are checked on every write** (`add`, `update`), not only on whole-block renders: the character count is
  the length of the text between the markers (exactly what an agent loads), bullets are counted by id.
* **Line endings**: lines are split on "\\n" only, so CRLF files keep their "\\r"; new lines copy the begin
  marker's ending.
* **Bytes that are not UTF-8** may sit outside the block (callers decode with surrogateescape and encode back the
  same way, so they survive byte for byte); inside it they are damage, reported like a broken marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput
from .printable import plain

DEFAULT_BLOCK = "learned"
_NAME = r"[a-z0-9][a-z0-9_-]{0,31}"
_BEGIN = re.compile(rf"^\s*<!--\s*reef:begin\s+({_NAME})\s*-->\s*$")
_END = re.compile(rf"^\s*<!--\s*reef:end\s+({_NAME})\s*-->\s*$")
_ANY_MARKER = re.compile(r"^\s*<!--\s*reef:(begin|end)\b")
_BULLET = re.compile(r"^\s*[-*]\s+(?P<text>.*?)\s*<!--\s*reef:(?P<id>[0-9a-f]{6,16})\s*-->\s*$")
_ID_COMMENT = re.compile(r"<!--\s*reef:(?!begin\b|end\b)([^\s>]*)\s*-->")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$")
ID_RE = re.compile(r"^[0-9a-f]{6,16}$")
MAX_BULLET_CHARS = 300


class BudgetExceeded(InvalidInput):
    """A write would take a block past max_bullets or max_chars."""


def clean_text(text: str, limit: int = MAX_BULLET_CHARS) -> str:
    """One line of bullet text: whitespace collapsed, no terminal escapes or other control/bidi characters (an
    instruction file is read by agents and `cat`), no HTML comment delimiters (they would break the id comment), no
    leading list marker, at most `limit` characters (cut at a word with an ellipsis)."""
    text = " ".join(plain(str(text)).split())
    text = text.replace("<!--", "<!- -").replace("-->", "- ->")
    text = re.sub(r"^[-*+]\s+", "", text)
    if len(text) > limit:
        cut = text[: limit - 1].rsplit(" ", 1)[0] or text[: limit - 1]
        text = cut.rstrip(" ,;:") + "…"
    return text


def render_bullet(bullet_id: str, text: str) -> str:
    if not ID_RE.match(bullet_id):
        raise InvalidInput(f"bullet id {bullet_id!r} must be 6-16 lowercase hex digits")
    return f"- {clean_text(text)} <!-- reef:{bullet_id} -->"


def begin_marker(name: str = DEFAULT_BLOCK) -> str:
    return f"<!-- reef:begin {name} -->"


def end_marker(name: str = DEFAULT_BLOCK) -> str:
    return f"<!-- reef:end {name} -->"


@dataclass(frozen=True)
class Bullet:
    id: str
    text: str
    line: int  # 1-based line in the file as parsed (0 for a bullet added since)

    def to_json(self) -> dict:
        return {"id": self.id, "text": self.text, "line": self.line}


def _strip_eol(line: str) -> str:
    return line[:-1] if line.endswith("\r") else line


class Block:
    """One parsed managed block of one file; edit with add/update/remove, then `render()` the whole file."""

    def __init__(self, source: str, name: str, prefix: list[str], inner: list[str], suffix: list[str],
                 begin_line: int, eol: str):
        self.source = source
        self.name = name
        self._prefix = prefix
        self._suffix = suffix
        self.begin_line = begin_line
        self.eol = eol  # "\r" for CRLF files (kept on every line we write), "" otherwise
        self._items: list[Bullet | str] = []
        for offset, raw in enumerate(inner):
            line_no = begin_line + 1 + offset
            body = _strip_eol(raw)
            m = _BULLET.match(body)
            if m:
                self._items.append(Bullet(m.group("id"), m.group("text"), line_no))
                continue
            bad = _ID_COMMENT.search(body)
            if bad:
                raise InvalidInput(
                    f"{source}:{line_no}: malformed reef bullet id {bad.group(0)!r} in managed block '{name}' "
                    f"(expected '- TEXT <!-- reef:HEX -->' with 6-16 hex digits); fix the line by hand"
                )
            self._items.append(raw)
        seen: dict[str, int] = {}
        for item in self._items:
            if isinstance(item, Bullet):
                if item.id in seen:
                    raise InvalidInput(
                        f"{source}:{item.line}: bullet id reef:{item.id} is duplicated in managed block '{name}' "
                        f"(first on line {seen[item.id]}); remove one copy by hand — reef will not guess which"
                    )
                seen[item.id] = item.line

    # -- reading
    @property
    def bullets(self) -> list[Bullet]:
        return [i for i in self._items if isinstance(i, Bullet)]

    def get(self, bullet_id: str) -> Bullet | None:
        for item in self._items:
            if isinstance(item, Bullet) and item.id == bullet_id:
                return item
        return None

    def _inner_lines(self) -> list[str]:
        return [render_bullet(i.id, i.text) + self.eol if isinstance(i, Bullet) else i for i in self._items]

    def inner_text(self) -> str:
        """The text between the markers, as an agent reads it."""
        return "".join(line + "\n" for line in self._inner_lines())

    def chars(self) -> int:
        return len(self.inner_text())

    def render(self) -> str:
        return "\n".join(self._prefix + self._inner_lines() + self._suffix)

    # -- editing (each write re-checks the budget)
    def _check(self, max_bullets: int | None, max_chars: int | None, what: str) -> None:
        if max_bullets is not None and len(self.bullets) > max_bullets:
            raise BudgetExceeded(
                f"{self.source}: {what} would make {len(self.bullets)} bullets in block '{self.name}' "
                f"(budget max_bullets {max_bullets})"
            )
        if max_chars is not None and self.chars() > max_chars:
            raise BudgetExceeded(
                f"{self.source}: {what} would make block '{self.name}' {self.chars()} characters "
                f"(budget max_chars {max_chars})"
            )

    def _keep_within(self, before: list, max_bullets: int | None, max_chars: int | None, what: str) -> None:
        """Undo the edit just made (back to `before`) when it breaks a budget, then raise."""
        try:
            self._check(max_bullets, max_chars, what)
        except BudgetExceeded:
            self._items = before
            raise

    def add(self, bullet_id: str, text: str, *, max_bullets: int | None = None, max_chars: int | None = None) -> None:
        """Append a bullet before the end marker; an existing id is updated in place instead (never duplicated)."""
        if self.get(bullet_id) is not None:
            return self.update(bullet_id, text, max_bullets=max_bullets, max_chars=max_chars)
        render_bullet(bullet_id, text)  # validates the id
        before = list(self._items)
        insert_at = len(self._items)
        while insert_at > 0 and isinstance(self._items[insert_at - 1], str) and not _strip_eol(self._items[insert_at - 1]).strip():
            insert_at -= 1  # keep trailing blank lines (a human's spacing) after the bullets
        self._items.insert(insert_at, Bullet(bullet_id, clean_text(text), 0))
        self._keep_within(before, max_bullets, max_chars, f"adding reef:{bullet_id}")

    def update(self, bullet_id: str, text: str, *, max_bullets: int | None = None, max_chars: int | None = None) -> None:
        for n, item in enumerate(self._items):
            if isinstance(item, Bullet) and item.id == bullet_id:
                before = list(self._items)
                self._items[n] = Bullet(bullet_id, clean_text(text), item.line)
                self._keep_within(before, max_bullets, max_chars, f"updating reef:{bullet_id}")
                return
        raise InvalidInput(f"{self.source}: no bullet reef:{bullet_id} in managed block '{self.name}'")

    def remove(self, bullet_id: str) -> bool:
        for n, item in enumerate(self._items):
            if isinstance(item, Bullet) and item.id == bullet_id:
                del self._items[n]
                return True
        return False


def parse(text: str, *, source: str, name: str = DEFAULT_BLOCK) -> Block | None:
    """The block called `name` in `text`, None when the file has no reef markers of that name; InvalidInput naming
    the file and line when the markers are damaged."""
    lines = text.split("\n")
    begin = end = None
    for n, raw in enumerate(lines):
        body = _strip_eol(raw)
        mb, me = _BEGIN.match(body), _END.match(body)
        if mb and mb.group(1) == name:
            if begin is not None and end is None:
                raise InvalidInput(
                    f"{source}:{n + 1}: a second '{begin_marker(name)}' before the block opened on line {begin + 1} "
                    f"was closed; fix the markers by hand — reef will not guess where the block ends"
                )
            if end is not None:
                raise InvalidInput(
                    f"{source}:{n + 1}: a second managed block '{name}' (the first is on lines {begin + 1}-{end + 1}); "
                    f"merge them by hand — reef edits exactly one block per name"
                )
            begin = n
        elif me and me.group(1) == name:
            if begin is None or end is not None:
                raise InvalidInput(
                    f"{source}:{n + 1}: '{end_marker(name)}' without a matching '{begin_marker(name)}' before it; "
                    f"fix the markers by hand"
                )
            end = n
        elif not (mb or me) and _ANY_MARKER.match(body):
            raise InvalidInput(
                f"{source}:{n + 1}: malformed reef marker {body.strip()!r}; expected '{begin_marker(name)}' or "
                f"'{end_marker(name)}' alone on a line — fix it by hand"
            )
    if begin is None:
        return None
    if end is None:
        raise InvalidInput(
            f"{source}:{begin + 1}: managed block '{name}' has no end marker '{end_marker(name)}'; reef will not guess "
            f"where it ends — add the marker by hand"
        )
    for n in range(begin + 1, end):
        try:
            lines[n].encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8, kept as lone surrogates by the caller
            raise InvalidInput(
                f"{source}:{n + 1}: bytes that are not UTF-8 inside managed block '{name}'; save the file as UTF-8 "
                f"or fix the line by hand"
            ) from None
    eol = "\r" if lines[begin].endswith("\r") else ""
    return Block(source, name, lines[: begin + 1], lines[begin + 1 : end], lines[end:], begin + 1, eol)


def new_file(title: str, name: str = DEFAULT_BLOCK) -> str:
    """A fresh notes file holding one empty block (for a Learned-zone surface that does not exist yet)."""
    return f"# {title}\n\nreef writes the bullets between the markers; text outside them is yours.\n\n" \
           f"{begin_marker(name)}\n{end_marker(name)}\n"


def append_block(text: str, name: str = DEFAULT_BLOCK) -> str:
    """`text` with an empty block appended (only for files reef owns entirely: the Learned zone)."""
    if text and not text.endswith("\n"):
        text += "\n"
    sep = "\n" if text else ""
    return f"{text}{sep}{begin_marker(name)}\n{end_marker(name)}\n"


def outside_unchanged(old: str, new: str, *, source: str, name: str = DEFAULT_BLOCK) -> bool:
    """True when `new` differs from `old` only between the markers of block `name` (the managed-zone contract)."""
    a, b = parse(old, source=source, name=name), parse(new, source=source, name=name)
    if a is None or b is None:
        return old == new
    return a._prefix == b._prefix and a._suffix == b._suffix


def bullet_lines(text: str) -> list[tuple[int, str]]:
    """Markdown list items outside reef's blocks (1-based line, text without marker): the human's rules, which a
    learned bullet must not contradict."""
    out = []
    inside = False
    for n, raw in enumerate(text.split("\n"), 1):
        body = _strip_eol(raw)
        if _ANY_MARKER.match(body):
            inside = not inside
            continue
        m = None if inside else _LIST_ITEM.match(body)
        if m:
            out.append((n, _ID_COMMENT.sub("", m.group(1)).strip()))
    return out
