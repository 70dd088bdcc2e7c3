"""The only module that imports pygit2: reef's private object store under `.reef/git` (never the user's repo)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreError

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000


@dataclass(frozen=True)
class Entry:
    data: bytes
    mode: int = MODE_FILE


def mode_of(st_mode: int) -> int:
    if stat.S_ISLNK(st_mode):
        return MODE_LINK
    return MODE_EXEC if st_mode & 0o111 else MODE_FILE


def _damage_is_a_store_error(method):
    """pygit2 reports a corrupt or missing object as GitError, wherever it is read; that is damage to reef's store,
    said in one line (StoreError), not a crash."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except self._pygit2.GitError as exc:
            raise StoreError(f"{self.path}: reef's object store is damaged ({exc}); restore .reef/git from a "
                             "backup or a copy of the project") from None
        except OSError as exc:
            if exc.errno is not None:
                raise  # a real errno: the error boundary names the file
            raise StoreError(f"{self.path}: cannot write reef's object store ({exc})") from None  # libgit2's

    return wrapper


class GitStore:
    def __init__(self, path: Path):
        import pygit2

        self._pygit2 = pygit2
        self.path = path
        self._blob_ids: dict[str, dict[str, str]] = {}
        try:
            if (path / "HEAD").exists():
                self.repo = pygit2.Repository(str(path))
            else:
                from .durable import make_dirs

                make_dirs(path)  # 0700, like the rest of .reef (pygit2 gives what it creates the umask's modes)
                self.repo = pygit2.init_repository(str(path), bare=True)
        except pygit2.GitError as exc:
            raise StoreError(f"{path}: cannot open reef's object store: {exc}") from None

    @_damage_is_a_store_error
    def write_tree(self, files: dict[str, Entry]) -> str:
        """Hash a flat {posix path: Entry} map into a tree; returns the tree id (the release's content_id)."""
        pygit2 = self._pygit2
        index = pygit2.Index()
        for rel, entry in files.items():
            index.add(pygit2.IndexEntry(rel, self.repo.create_blob(entry.data), entry.mode))
        return str(index.write_tree(self.repo))

    @_damage_is_a_store_error
    def update_tree(self, base_tree_id: str, changes: dict[str, Entry | None]) -> str:
        """A new tree from `base_tree_id` with `changes` applied (None deletes); untouched subtrees are reused."""
        pygit2 = self._pygit2
        repo = self.repo

        def build(tree_oid, sub: dict[str, Entry | None]):
            tb = repo.TreeBuilder(repo[tree_oid]) if tree_oid is not None else repo.TreeBuilder()
            nested: dict[str, dict[str, Entry | None]] = {}
            for rel, entry in sub.items():
                head, _, rest = rel.partition("/")
                if rest:
                    nested.setdefault(head, {})[rest] = entry
                elif entry is None:
                    if tb.get(head) is not None:
                        tb.remove(head)
                else:
                    tb.insert(head, repo.create_blob(entry.data), entry.mode)
            for name, sub_changes in nested.items():
                existing = tb.get(name)
                existing_oid = existing.id if existing is not None and existing.filemode == MODE_TREE else None
                new_oid = build(existing_oid, sub_changes)
                if new_oid is None:
                    if existing is not None:
                        tb.remove(name)
                else:
                    tb.insert(name, new_oid, pygit2.enums.FileMode.TREE)
            return tb.write() if len(tb) else None

        oid = build(pygit2.Oid(hex=base_tree_id), changes)
        if oid is None:
            oid = repo.TreeBuilder().write()
        return str(oid)

    @_damage_is_a_store_error
    def read_tree(self, tree_id: str) -> dict[str, Entry]:
        return {rel: Entry(self.repo[item.id].data, int(item.filemode)) for rel, item in self._items(tree_id)}

    @_damage_is_a_store_error
    def blob_ids(self, tree_id: str) -> dict[str, str]:
        """{path: "mode:blob id"} without reading blob contents (cheap status checks); cached per tree id."""
        cached = self._blob_ids.get(tree_id)
        if cached is None:
            cached = {rel: f"{int(item.filemode):o}:{item.id}" for rel, item in self._items(tree_id)}
            self.remember_blob_ids(tree_id, cached)
        return cached

    def remember_blob_ids(self, tree_id: str, ids: dict[str, str]) -> None:
        """Seed the cache with a tree we just built from `ids`, so the next diff need not walk it."""
        if len(self._blob_ids) > 16:
            self._blob_ids.clear()
        self._blob_ids[tree_id] = dict(ids)

    def _items(self, tree_id: str):
        """(posix path, tree entry) for every file or link under `tree_id`, depth first in tree order."""
        try:
            root = self.repo[tree_id]
        except (KeyError, ValueError):
            raise StoreError(f"{self.path}: tree {tree_id} is missing from reef's object store") from None

        def walk(tree, prefix: str):
            for item in tree:
                if item.filemode == MODE_TREE:
                    yield from walk(self.repo[item.id], f"{prefix}{item.name}/")
                else:
                    yield f"{prefix}{item.name}", item

        return walk(root, "")

    @_damage_is_a_store_error
    def hash_blob(self, data: bytes) -> str:
        return str(self._pygit2.hash(data))

    @_damage_is_a_store_error
    def commit(self, tree_id: str, parent: str | None, message: str, when: int) -> str:
        pygit2 = self._pygit2
        sig = pygit2.Signature("reef", "reef@localhost", when, 0)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        oid = self.repo.create_commit(None, sig, sig, message, pygit2.Oid(hex=tree_id), parents)
        return str(oid)

    @_damage_is_a_store_error
    def set_ref(self, name: str, commit_id: str) -> None:
        self.repo.references.create(name, self._pygit2.Oid(hex=commit_id), force=True)

    def has_commit(self, commit_id: str) -> bool:
        try:
            obj = self.repo.get(commit_id)
        except (ValueError, self._pygit2.GitError):
            return False
        return obj is not None and obj.type == self._pygit2.GIT_OBJECT_COMMIT

    def first_parent_chain(self, commit_id: str) -> list[tuple[str, str]]:
        """(commit id, message) from `commit_id` back to the root along first parents, newest first."""
        out = []
        commit = self.repo.get(commit_id)
        while commit is not None:
            out.append((str(commit.id), commit.message))
            commit = commit.parents[0] if commit.parents else None
        return out

    @_damage_is_a_store_error
    def get_ref(self, name: str) -> str | None:
        ref = self.repo.references.get(name)
        return str(ref.target) if ref is not None else None
