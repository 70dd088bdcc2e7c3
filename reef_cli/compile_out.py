"""`reef harness compile --out DIR`: writing a compiled tree into a directory without losing what a user did there.

DIR keeps a manifest (`.reef-compiled.json`) of what the last compile wrote: each path and the sha256 of its bytes.
The next compile checks DIR against it the way `reef harness install` checks an install root (install.drift): a
file reef wrote that no longer holds those bytes was edited by someone, and a file reef did not write is someone's
own. Either would be lost if this compile overwrote it with other bytes or removed it as stale, so the compile
refuses (ConflictError, exit 3) naming the files, before writing anything. `force` goes ahead after copying each such
file into a backup directory (`backup_root/compile-<UTC time>/`, the paths below DIR kept), which the caller prints.

A file whose bytes already equal what this compile writes loses nothing and never blocks: that is also how a compile
interrupted half-way (new bytes, old manifest) is finished by running it again. A manifest from an older reef lists
paths without digests; then any listed file this compile would change counts as possibly edited.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import ConflictError, InvalidInput
from .gitstore import Entry
from .install import COMPILED_MANIFEST, drift, read_nofollow, sha256, sync_tree
from .releases import canonical

SHOWN = 5  # files named in the refusal before "and N more"


@dataclass(frozen=True)
class OutResult:
    written: tuple[str, ...]
    removed: tuple[str, ...]
    backup: Path | None  # where --force kept the files it overwrote or removed (None: nothing needed keeping)
    kept: tuple[str, ...] = ()  # the paths (below DIR) copied into `backup`


def write_out(dest: Path, compiled, release_id: str | None, *, backup_root: Path, force: bool = False) -> OutResult:
    """Write `compiled` (compile.Compiled) into `dest`; a non-empty `dest` must be an earlier compile's output."""
    dest = Path(os.path.abspath(dest))
    previous = _previous(dest)  # path -> sha256, or None where an older manifest kept no digest
    if COMPILED_MANIFEST in compiled.files:
        raise InvalidInput(f"the compiled harness has a file named {COMPILED_MANIFEST}, which reef reserves")
    at_risk = _at_risk(dest, compiled.files, previous)
    backup = None
    if at_risk and not force:
        shown = ", ".join(f"{rel} ({why})" for rel, why in at_risk[:SHOWN])
        more = f" and {len(at_risk) - SHOWN} more" if len(at_risk) > SHOWN else ""
        raise ConflictError(f"{dest}: {len(at_risk)} file(s) differ from what 'reef harness compile' last wrote there "
                            f"({shown}{more}) and this compile would overwrite or remove them; move your edits into "
                            "the harness, or pass --force to go on with a backup; nothing was written")
    if at_risk:
        backup = _backup(dest, [rel for rel, _ in at_risk], backup_root)
    synced = sync_tree(dest, compiled.files, set(previous))
    manifest = {"agent": compiled.agent, "layout": compiled.layout, "release_id": release_id,
                "files": {rel: sha256(e.data) for rel, e in sorted(compiled.files.items())}}
    sync_tree(dest, {COMPILED_MANIFEST: Entry(canonical(manifest) + b"\n")})  # last: it vouches for the files above
    return OutResult(tuple(synced.written), tuple(synced.removed), backup, tuple(rel for rel, _ in at_risk))


def _previous(dest: Path) -> dict[str, str | None]:
    if not (os.path.isdir(dest) and not os.path.islink(dest) and any(os.scandir(dest))):
        return {}
    from .install import _safe_rel

    try:
        files = json.loads(read_nofollow(dest / COMPILED_MANIFEST))["files"]
        if isinstance(files, list):  # an older reef's manifest: paths only
            files = dict.fromkeys(files)
        out = {str(rel): None if digest is None else str(digest) for rel, digest in dict(files).items()}
        for rel in out:
            _safe_rel(rel)  # a manifest naming '../x' was not written by reef: nothing outside DIR is touched
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError, InvalidInput):
        raise ConflictError(f"{dest} is not empty and was not written by 'reef harness compile'; "
                            "choose an empty or new directory") from None


def _at_risk(dest: Path, files: dict[str, Entry], previous: dict[str, str | None]) -> list[tuple[str, str]]:
    """(path, why) for what this compile would overwrite or remove that is not what reef last wrote there."""
    from .install import foreign_files

    def same_as_new(rel: str) -> bool:
        entry = files.get(rel)
        path = dest / rel
        if entry is None or not os.path.isfile(path) or os.path.islink(path):
            return False
        return read_nofollow(path) == entry.data

    known = {rel: d for rel, d in previous.items() if d is not None}
    risky = [(rel, why) for rel, why in drift(dest, known) if why != "missing" and not same_as_new(rel)]
    for rel in sorted(set(previous) - set(known)):  # no digest kept: changed bytes may be an edit
        if os.path.lexists(dest / rel) and not same_as_new(rel):
            risky.append((rel, "may be edited; the manifest of an older reef keeps no digests"))
    for path in foreign_files(dest, files, set(previous)):
        rel = os.path.relpath(path, dest)
        risky.append((rel, "not written by reef"))
    return sorted(set(risky))


def _backup(dest: Path, rels: list[str], root: Path) -> Path:
    """Copy each of `rels` (a file, a link kept as a link; a directory's files) below a new backup directory; a path
    under a link in DIR is kept as that link, never read through it."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    backup = Path(root) / f"compile-{stamp}"
    n = 1
    while os.path.lexists(backup):
        n += 1
        backup = Path(root) / f"compile-{stamp}-{n}"
    backup.mkdir(parents=True)
    from .install import _link_component

    for rel in rels:
        if (link := _link_component(dest, rel)) is not None:  # the user's link itself, not what lies beyond it
            rel = os.path.relpath(link, dest)
        if os.path.lexists(backup / rel):
            continue
        pending = [(dest / rel, backup / rel)]
        while pending:
            s, d = pending.pop()
            try:
                st = os.lstat(s)
            except (FileNotFoundError, NotADirectoryError):
                continue
            d.parent.mkdir(parents=True, exist_ok=True)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(d, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(st.st_mode) | 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(read_nofollow(s))
            elif stat.S_ISDIR(st.st_mode):
                d.mkdir(exist_ok=True)
                pending.extend((s / name, d / name) for name in os.listdir(s))
    return backup
