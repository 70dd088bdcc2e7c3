"""Releases through any Git remote: push, pull and merge a scenario's release chain on `refs/reef/scenarios/<s>`.

Every release commit carries its release record (`reef-release: {json}` in the message, all but the commit id), so a
fetched chain rebuilds the release log byte for byte. What travels is what a release holds — the harness, pattern
memory and evidence (record ids) — never a ledger. Compare-and-swap end to end: a push moves the remote ref only
from the head we last saw there (`refs/reef/remotes/<remote>/scenarios/<s>`, checked inside the push after the
remote states its current value) and only forward; a pull only fast-forwards the local chain.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from .durable import make_dirs
from .errors import ConflictError, InvalidInput, NotFound, PolicyError, StoreError
from .releases import Release

PREFIX = "refs/reef/scenarios/"
MARK = "reef-release: "


def tracking_ref(remote: str, scenario: str) -> str:
    return f"refs/reef/remotes/{remote}/scenarios/{scenario}"


def check_remote_name(name: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name or ""):
        raise InvalidInput(f"remote name '{name}' is invalid; use letters, digits, '.', '_' or '-'")
    return name


def _git(project):
    from .gitstore import GitStore

    return GitStore(project.git_dir)


def remotes(project) -> dict[str, str]:
    return _git(project).remotes() if project.git_dir.exists() else {}


def public_remotes(project) -> dict[str, str]:
    """The remotes as `reef remote list` shows them: a URL stored with credentials (before reef refused them)
    is shown without."""
    from .gitstore import public_url

    return {name: public_url(url) for name, url in remotes(project).items()}


def add_remote(project, name: str, url: str) -> None:
    check_remote_name(name)
    if not url.strip():
        # An empty path would be taken from the project root: a remote that is the project's own store.
        raise InvalidInput(f"remote '{name}': the URL is empty; give a path or URL of a git repository")
    from .gitstore import public_url, url_credentials

    if url_credentials(url) is not None:  # .reef/git/config is plain text, and the URL is printed in every error
        raise InvalidInput(f"remote '{name}': the URL {public_url(url)} carries a password or token; reef never "
                           "stores one — add the URL without it and set REEF_GIT_TOKEN, or let a git credential "
                           "helper supply it")
    git = _git(project)
    if name in git.remotes():
        raise ConflictError(f"remote '{name}' already exists ({public_url(git.remotes()[name])}); remove it first")
    git.add_remote(name, _normalise(project, url))


def remove_remote(project, name: str) -> None:
    git = _git(project)
    if name not in git.remotes():
        raise NotFound(f"remote '{name}' does not exist (known: {', '.join(git.remotes()) or 'none'})")
    git.remove_remote(name)
    for ref in git.refs_under(f"refs/reef/remotes/{name}/"):
        git.delete_ref(ref)


def _normalise(project, url: str) -> str:
    """A relative path is taken from the project root, so the remote works from any directory."""
    if "://" in url or (":" in url and not url.startswith((".", "/"))):
        return url
    path = (project.root / url) if not os.path.isabs(url) else url
    return str(os.path.abspath(path))


def resolve(project, name: str | None) -> tuple[str, str]:
    """(name, url): a reef remote by name; without a name the only one or `origin`; failing those, the remote of
    the user's own Git repository with that name (so a fresh clone needs no set-up: `reef pull` reads `origin`)."""
    known = remotes(project)
    if name is None:
        if len(known) == 1:
            name = next(iter(known))
        else:
            name = "origin"
    if name in known:
        return name, known[name]
    from .gitstore import user_remote_url

    url = user_remote_url(project.root, name)
    if url is not None:
        return check_remote_name(name), url
    raise NotFound(f"remote '{name}' is not known (reef remotes: {', '.join(known) or 'none'}); "
                   f"add it with 'reef remote add {name} URL'")


@dataclass(frozen=True)
class ScenarioSync:
    scenario: str
    state: str  # pushed | up-to-date | fast-forward | created | ahead | diverged | behind | nothing | refused | skipped
    local: str | None = None
    remote: str | None = None
    releases: int = 0  # releases added locally (pull) or sent (push)
    note: str = ""

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "state": self.state, "local": self.local, "remote": self.remote,
                "releases": self.releases, "note": self.note}


@dataclass
class SyncResult:
    remote: str
    url: str
    scenarios: list[ScenarioSync] = field(default_factory=list)

    def __post_init__(self):  # what is printed and emitted as JSON: never a URL's credentials
        from .gitstore import public_url

        self.url = public_url(self.url)

    def to_json(self) -> dict:
        return {"remote": self.remote, "url": self.url, "scenarios": [s.to_json() for s in self.scenarios]}


# -- reading a chain back from commits ---------------------------------------------------------------------------
def release_of_commit(git, commit_id: str) -> tuple[Release, list[str]]:
    """The release a commit records (and the commit's parents); refuses commits that do not hold one."""
    message, tree, parents = git.commit_info(commit_id)
    line = next((ln for ln in message.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        raise StoreError(f"commit {commit_id[:12]} on a reef scenario ref holds no release record; "
                         "the remote ref was not written by reef")
    try:
        body = json.loads(line[len(MARK):])
        release = Release.from_json({**body, "commit_id": commit_id})
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"commit {commit_id[:12]}: its release record is corrupt ({type(exc).__name__})") from None
    if release.content_id != tree:
        raise StoreError(f"commit {commit_id[:12]}: release {release.release_id} names content "
                         f"{release.content_id[:12]} but the commit holds tree {tree[:12]}")
    return release, parents


def chain_between(git, head_commit: str, stop_commit: str | None) -> list[Release]:
    """The releases from just after `stop_commit` up to `head_commit`, oldest first, along first parents."""
    out: list[Release] = []
    cur: str | None = head_commit
    while cur is not None and cur != stop_commit:
        release, parents = release_of_commit(git, cur)
        out.append(release)
        cur = parents[0] if parents else None
    if stop_commit is not None and cur != stop_commit:
        raise StoreError(f"the local head {stop_commit[:12]} is not on the remote chain's first-parent line")
    out.reverse()
    for prev, nxt in zip(out, out[1:]):
        if nxt.parent_release_id != prev.release_id or nxt.step != prev.step + 1:
            raise StoreError(f"release {nxt.release_id} (step {nxt.step}) does not follow {prev.release_id} "
                             f"(step {prev.step}) on the fetched chain; nothing was changed")
    return out


# -- pull -------------------------------------------------------------------------------------------------------
def fetch(project, name: str, url: str) -> dict[str, str]:
    """Fetch every scenario ref into our tracking refs; {scenario: remote head commit}."""
    git = _git(project)
    git.fetch(url, [f"+{PREFIX}*:refs/reef/remotes/{name}/scenarios/*"])
    prefix = f"refs/reef/remotes/{name}/scenarios/"
    return {ref[len(prefix):]: cid for ref, cid in git.refs_under(prefix).items()}


def pull(project, name: str, url: str, *, current: str | None = None, only: str | None = None) -> SyncResult:
    """Fast-forward every scenario (or `only`) to the remote's chain; the working tree of `current` follows
    wherever it still equals the old head (a user's edit is never overwritten). Divergent heads → ConflictError
    after the others were pulled."""
    from .project import check_scenario_name
    from .store import HarnessStore

    heads = fetch(project, name, url)
    result = SyncResult(name, url)
    diverged, refused = [], []
    for scenario in sorted(heads):
        if only is not None and scenario != only:
            continue
        try:
            check_scenario_name(scenario)
        except InvalidInput:  # another tool's ref under reef's prefix: it costs that one, never every scenario
            result.scenarios.append(ScenarioSync(
                scenario, "skipped", note=f"skipped {PREFIX}{scenario} on remote '{name}': '{scenario}' is not a "
                                          "scenario name reef can take (1-64 lowercase letters, digits, '.', '_', '-')"))
            continue
        store = HarnessStore(project, scenario)
        try:
            res, old_files = _pull_one(store, heads[scenario], name)
        except PolicyError as exc:  # a release reef will not write: this scenario stays as it was, the others pull
            refused.append(exc)
            result.scenarios.append(ScenarioSync(scenario, "refused", note=str(exc)))
            continue
        result.scenarios.append(res)
        if res.state == "diverged":
            diverged.append(scenario)
        if scenario == current and res.state in ("fast-forward", "created"):
            res2 = _follow(store, old_files)
            if res2:
                result.scenarios[-1] = ScenarioSync(**{**res.to_json(), "note": res2})
    if only is not None and only not in heads:
        result.scenarios.append(ScenarioSync(only, "nothing", note="the remote has no such scenario"))
    if refused:
        raise refused[0]
    if diverged:
        s = diverged[0]
        raise ConflictError(
            f"scenario '{s}' has diverged from remote '{name}' (releases were published on both sides); run "
            f"'reef -s {s} merge {name}' to build a merge candidate for the gate, then 'reef push {name}'"
        )
    return result


def _pull_one(store, remote_head: str, remote: str):
    git = store.git
    make_dirs(store.dir)  # a scenario pulled for the first time: 0700 like the rest of the state
    with store.lock():
        store.log.repair()
        chain = store.log.read()
        local = chain[-1] if chain else None
        lc = local.commit_id if local else None
        old_files = store.files_of(local) if local else None
        if lc == remote_head:
            return ScenarioSync(store.scenario, "up-to-date", lc, remote_head), None
        if lc is not None and git.is_ancestor(remote_head, lc):
            return ScenarioSync(store.scenario, "ahead", lc, remote_head, note="push to publish"), None
        if lc is not None and not git.is_ancestor(lc, remote_head):
            return ScenarioSync(store.scenario, "diverged", lc, remote_head), None
        try:
            new = chain_between(git, remote_head, lc)
        except StoreError:
            if lc is None:
                raise
            # our head is reachable only through a merge's second parent: the remote merged our releases in
            return ScenarioSync(store.scenario, "diverged", lc, remote_head,
                                note="our head was merged on the remote; run reef merge"), None
        if local is None and new and new[0].parent_release_id is not None:
            raise StoreError(f"the fetched chain of '{store.scenario}' does not start at step 1")
        from .admission import check_incoming, own_bound

        local_bound = own_bound(old_files, f"your head release (step {local.step})") \
            if local is not None and local.runtime_load_id is None else None
        check_incoming(store, new, local=local_bound, origin=f"from remote '{remote}'",
                       done=f"nothing of scenario '{store.scenario}' was pulled")
        if new:  # first: a pulled release's ledger anchor is another machine's, never held against ours
            from .durable import append_durable

            append_durable(store.dir / "pulled-releases", "".join(f"{r.release_id}\n" for r in new).encode())
        for release in new:
            store.log.append(release)
        git.set_ref(store.ref, remote_head)
        if not store.exists():
            _write_scenario_file(store, new[-1])
    return ScenarioSync(store.scenario, "created" if local is None else "fast-forward", lc, remote_head,
                        len(new)), old_files


def _write_scenario_file(store, head: Release) -> None:
    """A scenario first seen through a pull: bound to its head harness's recipe, created as of its first release."""
    from .config import CONFIG_NAME, parse_config
    from .durable import STATE_FILE_MODE
    from .project import write_atomic
    from .releases import canonical

    files = store.files_of(head)
    recipe = "harness"
    if CONFIG_NAME in files:
        recipe = parse_config(files[CONFIG_NAME].data, source=CONFIG_NAME, validate=False).recipe
    first = store.log.find("1")
    info = {"name": store.scenario, "recipe": recipe, "created_at": first.created_at}
    write_atomic(store.dir / "scenario.json", canonical(info) + b"\n", STATE_FILE_MODE)


def _follow(store, old_files) -> str:
    """Bring the working tree to the new head where it still equals the old one (or the file is absent); a path the
    user changed is left as it is and named, so `reef status` shows it."""
    head = store.require_head()
    new_files = store.files_of(head)
    root = store.project.root
    from .harness_files import collect_files

    include = tuple(new_files) + tuple(old_files or ())
    now = collect_files(root, tuple(sorted(set(include))))
    old_files = old_files or {}
    writes, deletes, kept = {}, [], []
    for rel in sorted(set(new_files) | set(old_files)):
        cur, old, new = now.get(rel), old_files.get(rel), new_files.get(rel)
        if cur == new:
            continue
        if cur is None or cur == old:
            if new is None:
                deletes.append(rel)
            else:
                writes[rel] = new
        else:
            kept.append(rel)
    # guarded, as checkout and rollback are: each file is written (staged, re-checked against what was read above,
    # renamed) or removed only while it still holds that; an edit saved since is kept, and named like those above
    try:
        store.sync_worktree({rel: now[rel] for rel in (*deletes, *writes) if rel in now}, writes, guard=True)
    except ConflictError as exc:
        kept = sorted({*kept, *getattr(exc, "paths", ())})
        if not kept:
            raise
    if kept:
        return f"kept your edits to {', '.join(kept[:5])} (they differ from the pulled head; see 'reef status')"
    return ""


# -- push -------------------------------------------------------------------------------------------------------
def push(project, name: str, url: str, *, only: str | None = None) -> SyncResult:
    from .store import HarnessStore

    git = _git(project)
    result = SyncResult(name, url)
    for scenario in project.scenarios():
        if only is not None and scenario != only:
            continue
        store = HarnessStore(project, scenario)
        head = store.head()
        if head is None:
            continue
        if git.get_ref(store.ref) != head.commit_id:
            git.set_ref(store.ref, head.commit_id)  # the log is authoritative: repair a ref a crash left behind
        seen = git.get_ref(tracking_ref(name, scenario))
        if seen == head.commit_id:
            result.scenarios.append(ScenarioSync(scenario, "up-to-date", head.commit_id, seen))
            continue
        if seen is not None and not git.is_ancestor(seen, head.commit_id):
            raise ConflictError(
                f"scenario '{scenario}': remote '{name}' holds releases this chain lacks; nothing was pushed — run "
                f"'reef pull {name}' (and 'reef -s {scenario} merge {name}' if the heads diverged), then push again"
            )
        moved = git.push(url, store.ref, PREFIX + scenario, seen)
        if moved == head.commit_id:  # an earlier push (killed before it noted so) had already sent this head
            git.set_ref(tracking_ref(name, scenario), head.commit_id)
            result.scenarios.append(ScenarioSync(scenario, "up-to-date", head.commit_id, moved,
                                                 note="the remote already held this head (an earlier push sent it)"))
            continue
        if moved is not None:
            raise ConflictError(
                f"scenario '{scenario}': remote '{name}' moved since we last saw it (now {_short(moved)}, we expected "
                f"{(seen or 'no ref')[:12]}): someone published there; nothing was pushed — run 'reef pull {name}' "
                f"(then 'reef -s {scenario} merge {name}' if the heads diverged) and push again"
            )
        git.set_ref(tracking_ref(name, scenario), head.commit_id)
        sent = len(chain_between(git, head.commit_id, seen)) if seen and _first_parent(git, seen, head.commit_id) \
            else head.step
        result.scenarios.append(ScenarioSync(scenario, "pushed", head.commit_id, seen, sent))
    return result


def _first_parent(git, ancestor: str, head: str) -> bool:
    cur = head
    while cur:
        if cur == ancestor:
            return True
        _, _, parents = git.commit_info(cur)
        cur = parents[0] if parents else None
    return False


def _short(value: str) -> str:
    """A commit id shortened for a message; a word from the push ('absent', 'being moved by another push') whole."""
    return value[:12] if all(c in "0123456789abcdef" for c in value) else value
