"""The zone guard: the one place that decides whether reef may write a path under the harness root.

Every writer calls :func:`check_write` (or :func:`decide`) before it touches a file, so a path the zone map
freezes can never be changed by an automatic step, however that path is spelled.

Zones, declared in harness.yaml and handed over as a :class:`ZoneMap`:

* ``frozen``    - never written automatically; people edit these.
* ``managed``   - only text inside reef managed blocks may change; the rest of the file is frozen.
* ``evolvable`` - may change, but every change needs schema validation and the canary gate.
* ``learned``   - reef writes freely.

Precedence, most restrictive first (the first rule that applies names the reason):

1. Blocked outright: an empty path; control characters or text that is not valid UTF-8; a path that leaves
   the harness root (``..``, an absolute path elsewhere, a Windows drive or UNC path); a ``.git`` or ``.reef``
   segment at any depth; the zone map itself (``harness.yaml`` or ``harness.yml`` at the root); the root
   itself; a segment shaped like a Windows 8.3 short name (``HARNES~1.YAM`` may alias any sibling); a
   symlink that points outside the root or lands in a frozen path; a symlink loop; an unreadable component;
   an existing file with more than one hard link (another of its names may be frozen).
2. ``always_frozen`` globs (canary tasks, evaluators).
3. ``frozen`` globs.
4. ``managed`` globs.
5. ``evolvable`` globs.
6. ``learned`` globs.
7. Anything unlisted is frozen.

Spellings. One file has many names, and the filesystem, a later checkout on another OS, or some layer that
decodes the path may read any of them. So the guard does not trust one spelling: it builds every candidate
reading of the path and classifies each; the decision is the most restrictive (frozen > managed > evolvable >
learned; on a tie the earlier candidate's reason is kept, and the path as the OS reads it comes first).
The candidates are the closure of these readings over the path as given:

* ``\\`` as a separator; repeated ``/``, ``.`` segments and a trailing ``/`` ignored; ``..`` resolved
  lexically (above the root means outside);
* NFC, NFD, NFKC and NFKD forms (fullwidth letters, compatibility ligatures, combining accents), and the
  path with default-ignorable code points (zero-width joiners, bidi marks; HFS+ drops them) removed;
* the path percent-decoded once (``%2e%2e/``, ``.claude%2frules``);
* Windows aliases: trailing dots and spaces stripped from each segment, NTFS stream suffixes (``::$DATA``,
  ``:name``) stripped;
* for each candidate, the path the OS would really reach: the walk follows every existing symlink component
  by component from the real root, ``..`` applying after the link as the kernel does.

Globs are always matched both exactly and case-insensitively (``str.casefold``), because the harness may
live on a case-insensitive filesystem; restrictiveness makes that safe in both directions.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reef_cli.errors import InvalidInput, PolicyError

FROZEN = "frozen"
MANAGED = "managed"
EVOLVABLE = "evolvable"
LEARNED = "learned"
ALLOWED = "allowed"
BLOCKED = "blocked"

ZONE_MAP_NAMES = ("harness.yaml", "harness.yml")
PRIVATE_DIRS = (".git", ".reef")

_RANK = {LEARNED: 0, EVOLVABLE: 1, MANAGED: 2, FROZEN: 3}
_ZONE_KEYS = ("frozen", "evolvable", "learned", "managed", "always_frozen")
_MAX_SYMLINKS = 40  # what Linux allows before ELOOP
_DRIVE = re.compile(r"[A-Za-z]:")
_SHORT_NAME = re.compile(r"[^~.]{1,6}~[0-9]+(?:\.[^.]{0,3})?")
_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_ALIAS_HINT = re.compile(r"[. ](?:/|$)|:")
# Default-ignorable code points outside category Cf (Unicode DerivedCoreProperties).
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


# --------------------------------------------------------------------------------------------- zone map


@dataclass(frozen=True)
class ZoneMap:
    """The zones declared in harness.yaml; each field is a tuple of globs (see :func:`glob_match`)."""

    frozen: tuple[str, ...] = ()
    evolvable: tuple[str, ...] = ()
    learned: tuple[str, ...] = ()
    managed: tuple[str, ...] = ()  # only text inside reef managed blocks is learned; the rest is frozen
    always_frozen: tuple[str, ...] = ()  # from config: canary task globs, evaluator globs

    @classmethod
    def from_mapping(cls, d: Mapping) -> ZoneMap:
        if not isinstance(d, Mapping):
            raise InvalidInput(
                f"harness.yaml zones must be a mapping of zone name to glob list, not {type(d).__name__}"
            )
        for key in d:
            if key not in _ZONE_KEYS:
                raise InvalidInput(
                    f"harness.yaml zones has unknown key {key!r}; expected one of {', '.join(_ZONE_KEYS)}"
                )
        return cls(**{key: _glob_list(key, d.get(key)) for key in _ZONE_KEYS})

    def to_json(self) -> dict[str, list[str]]:
        return {key: list(getattr(self, key)) for key in _ZONE_KEYS}


def _glob_list(key: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise InvalidInput(f"harness.yaml zones.{key} must be a list of glob strings, not {type(value).__name__}")
    for glob in value:
        if not isinstance(glob, str) or not glob.strip():
            raise InvalidInput(f"harness.yaml zones.{key} holds {glob!r}; each entry must be a non-empty glob string")
        if ".." in glob.replace("\\", "/").split("/"):
            raise InvalidInput(
                f"harness.yaml zones.{key} glob {glob!r} uses '..'; globs are relative to the harness root"
            )
        try:
            _compile(glob, False)
        except InvalidInput as exc:
            raise InvalidInput(f"harness.yaml zones.{key}: {exc}") from None
    return tuple(value)


# --------------------------------------------------------------------------------------------- globs


def glob_match(pattern: str, relpath: str, *, casefold: bool = False) -> bool:
    """Whether ``relpath`` (a relative posix path) matches ``pattern``, with gitignore-like semantics.

    Patterns are anchored at the harness root: ``CLAUDE.md`` matches only the root file and ``*.md`` only
    root-level files; write ``**/*.md`` to float. ``**`` as a whole segment matches zero or more whole
    segments, so ``a/**/b`` matches ``a/b`` and ``a/x/y/b``, and a trailing ``/**`` matches the directory
    itself and everything under it. ``*`` and ``?`` never cross ``/``; ``[abc]``, ``[a-z]`` and ``[!abc]``
    (or ``[^abc]``) match one character other than ``/``; ``\\`` escapes the next character. A leading
    ``/`` or ``./`` is ignored and a trailing ``/`` means ``/**``. ``casefold=True`` compares both sides
    after :meth:`str.casefold`. Raises :class:`InvalidInput` for a pattern that cannot compile.
    """
    if casefold:
        relpath = relpath.casefold()
    path = "/".join(s for s in relpath.split("/") if s not in ("", "."))
    return _compile(pattern, casefold).fullmatch(path) is not None


@functools.lru_cache(maxsize=256)
def glob_matcher(patterns: tuple[str, ...]):
    """One compiled alternation for many globs (same semantics as glob_match): walking a tree stays cheap."""
    if not patterns:
        return lambda relpath: False
    combined = re.compile("|".join(f"(?:{_compile(p, False).pattern})" for p in patterns), re.DOTALL)
    return lambda relpath: combined.fullmatch(relpath) is not None


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str, casefold: bool) -> re.Pattern[str]:
    source = pattern.casefold() if casefold else pattern
    segments = [s for s in source.split("/") if s not in ("", ".")]
    if source.endswith("/") and segments:
        segments.append("**")
    collapsed: list[str] = []
    for seg in segments:
        if not (seg == "**" and collapsed and collapsed[-1] == "**"):
            collapsed.append(seg)
    parts: list[str] = []
    last = len(collapsed) - 1
    for i, seg in enumerate(collapsed):
        if seg == "**":
            if i == last:
                parts.append(".*" if i == 0 else "(?:/.*)?")
            else:
                parts.append("(?:[^/]+/)*" if i == 0 else "/(?:[^/]+/)*")
        else:
            if i > 0 and collapsed[i - 1] != "**":
                parts.append("/")
            parts.append(_segment_regex(seg))
    try:
        return re.compile("".join(parts), re.DOTALL)
    except re.error as exc:
        raise InvalidInput(f"invalid glob {pattern!r}: {exc}") from None


def _segment_regex(seg: str) -> str:
    out: list[str] = []
    i, n = 0, len(seg)
    while i < n:
        ch = seg[i]
        if ch == "\\":
            out.append(re.escape(seg[i + 1] if i + 1 < n else "\\"))
            i += 2
        elif ch == "*":
            while i < n and seg[i] == "*":
                i += 1
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            cls, i = _class_regex(seg, i)
            out.append(cls)
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _class_regex(seg: str, start: int) -> tuple[str, int]:
    """Translate the ``[...]`` opening at ``start``; an unclosed ``[`` is a literal bracket.

    Members are emitted as code-point escapes so no character can start a regex set operation."""
    i, n = start + 1, len(seg)
    negate = i < n and seg[i] in "!^"
    if negate:
        i += 1
    members: list[tuple[str, bool]] = []  # (character, written as an escape or the first member)
    while i < n and (seg[i] != "]" or not members):
        if seg[i] == "\\" and i + 1 < n:
            members.append((seg[i + 1], True))
            i += 2
        else:
            members.append((seg[i], not members))
            i += 1
    if i >= n:
        return re.escape("["), start + 1
    body: list[str] = []
    k = 0
    while k < len(members):
        char = members[k][0]
        if k + 2 < len(members) and members[k + 1] == ("-", False):
            body.append(f"{_code(char)}-{_code(members[k + 2][0])}")
            k += 3
        else:
            body.append(_code(char))
            k += 1
    if negate:
        return f"[^/{''.join(body)}]", i + 1
    return f"(?!/)[{''.join(body)}]", i + 1


def _code(char: str) -> str:
    return f"\\U{ord(char):08x}"


# --------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class ZoneDecision:
    """What the guard decided for one path; ``normalized`` is the root-relative posix path the OS would
    write (``.`` for the root itself), or None when the path has no such form (outside, control chars)."""

    path: str
    normalized: str | None
    zone: str
    automatic_write: str
    reason: str

    @property
    def allowed(self) -> bool:
        return self.automatic_write == ALLOWED

    def to_json(self) -> dict[str, str | None]:
        return {
            "path": self.path,
            "normalized": self.normalized,
            "zone": self.zone,
            "automatic_write": self.automatic_write,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, d: Mapping) -> ZoneDecision:
        return cls(d["path"], d["normalized"], d["zone"], d["automatic_write"], d["reason"])


def decide(root: str | os.PathLike, zones: ZoneMap, path: str | os.PathLike) -> ZoneDecision:
    """Classify ``path`` (relative to ``root``, or absolute) against ``zones``; never raises for odd paths."""
    return _Guard(root, zones).decide(path)


def check_write(root: str | os.PathLike, zones: ZoneMap, path: str | os.PathLike) -> ZoneDecision:
    """The gate every writer calls: the decision when an automatic write is allowed, else PolicyError."""
    decision = decide(root, zones, path)
    if not decision.allowed:
        raise PolicyError(f"refusing to write {_quote(decision.path)} automatically: {decision.reason}")
    return decision


def classify_many(
    root: str | os.PathLike, zones: ZoneMap, paths: Iterable[str | os.PathLike]
) -> list[ZoneDecision]:
    guard = _Guard(root, zones)
    return [guard.decide(p) for p in paths]


@dataclass(frozen=True)
class _Verdict:
    zone: str
    reason: str
    fallback: bool = False  # frozen only because nothing listed it: the weakest explanation

    def outranks(self, other: _Verdict) -> bool:
        return (_RANK[self.zone], not self.fallback) > (_RANK[other.zone], not other.fallback)


class _Blocked(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _frozen(reason: str) -> _Verdict:
    return _Verdict(FROZEN, reason)


def _stricter(a: _Verdict, b: _Verdict) -> _Verdict:
    """The more restrictive verdict; on a tie the first, except that a specific rule beats "unlisted"."""
    return b if b.outranks(a) else a


class _Guard:
    """One root and zone map, with the real root resolved once for a batch of decisions."""

    def __init__(self, root: str | os.PathLike, zones: ZoneMap) -> None:
        self.zones = zones
        root_abs = os.path.abspath(os.fsdecode(os.fspath(root)))
        self.root_real = os.path.realpath(root_abs)
        self.root_prefixes = [
            [s for s in _os_reading(r).split("/") if s] for r in dict.fromkeys((self.root_real, root_abs))
        ]
        self.table = (
            (FROZEN, "always-frozen", zones.always_frozen),
            (FROZEN, "frozen", zones.frozen),
            (MANAGED, "managed", zones.managed),
            (EVOLVABLE, "evolvable", zones.evolvable),
            (LEARNED, "learned", zones.learned),
        )

    def decide(self, path: str | os.PathLike) -> ZoneDecision:
        text = os.fsdecode(os.fspath(path))
        reading = _os_reading(text)
        if reading.startswith("/") or _DRIVE.match(reading):
            # Strip the root before building spellings, so that the Unicode forms of a non-ASCII root
            # prefix do not read as paths outside it.
            inside = self._relative_segments(reading)
            if inside is not None:
                reading = "/".join(inside) or "."
        verdict = self._judge_spellings(reading, walk=True)
        return ZoneDecision(
            path=text,
            normalized=self._normalized(text),
            zone=verdict.zone,
            automatic_write=BLOCKED if verdict.zone == FROZEN else ALLOWED,
            reason=verdict.reason,
        )

    def _normalized(self, text: str) -> str | None:
        reading = _os_reading(text)
        if not reading or _bad_char(reading):
            return None
        segments = self._relative_segments(reading)
        rel = None if segments is None else _lexical(segments)
        if rel is None:
            return None
        return rel or "."

    def _judge_spellings(self, text: str, *, walk: bool) -> _Verdict:
        best: _Verdict | None = None
        for i, candidate in enumerate(_spellings(text)):
            verdict = self._judge(candidate, walk=walk)
            if i:
                verdict = _Verdict(verdict.zone, f"{verdict.reason} (read as {_quote(candidate)})", verdict.fallback)
            best = verdict if best is None else _stricter(best, verdict)
            if best.zone == FROZEN and not best.fallback:
                break
        assert best is not None
        return best

    def _judge(self, text: str, *, walk: bool) -> _Verdict:
        if not text:
            return _frozen("path is empty")
        bad = _bad_char(text)
        if bad:
            return _frozen(bad)
        segments = self._relative_segments(text)
        if segments is None:
            return _frozen("path leaves the harness root")
        for seg in segments:
            if seg.casefold() in PRIVATE_DIRS:
                return _frozen(f"path enters {seg.casefold()}")
        rel = _lexical(segments)
        if rel is None:
            return _frozen("path leaves the harness root")
        if not rel:
            return _frozen("path is the harness root itself, not a file inside it")
        lexical = self._match(rel)
        if lexical.zone == FROZEN or not walk:
            return lexical
        return self._judge_links(segments, lexical)

    def _judge_links(self, segments: list[str], lexical: _Verdict) -> _Verdict:
        """Follow the path through the real filesystem; symlinks may only lead to non-frozen places."""
        links: list[list[str]] = []
        try:
            final = self._follow(self.root_real, segments, links, [0])
        except _Blocked as exc:
            return _frozen(exc.reason)
        linked = _hard_link_count(final)
        if linked > 1:
            shown = _quote(self._show(final))
            return _frozen(f"{shown} has {linked} hard links, so another name for it may be frozen")
        if not links:
            return lexical
        for link, target in links:
            if self._inside(link) is None:
                continue  # only reachable through an earlier link, which is judged first
            shown = _quote(self._show(link))
            target_rel = self._inside(target)
            if target_rel is None:
                return _frozen(f"symlink {shown} points outside the harness")
            if not target_rel:
                return _frozen(f"symlink {shown} lands on the harness root itself")
            landing = self._judge_spellings(target_rel, walk=False)
            if landing.zone == FROZEN:
                return _frozen(f"symlink {shown} lands in frozen path {_quote(target_rel)} ({landing.reason})")
        first = _quote(self._show(links[0][0]))
        final_rel = self._inside(final)
        if final_rel is None:
            return _frozen(f"path leaves the harness root through symlink {first}")
        if not final_rel:
            return _frozen(f"path reaches the harness root itself through symlink {first}")
        resolved = self._judge_spellings(final_rel, walk=False)
        resolved = _Verdict(
            resolved.zone,
            f"{resolved.reason} (through symlink {first}, it reaches {_quote(final_rel)})",
            resolved.fallback,
        )
        return _stricter(lexical, resolved)

    def _follow(self, cur: str, segments: list[str], links: list[list[str]], hops: list[int]) -> str:
        """Resolve ``segments`` from the real directory ``cur`` the way the kernel does, recording each
        symlink met as ``[link, fully resolved target]``; missing components are taken lexically."""
        for name in segments:
            if name in ("", "."):
                continue
            if name == "..":
                cur = os.path.dirname(cur)
                continue
            nxt = os.path.join(cur, name)
            try:
                mode = os.lstat(nxt).st_mode
            except (FileNotFoundError, NotADirectoryError):
                cur = nxt
                continue
            except (OSError, ValueError) as exc:
                raise _Blocked(f"cannot inspect {_quote(self._show(nxt))}: {_why(exc)}") from None
            if not stat.S_ISLNK(mode):
                cur = nxt
                continue
            hops[0] += 1
            if hops[0] > _MAX_SYMLINKS:
                raise _Blocked(f"symlink {_quote(self._show(nxt))} is part of a loop or too long a chain")
            try:
                target = _os_reading(os.readlink(nxt))
            except OSError as exc:
                raise _Blocked(f"cannot read symlink {_quote(self._show(nxt))}: {_why(exc)}") from None
            entry = [nxt, ""]
            links.append(entry)
            start = os.path.abspath(os.sep) if os.path.isabs(target) else cur
            cur = self._follow(start, target.split("/"), links, hops)
            entry[1] = cur
        return cur

    def _relative_segments(self, text: str) -> list[str] | None:
        """Raw segments relative to the root (``..`` kept for the walk); None when absolute elsewhere.

        An absolute path must start with the root, real or as given; ``..`` before that point is not
        resolved lexically, because a symlink above the root would make that reading wrong.
        """
        if not (text.startswith("/") or _DRIVE.match(text)):
            return text.split("/")
        segments = [s for s in text.split("/") if s not in ("", ".")]
        for prefix in self.root_prefixes:
            if _same_segments(segments[: len(prefix)], prefix):
                return segments[len(prefix) :]
        return None

    def _match(self, rel: str) -> _Verdict:
        """The zone of a lexically normal path; `_judge` has already refused private segments."""
        segments = rel.split("/")
        if len(segments) == 1 and segments[0].casefold() in ZONE_MAP_NAMES:
            return _frozen(f"{segments[0].casefold()} is the zone map and is always frozen")
        for seg in segments:
            if _SHORT_NAME.fullmatch(seg):
                return _frozen(
                    f"segment {_quote(seg)} looks like a Windows 8.3 short name, which may alias another file"
                )
        for zone, label, globs in self.table:
            for glob in globs:
                if glob_match(glob, rel):
                    how = ""
                elif glob_match(glob, rel, casefold=True):
                    how = " ignoring case"
                else:
                    continue
                return _Verdict(zone, f"matches {label} glob {_quote(glob)}{how}{_CONSEQUENCE[zone]}")
        return _Verdict(FROZEN, "not listed in any zone; unlisted paths are frozen", fallback=True)

    def _inside(self, abs_path: str) -> str | None:
        """The root-relative posix form of a real absolute path, '' for the root, None outside."""
        try:
            rel = os.path.relpath(abs_path, self.root_real)
        except ValueError:  # another drive
            return None
        rel = _os_reading(rel)
        if rel == ".":
            return ""
        if rel == ".." or rel.startswith("../"):
            return None
        return rel

    def _show(self, abs_path: str) -> str:
        rel = self._inside(abs_path)
        return abs_path if rel is None else (rel or ".")


_CONSEQUENCE = {
    FROZEN: "",
    MANAGED: "; only text inside reef managed blocks may change, the rest of the file is frozen",
    EVOLVABLE: "; changes need schema validation and the canary gate",
    LEARNED: "; reef may write it freely",
}


# --------------------------------------------------------------------------------------------- spellings


def _spellings(text: str) -> list[str]:
    """Every reading of ``text`` the guard classifies, the OS's own reading first, without duplicates."""
    found = dict.fromkeys([_os_reading(text)])
    for step in (_unicode_forms, _without_ignorables, _percent_decoded, _slashed, _unicode_forms, _windows_aliases):
        for candidate in list(found):
            for variant in step(candidate):
                found.setdefault(variant)
    return list(found)


def _os_reading(text: str) -> str:
    for sep in (os.sep, os.altsep):
        if sep and sep != "/":
            text = text.replace(sep, "/")
    return text


def _unicode_forms(text: str) -> Iterable[str]:
    if text.isascii():
        return ()
    return [unicodedata.normalize(form, text) for form in ("NFC", "NFD", "NFKC", "NFKD")]


def _is_ignorable(ch: str) -> bool:
    if unicodedata.category(ch) == "Cf":
        return True
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _IGNORABLE_RANGES)


def _without_ignorables(text: str) -> Iterable[str]:
    if text.isascii():
        return ()
    return ["".join(ch for ch in text if not _is_ignorable(ch))]


def _percent_decoded(text: str) -> Iterable[str]:
    if "%" not in text:
        return ()
    decode = lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace")  # noqa: E731
    return [_PERCENT_RUN.sub(decode, text)]


def _slashed(text: str) -> Iterable[str]:
    return [text.replace("\\", "/")] if "\\" in text else ()


def _windows_aliases(text: str) -> Iterable[str]:
    """How Windows reads each segment: no NTFS stream suffix, no trailing dots or spaces."""
    if not _ALIAS_HINT.search(text):
        return ()
    segments = text.split("/")
    out = []
    for i, seg in enumerate(segments):
        if seg in ("", ".", "..") or (i == 0 and _DRIVE.fullmatch(seg)):
            out.append(seg)
            continue
        seg = seg.split(":", 1)[0]
        stripped = seg.rstrip(" .")
        if not stripped:
            stripped = ".." if seg.count(".") >= 2 else "."
        out.append(stripped)
    return ["/".join(out)]


# --------------------------------------------------------------------------------------------- helpers


def _hard_link_count(abs_path: str) -> int:
    try:
        st = os.lstat(abs_path)
    except (OSError, ValueError):
        return 0
    return st.st_nlink if stat.S_ISREG(st.st_mode) else 0


def _bad_char(text: str) -> str | None:
    for ch in text:
        category = unicodedata.category(ch)
        if category in ("Cc", "Zl", "Zp"):
            return f"path contains control character U+{ord(ch):04X}"
        if category == "Cs":
            return "path is not valid UTF-8 text"
    return None


def _lexical(segments: list[str]) -> str | None:
    out: list[str] = []
    for seg in segments:
        if seg in ("", "."):
            continue
        if seg == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(seg)
    return "/".join(out)


def _same_segments(a: list[str], b: list[str]) -> bool:
    if os.name == "nt":
        return [s.casefold() for s in a] == [s.casefold() for s in b]
    return a == b


def _quote(text: str) -> str:
    return f"'{text}'" if text.isprintable() else ascii(text)


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc)


__all__ = [
    "ALLOWED",
    "BLOCKED",
    "EVOLVABLE",
    "FROZEN",
    "LEARNED",
    "MANAGED",
    "ZoneDecision",
    "ZoneMap",
    "check_write",
    "classify_many",
    "decide",
    "glob_match",
]
