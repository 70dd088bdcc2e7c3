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


def tree_id(files: dict[str, Entry]) -> str:
    """The id `GitStore.write_tree(files)` returns, computed in memory: nothing is written. The gate names the trees it
    judges by content id, and a working-tree candidate may hold what publish refuses (a secret): hashing it must not
    leave its blobs in `.reef/git`. Git's object format: a blob is sha1("blob <size>\\0" + data); a tree lists
    "<octal mode> <name>\\0" + the raw 20-byte id per entry, sorted by name with a directory's name read as "name/"."""
    import hashlib

    def digest(kind: bytes, body: bytes) -> bytes:
        return hashlib.sha1(kind + b" %d\0" % len(body) + body).digest()

    def tree(entries: dict) -> bytes:
        rows = []
        for name, value in entries.items():
            raw = name.encode("utf-8")
            if isinstance(value, dict):
                rows.append((raw + b"/", b"40000 " + raw + b"\0" + tree(value)))
            else:
                rows.append((raw, b"%o " % value.mode + raw + b"\0" + digest(b"blob", value.data)))
        return digest(b"tree", b"".join(row for _key, row in sorted(rows)))

    nested: dict = {}
    for rel, entry in files.items():
        *dirs, name = rel.split("/")
        node = nested
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = entry
    return tree(nested).hex()


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


def _private(method):
    """libgit2 gives the objects, refs and config it writes the umask's modes; reef's store is the owner's alone
    (STATE_FILE_MODE), so its writes run under an owner-only umask. Never a push: that writes another repository."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        from .durable import private_umask

        with private_umask():
            return method(self, *args, **kwargs)

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
                from .durable import make_dirs, private_umask

                make_dirs(path)  # 0700, like the rest of .reef (pygit2 gives what it creates the umask's modes)
                with private_umask():
                    self.repo = pygit2.init_repository(str(path), bare=True)
        except pygit2.GitError as exc:
            raise StoreError(f"{path}: cannot open reef's object store: {exc}") from None

    @_damage_is_a_store_error
    @_private
    def write_tree(self, files: dict[str, Entry]) -> str:
        """Hash a flat {posix path: Entry} map into a tree; returns the tree id (the release's content_id)."""
        pygit2 = self._pygit2
        index = pygit2.Index()
        for rel, entry in files.items():
            index.add(pygit2.IndexEntry(rel, self.repo.create_blob(entry.data), entry.mode))
        return str(index.write_tree(self.repo))

    @_damage_is_a_store_error
    @_private
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
    def read_blob(self, blob_id: str) -> bytes:
        return self.repo[blob_id].data

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
    @_private
    def commit(self, tree_id: str, parent: str | None, message: str, when: int) -> str:
        pygit2 = self._pygit2
        sig = pygit2.Signature("reef", "reef@localhost", when, 0)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        oid = self.repo.create_commit(None, sig, sig, message, pygit2.Oid(hex=tree_id), parents)
        return str(oid)

    @_damage_is_a_store_error
    @_private
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

    # -- commits and refs read back (rebuilding a release log from a fetched chain) --------------------------------
    def commit_info(self, commit_id: str) -> tuple[str, str, list[str]]:
        """(message, tree id, parent ids) of a commit in this store."""
        try:
            c = self.repo[commit_id]
        except (KeyError, ValueError):
            raise StoreError(f"{self.path}: commit {commit_id} is missing from reef's object store") from None
        return c.message, str(c.tree_id), [str(p) for p in c.parent_ids]

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """True when `ancestor` is `descendant` or one of its ancestors."""
        if ancestor == descendant:
            return True
        oid = self._pygit2.Oid
        return bool(self.repo.descendant_of(oid(hex=descendant), oid(hex=ancestor)))

    def merge_base(self, a: str, b: str) -> str | None:
        oid = self._pygit2.Oid
        base = self.repo.merge_base(oid(hex=a), oid(hex=b))
        return str(base) if base is not None else None

    @_private
    def commit_merge(self, tree_id: str, parents: list[str], message: str, when: int) -> str:
        """A commit with several parents (a merge release joins two chains)."""
        pygit2 = self._pygit2
        sig = pygit2.Signature("reef", "reef@localhost", when, 0)
        oid = self.repo.create_commit(None, sig, sig, message, pygit2.Oid(hex=tree_id), [pygit2.Oid(hex=p) for p in parents])
        return str(oid)

    @_private
    def delete_ref(self, name: str) -> None:
        ref = self.repo.references.get(name)
        if ref is not None:
            ref.delete()

    def refs_under(self, prefix: str) -> dict[str, str]:
        return {name: str(self.repo.references[name].target) for name in self.repo.references if name.startswith(prefix)}

    # -- remotes: any Git remote, through libgit2's transports (paths, file://, ssh, https) -------------------------
    def remotes(self) -> dict[str, str]:
        return {r.name: r.url for r in self.repo.remotes}

    @_private
    def add_remote(self, name: str, url: str) -> None:
        try:
            self.repo.remotes.create(name, url, "+refs/reef/scenarios/*:refs/reef/remotes/" + name + "/scenarios/*")
        except (ValueError, self._pygit2.GitError) as exc:
            raise StoreError(f"remote '{name}': cannot add it to reef's object store ({exc})") from None

    @_private
    def remove_remote(self, name: str) -> None:
        self.repo.remotes.delete(name)

    def _remote(self, url: str):
        # libgit2 names a missing local path or a plain file "unsupported URL protocol"; say what is wrong instead.
        import os

        local = _local_path(url)
        if local is not None and not os.path.isdir(local):
            what = ("is a file, not a git repository" if os.path.exists(local)
                    else "is a symlink to nothing" if os.path.lexists(local) else "does not exist")
            raise StoreError(f"remote {public_url(url)} {what}; point the remote at a git repository "
                             "('reef remote remove NAME', then 'reef remote add NAME PATH')")
        return self.repo.remotes.create_anonymous(url)

    def list_remote(self, url: str, prefix: str) -> dict[str, str]:
        """{ref name: commit id} the remote advertises under `prefix`."""
        pygit2 = self._pygit2
        try:
            heads = self._remote(url).list_heads(callbacks=_Callbacks(pygit2))
        except (pygit2.GitError, KeyError, ValueError) as exc:
            raise StoreError(f"{public_url(url)}: cannot reach the remote ({_one_line(exc, url)})") from None
        return {h.name: str(h.oid) for h in heads if h.name and h.name.startswith(prefix)}

    @_private
    def fetch(self, url: str, refspecs: list[str]) -> None:
        """Fetch `refspecs`, pruning the local refs they map to that the remote no longer holds (a tracking ref left
        behind would be acted on forever)."""
        pygit2 = self._pygit2
        try:
            self._remote(url).fetch(refspecs, callbacks=_Callbacks(pygit2), prune=pygit2.enums.FetchPrune.PRUNE)
        except (pygit2.GitError, KeyError, ValueError) as exc:
            raise StoreError(f"{public_url(url)}: fetch failed ({_one_line(exc, url)})") from None
        finally:  # libgit2 writes the URL there, credentials and all; reef never reads it
            import contextlib
            import os

            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.repo.path, "FETCH_HEAD"))

    def push(self, url: str, local_ref: str, remote_ref: str, expected_remote: str | None) -> str | None:
        """Move `remote_ref` to our `local_ref` only if the remote still holds `expected_remote` (None: absent) and
        the move is a fast-forward. The expectation is checked inside the push, after the remote has told us its
        current value, so nothing is uploaded over a head published elsewhere. Returns None on success, else the
        remote ref's current commit id (or a rejection message) for the caller's conflict error."""
        pygit2 = self._pygit2
        local = _local_path(url)
        if local is not None:
            return self._push_local(url, local, local_ref, remote_ref, expected_remote)
        cb = _Callbacks(pygit2)
        seen: dict = {}

        def negotiate(updates):
            for u in updates:
                if u.dst_refname == remote_ref:
                    old = str(u.src)
                    old = None if set(old) == {"0"} else old
                    seen["old"] = old
                    if old != expected_remote:
                        raise _Moved(old)

        rejected: dict = {}
        cb.push_negotiation = negotiate
        cb.push_update_reference = lambda ref, msg: rejected.update({ref: msg}) if msg else None
        try:
            self._remote(url).push([f"{local_ref}:{remote_ref}"], callbacks=cb)
        except _Moved as moved:
            return moved.args[0] or "absent"
        except pygit2.GitError as exc:
            text = _one_line(exc)
            if "non-fast" in text or "fastforward" in text.replace("-", ""):
                return "not a fast-forward"
            raise StoreError(f"{public_url(url)}: push failed ({text.replace(url, public_url(url))})") from None
        if rejected.get(remote_ref):
            return rejected[remote_ref]
        return None


    def _push_local(self, url: str, path: str, local_ref: str, remote_ref: str, expected: str | None) -> str | None:
        """A remote on this machine (a path or file://): libgit2's local transport moves refs without checking their
        old value, so the objects go first to a private incoming ref and the ref itself is then moved by a real
        compare-and-swap on the remote repository (its ref lock and old-value check). Pushes to one such remote
        take turns (an flock on `reef-push.lock` in its git directory): libgit2 reading back a push's own incoming
        ref while another push deleted its own failed now and then ("reference '...incoming...' not found", exit 1
        where the loser of the race must get 3), and three quick retries did not always outlast it."""
        import fcntl
        import os

        try:
            gitdir = self._pygit2.discover_repository(path)
        except Exception:  # noqa: BLE001 - not a repository: the push below says so in its own words
            gitdir = None
        own = {os.path.realpath(path), os.path.realpath(os.path.join(path, ".git"))}
        if gitdir is not None and os.path.realpath(gitdir.rstrip("/")) not in own:
            gitdir = None  # a directory inside some other repository: no lock left in that one (the push fails)
        if gitdir is None:
            return self._push_local_turn(url, path, local_ref, remote_ref, expected)
        from .durable import open_state

        try:
            # read-only and readable by all: on a remote a team shares through group permissions, whoever created
            # the lock first must not keep the others from taking it (an flock needs no write access)
            fd = open_state(os.path.join(gitdir, "reef-push.lock"), os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{public_url(url)}: push failed (cannot lock the remote: {exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return self._push_local_turn(url, path, local_ref, remote_ref, expected)
        finally:
            os.close(fd)

    def _push_local_turn(self, url: str, path: str, local_ref: str, remote_ref: str, expected: str | None) -> str | None:
        import os
        import uuid

        pygit2 = self._pygit2
        incoming = f"refs/reef/incoming/{os.getpid()}-{uuid.uuid4().hex[:12]}"
        new = self.get_ref(local_ref)
        try:  # pushes to this remote take turns (_push_local): no other one deletes its incoming ref meanwhile
            self._remote(url).push([f"+{local_ref}:{incoming}"], callbacks=_Callbacks(pygit2))
            remote = pygit2.Repository(path)
        except (pygit2.GitError, KeyError, ValueError) as exc:
            raise StoreError(f"{public_url(url)}: push failed ({_one_line(exc, url)})") from None
        try:
            ref = remote.references.get(remote_ref)
            if expected is None:
                if ref is not None:
                    return str(ref.target)
                try:
                    remote.references.create(remote_ref, pygit2.Oid(hex=new), force=False)
                except (pygit2.GitError, ValueError, OSError):
                    return str(remote.references[remote_ref].target)
                return None
            if ref is None:
                return "absent"
            if str(ref.target) != expected:
                return str(ref.target)
            try:
                ref.set_target(pygit2.Oid(hex=new))  # libgit2 re-checks the old value under the ref's lock
            except (pygit2.GitError, OSError):  # moved meanwhile, or locked by a concurrent push (OSError: ELOCKED)
                now = str(remote.references[remote_ref].target)
                return now if now != expected else "being moved by another push"
            return None
        finally:
            inc = remote.references.get(incoming)
            if inc is not None:
                inc.delete()


def _local_path(url: str) -> str | None:
    """The directory of a remote on this machine, or None for ssh/https."""
    import os
    from urllib.parse import unquote, urlparse

    if url.startswith("file://"):
        return unquote(urlparse(url).path)
    if "://" not in url and os.path.isabs(url):
        return url
    return None


class _Moved(Exception):
    pass


def _one_line(exc: Exception, url: str | None = None) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.replace(url, public_url(url)) if url else text


def url_credentials(url: str) -> str | None:
    """The secret a remote URL carries in its userinfo (a password, or a user name that is a token), else None."""
    from urllib.parse import unquote, urlsplit

    if "://" not in url:
        return None  # a path, or scp-like user@host:path, which has no place for a password
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return url
    if "@" not in netloc:
        return None
    user, sep, password = netloc.rsplit("@", 1)[0].partition(":")
    if sep and password:
        return unquote(password)
    from .redact import redact

    return user if redact(unquote(user))[1] else None


def public_url(url: str) -> str:
    """A remote URL as reef prints or stores it in a message: a URL with a scheme loses its userinfo (user:password@
    or token@) — an ssh user name alone stays, it is no secret."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://…"
    if "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    if parts.scheme in ("ssh", "git+ssh", "ssh+git") and ":" not in userinfo and url_credentials(url) is None:
        return url
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _Callbacks(pygit2):
    """Credentials for ssh (the user's agent) and https (REEF_GIT_TOKEN, else git's stored credentials, else the
    user's credential helpers; none: public remotes)."""
    import os

    class Callbacks(pygit2.RemoteCallbacks):
        def credentials(self, url, username_from_url, allowed_types):
            if allowed_types & pygit2.enums.CredentialType.SSH_KEY:
                return pygit2.KeypairFromAgent(username_from_url or "git")
            if allowed_types & pygit2.enums.CredentialType.USERPASS_PLAINTEXT:
                token = os.environ.get("REEF_GIT_TOKEN")
                if token:
                    return pygit2.UserPass(username_from_url or "x-access-token", token)
                stored = _stored_credential(url) or helper_credential(url, username_from_url)
                if stored is not None:
                    return pygit2.UserPass(*stored)
            return None

    return Callbacks()


def user_repo_root(path: Path) -> Path | None:
    """The working tree of the user's Git repository holding `path`, or None outside one (reef never writes there
    except through `UserRepo`, which touches no index and no working tree)."""
    import pygit2

    found = pygit2.discover_repository(str(path))
    if found is None:
        return None
    repo = pygit2.Repository(found)
    return Path(repo.workdir) if repo.workdir else None


def user_remote_url(path: Path, name: str) -> str | None:
    """The URL of remote `name` in the user's own repository around `path` (None when absent)."""
    import pygit2

    found = pygit2.discover_repository(str(path))
    if found is None:
        return None
    repo = pygit2.Repository(found)
    try:
        return repo.remotes[name].url
    except (KeyError, ValueError):
        return None


def _stored_credential(url: str) -> tuple[str, str] | None:
    """The (user, password) git's `store` credential helper saved for `url`'s host, read from its files
    (~/.git-credentials, $XDG_CONFIG_HOME/git/credentials) without running git."""
    import os
    from urllib.parse import unquote, urlparse

    want = urlparse(url)
    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    for path in (home / ".git-credentials", xdg / "git" / "credentials"):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            got = urlparse(line.strip())
            if got.scheme == want.scheme and got.hostname == want.hostname and got.username and got.password:
                return unquote(got.username), unquote(got.password)
    return None


def _credential_helpers() -> list[str]:
    """The `credential.helper` values of the user's global git config files (~/.gitconfig, then
    $XDG_CONFIG_HOME/git/config), read with pygit2 from the files themselves (libgit2 caches its search paths)."""
    import os

    import pygit2

    home = Path(os.path.expanduser("~"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    helpers: list[str] = []
    for path in (xdg / "git" / "config", home / ".gitconfig"):
        if not path.is_file():
            continue
        try:
            values = list(pygit2.Config(str(path)).get_multivar("credential.helper"))
        except (pygit2.GitError, OSError, ValueError):
            continue
        for value in values:
            if value == "":
                helpers.clear()  # an empty value resets the list, as in git
            elif value not in helpers:
                helpers.append(value)
    return helpers


def helper_credential(url: str, username: str | None = None, *, timeout: float = 15) -> tuple[str, str] | None:
    """(user, password) from the user's git credential helpers (gh, osxkeychain, libsecret, manager, ...), asked
    with git's credential protocol (`<helper> get`, key=value lines on stdin and stdout). The helper programs are
    run directly, never `git` itself; `store` is read from its files by _stored_credential instead."""
    import os
    import shlex
    import shutil
    import subprocess
    from urllib.parse import urlparse

    want = urlparse(url)
    if not want.hostname:
        return None
    host = want.hostname + (f":{want.port}" if want.port else "")
    query = f"protocol={want.scheme}\nhost={host}\n"
    if want.path.strip("/"):
        query += f"path={want.path.lstrip('/')}\n"
    if username:
        query += f"username={username}\n"
    for helper in _credential_helpers():
        if helper.startswith("!"):
            argv = ["sh", "-c", helper[1:] + " get"]
        else:
            words = shlex.split(helper)
            if not words or words[0] == "store":
                continue
            prog = words[0]
            if not os.path.isabs(prog):
                prog = shutil.which(f"git-credential-{prog}") or next(
                    (str(d / f"git-credential-{prog}") for d in (Path("/usr/lib/git-core"), Path("/usr/libexec/git-core"))
                     if (d / f"git-credential-{prog}").is_file()), None)
                if prog is None:
                    continue
            argv = [prog, *words[1:], "get"]
        try:
            done = subprocess.run(argv, input=query + "\n", capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode != 0:
            continue
        got = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        if got.get("password"):
            return got.get("username") or username or "x-access-token", got["password"]
    return None
