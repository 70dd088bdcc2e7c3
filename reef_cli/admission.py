"""What a tree from outside may hold before reef writes any of it: a pulled or merged release, a release checked out,
a commit published with `--from-git`/`reef sync`.

A release is only a Git tree, and anyone who can push to the shared remote can forge one with `git mktree`. So
every path is checked before the chain moves or a byte is written:

* no component named `.git` or `.reef`, at any depth, in any case or spelling a filesystem folds to it (`.GIT`,
  `.git.`, `GIT~1`, `.g\u200cit`): a file there is a Git hook or reef's own state, never a harness file;
* no absolute path and no `.`/`..`/empty component;
* every path within the include globs (less the excludes) of the zone map that bounds it (see `bound_for`);
* a symlink only to a relative target that stays inside the harness: leading `..` steps only (they walk real
  directories), never `..` after a name (that name may itself be a link pointing up), never into `.git`/`.reef`.

Which zone map bounds a release from a remote: the LOCAL one, i.e. harness.yaml of this clone's head release (the
chain this clone already accepted), never the pulled release's own — a forged release ships its own harness.yaml
with `**`. A pulled release whose harness.yaml adds an include glob or drops an exclude is refused too, so a
widening cannot arrive in one pull and be used by the next; a team that widens its harness on purpose has each
clone widen its own harness.yaml. A clone with no release yet (a fresh clone adopting the remote's harness) has no
zone map of its own: each release is bounded by its own harness.yaml, and the structural rules hold regardless.
"""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass

from .config import CONFIG_NAME
from .errors import PolicyError
from .gitstore import MODE_LINK

RESERVED = {".git", ".reef", "git~1"}
_IGNORABLE = {chr(c) for c in (*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF)}


@dataclass(frozen=True)
class Bound:
    """The include/exclude globs that bound a tree, and where they come from (for the message)."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]
    source: str

    def admits(self, rel: str) -> bool:
        if rel == CONFIG_NAME:
            return True
        return _matcher(self.include)(rel) and not _matcher(self.exclude)(rel)


@functools.lru_cache(maxsize=64)
def _matcher(patterns: tuple[str, ...]):
    from .zones import glob_matcher

    return glob_matcher(patterns)


def _folded(name: str) -> str:
    """A name as case-insensitive, dot-trimming (NTFS) or ignorable-character-dropping (HFS+) filesystems see it."""
    if name.isascii():  # the usual name, and no ignorable character is ASCII: every publish checks every path
        return name.lower().rstrip(". ")
    return "".join(c for c in name if c not in _IGNORABLE).casefold().rstrip(". ")


def path_problem(rel: str) -> str | None:
    """Why `rel` may never be written by reef (None: it may, structurally)."""
    if rel.startswith("/") or "\\" in rel or "\0" in rel:
        return "is not a relative path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component"
    if rel.isascii() and not any(r in rel.lower() for r in RESERVED):  # no ASCII name folds to one unless it holds it
        return None
    for i, p in enumerate(parts):
        if _folded(p) in RESERVED:
            return f"lies inside a '{p}' directory" if i < len(parts) - 1 else f"is named '{p}'"
    return None


def link_problem(rel: str, target: str) -> str | None:
    """Why a symlink at `rel` to `target` would leave the harness (None: it stays inside)."""
    if not target or target.startswith("/") or "\0" in target:
        return f"is a symlink to '{target}' outside the harness"
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ".." in parts[ups:]:
        return f"is a symlink to '{target}', which climbs out of a name it entered; reef takes only plain targets"
    depth = len(rel.split("/")) - 1
    if ups > depth:
        return f"is a symlink to '{target}' outside the harness"
    landing = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if landing != "." and path_problem(landing):
        return f"is a symlink to '{target}', inside a .git or .reef directory"
    return None


def problem(rel: str, entry, bound: Bound | None) -> str | None:
    why = path_problem(rel)
    if why is None and entry is not None and entry.mode == MODE_LINK:
        why = link_problem(rel, os.fsdecode(entry.data))
    if why is None and bound is not None and not bound.admits(rel):
        why = f"is outside the include globs of {bound.source}"
    return why


def own_bound(files: dict, label: str, done: str = "nothing was written") -> Bound | None:
    """The zone map a tree declares for itself (its harness.yaml), or None when it holds none (a weights manifest)."""
    entry = files.get(CONFIG_NAME)
    if entry is None:
        return None
    return Bound(*_globs(entry.data, label, done), f"{CONFIG_NAME} of {label}")


def _globs(data: bytes, label: str, done: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from .config import parse_config
    from .errors import ReefError

    try:
        config = parse_config(data, source=f"{CONFIG_NAME} of {label}", validate=False)
    except ReefError as exc:
        raise PolicyError(f"{label}: its {CONFIG_NAME} cannot be read ({exc}); {done}") from None
    return tuple(config.include), tuple(config.exclude)


def check_files(files: dict, label: str, bound: Bound | None, *, done: str = "nothing was written") -> None:
    """PolicyError (exit 4) naming `label` and the first path it may not hold."""
    for rel in sorted(files):
        why = problem(rel, files[rel], bound)
        if why is not None:
            raise PolicyError(f"{label} holds '{rel}', which {why}; {done}")


def check_outgoing(files: dict, config, root) -> None:
    """What a publish is about to put into the chain, held to the rules every other clone's pull holds it to
    (`check_incoming`): a release pull refuses, once pushed, stops each teammate's next pull until someone publishes
    over it. Bounded by the harness.yaml being published (`config`; None: a weights manifest, the structural rules
    only) — the only zone map the publisher knows.

    A link is published only as `link_problem` takes it: relative, staying inside the harness. An absolute link is
    refused even when it points inside this project: another clone resolves it on its own filesystem (another
    checkout path, another user), never to this file. The message then names the relative link that would do."""
    bound = None if config is None else Bound(tuple(config.include), tuple(config.exclude), CONFIG_NAME)
    for rel in sorted(files):
        why = problem(rel, files[rel], bound)
        if why is None:
            continue
        target = os.fsdecode(files[rel].data) if files[rel].mode == MODE_LINK else ""
        fix = ""
        if target.startswith("/"):
            why = f"is a symlink to the absolute path '{target}', which another clone cannot resolve the same way"
            fix = _relative_fix(rel, target, root)
        raise PolicyError(f"'{rel}' {why}; reef pull refuses it, so nothing was published{fix}")


def _relative_fix(rel: str, target: str, root) -> str:
    """' — make it relative: ln -sfn TARGET PATH' when `target` lands inside the project at `root` and its relative
    spelling is one reef takes; '' otherwise (it points outside: there is nothing to link to)."""
    import shlex

    real_root = os.path.realpath(root)
    landing = os.path.realpath(target)
    if not landing.startswith(real_root + os.sep):
        return ""
    relative = os.path.relpath(landing, os.path.join(real_root, posixpath.dirname(rel)))
    if link_problem(rel, relative) is not None:
        return ""
    return f" — make it relative: ln -sfn {shlex.quote(relative)} {shlex.quote(rel)}"


def check_incoming(store, releases, *, local: Bound | None, origin: str, done: str) -> None:
    """Every release arriving from outside (`releases`, oldest first), checked before any enters the chain.

    Reads paths and modes only (blob ids), a blob only for a symlink's target or a harness.yaml not parsed yet, and
    skips a path already checked with the same id under the same bound: consecutive releases share most files."""
    from .gitstore import Entry

    git = store.git
    parsed: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    checked: set[tuple] = set()
    for rel in releases:
        label = f"release {rel.release_id} (step {rel.step}) {origin}"
        ids = git.blob_ids(rel.content_id)
        bound = None  # a weights manifest: no zone map, the structural rules only
        if rel.runtime_load_id is None:
            cfg = ids.get(CONFIG_NAME)
            if cfg is None:  # every harness release holds one (publish requires it); without, nothing bounds it
                raise PolicyError(f"{label} holds no {CONFIG_NAME}; {done}")
            if cfg not in parsed:
                parsed[cfg] = _globs(git.read_blob(cfg.split(":", 1)[1]), label, done)
            include, exclude = parsed[cfg]
            if local is not None:
                wider = [g for g in include if g not in local.include]
                if wider:
                    raise PolicyError(f"{label} widens harness.yaml's include with '{wider[0]}', beyond "
                                      f"{local.source}; reef takes a wider harness only from your own harness.yaml "
                                      f"— {done}")
                dropped = [g for g in local.exclude if g not in exclude]
                if dropped:
                    raise PolicyError(f"{label} drops the exclude '{dropped[0]}' of {local.source}; reef takes a "
                                      f"wider harness only from your own harness.yaml — {done}")
            bound = local or Bound(include, exclude, f"{CONFIG_NAME} of {label}")
        key = (bound.include, bound.exclude) if bound is not None else None
        for path in sorted(ids):
            if (key, path, ids[path]) in checked:
                continue
            mode_text, blob = ids[path].split(":", 1)
            mode = int(mode_text, 8)
            entry = Entry(git.read_blob(blob) if mode == MODE_LINK else b"", mode)
            why = problem(path, entry, bound)
            if why is not None:
                raise PolicyError(f"{label} holds '{path}', which {why}; {done}")
            checked.add((key, path, ids[path]))
