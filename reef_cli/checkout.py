"""`reef checkout ID DIR`: write a release into a directory without losing anything that is already there.

Everything is checked before anything is written, so a refusal leaves DIR exactly as it was: DIR must be a
directory (or not exist yet), no path may pass through a symlink, and no existing file may be overwritten with
other bytes unless `force` — except, inside the project, a file that still holds its published bytes (the head
release has it: nothing is lost by replacing it). A file that already holds the release's bytes is left alone.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import ConflictError, InvalidInput, StoreError


@dataclass(frozen=True)
class Conflict:
    path: str  # relative to the destination
    why: str


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def conflicts(dest: Path, files: Mapping, *, published: Mapping | None = None) -> list[Conflict]:
    """What writing `files` into `dest` would destroy, in path order; raises InvalidInput for what --force cannot
    allow (a symlink on the way, an unsafe path). `published` maps paths to the bytes safe to replace."""
    from .gitstore import MODE_LINK
    from .harness_files import non_directory_parent, unreplaceable

    published = published or {}
    out: list[Conflict] = []
    for rel in sorted(files):
        entry = files[rel]
        if rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
            raise StoreError(f"release holds an unsafe path '{rel}'")
        blocked = non_directory_parent(dest, rel)
        if blocked is not None:
            out.append(Conflict(rel, f"{blocked} is a file where the release needs a directory"))
            continue
        target = dest / rel
        why = unreplaceable(target, entry)  # a symlink that a file would be written through: InvalidInput
        if why is not None:
            out.append(Conflict(rel, why))
            continue
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):  # the release holds a symlink here too: only the same one is left alone
            if os.readlink(target) != os.fsdecode(entry.data):
                raise InvalidInput(f"{target} is a symlink; reef never writes through symlinks")
        elif entry.mode == MODE_LINK:
            out.append(Conflict(rel, "exists and is not a symlink"))
        else:
            data = _read(target)
            if data != entry.data and not (rel in published and data == published[rel]):
                out.append(Conflict(rel, "has other content"))
    return out


def checkout(dest: Path, files: Mapping, *, project_root: Path | None = None, head_files: Mapping | None = None,
             force: bool = False, label: str = "the release") -> int:
    """Write `files` into `dest`; returns how many were (re)written. `head_files` (the head release's files) make
    the project's published bytes replaceable when `dest` is the project root. A release that holds a path no
    harness may (admission.py: inside .git or .reef, outside its own include globs, a link leaving the harness) is
    refused before anything is written: a release may have been forged and pulled before pull checked it."""
    from .admission import check_files, own_bound
    from .harness_files import write_files

    check_files(dict(files), label, own_bound(dict(files), label), done=f"nothing was written to {dest}")

    if os.path.islink(dest):
        raise InvalidInput(f"{dest} is a symlink; reef never writes through symlinks")
    if dest.exists() and not dest.is_dir():
        raise InvalidInput(f"{dest} is a file, not a directory; give a directory to check out into")
    inside = project_root is not None and os.path.realpath(dest) == os.path.realpath(project_root)
    published = {rel: e.data for rel, e in (head_files or {}).items()} if inside else {}
    before = {rel: _read(dest / rel) for rel in files}  # what the checks below judge; compared again at each write
    found = conflicts(dest, files, published=published)
    if found and not force:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        what = "unpublished edits or files of your own" if inside else "files of your own"
        raise ConflictError(f"{dest / first.path} {first.why}{more}; checking out would overwrite {what} — "
                            "move them away, or pass --force")
    for c in found:  # --force replaces files; it never deletes a directory or a file standing where one goes
        if c.why != "has other content":
            raise ConflictError(f"{dest / c.path} {c.why}; move it away (--force replaces files only)")
    changed = {rel: e for rel, e in files.items() if before[rel] != e.data}
    try:
        write_files(dest, changed, expected=before)
    except PermissionError as exc:
        raise InvalidInput(f"{exc.filename or dest}: permission denied; cannot check out there") from None
    return len(changed)
