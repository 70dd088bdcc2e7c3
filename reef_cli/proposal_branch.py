"""Learned changes as reviewable branches: `reef harness evolve --branch`, and `reef publish --from-git REF` after the
pull request is merged.

The candidate becomes one commit on a branch of the user's own repository, written straight into its object
database (pygit2, through GitStore): the user's index, working tree and HEAD are never touched. The commit's tree is
the user's HEAD tree with the candidate's changed harness files applied under the project's directory, and its
message is the Markdown description (each bullet, the feedback it came from — quoted, redacted, with record ids —
and the gate's verdict with its interval) followed by trailers that keep the link: `Reef-Proposal: <evolve id>`,
`Reef-Scenario`, `Reef-Base-Release`. Publishing from Git reads those trailers back into the release's meta.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ConflictError, InvalidInput, NotFound

QUOTE_CHARS = 300
FEEDBACK_FIELDS = ("feedback", "correction", "text", "lesson", "message", "summary", "note", "reason", "prompt")


@dataclass(frozen=True)
class BranchResult:
    branch: str
    commit_id: str
    description: str
    pr_url: str | None = None

    def to_json(self) -> dict:
        return {"branch": self.branch, "commit_id": self.commit_id, "description": self.description,
                "pr_url": self.pr_url}


def user_repo(project_root: Path):
    """(GitStore over the user's repository, the project's directory inside its working tree as a posix prefix)."""
    from .gitstore import GitStore, user_repo_root

    root = user_repo_root(project_root)
    if root is None:
        raise InvalidInput(f"{project_root} is not inside a Git repository; --branch writes a commit on a branch of "
                           "your repository (run 'git init' first, or evolve without --branch)")
    import pygit2

    store = GitStore(Path(pygit2.discover_repository(str(project_root))))
    rel = os.path.relpath(os.path.realpath(project_root), os.path.realpath(root))
    return store, ("" if rel == "." else rel.replace(os.sep, "/") + "/")


def check_branch_name(name: str) -> str:
    import pygit2

    if not name or not pygit2.reference_is_valid_name(f"refs/heads/{name}"):
        raise InvalidInput(f"--branch {name!r}: not a valid Git branch name")
    return name


def _quote(text: str) -> str:
    from .redact import redact

    text = " ".join(redact(str(text))[0].split())
    if len(text) > QUOTE_CHARS:
        text = text[:QUOTE_CHARS - 1] + "…"
    return text


def _feedback(ledger, record_id: str) -> str | None:
    try:
        rec = ledger.get(record_id)
    except Exception:  # a record compacted away or from another machine: the id still stands  # noqa: BLE001
        return None
    payload = rec.payload or {}
    return _first_text(payload, 2)


def _first_text(value, depth: int) -> str | None:
    """The first feedback-like string in a payload (reports carry `feedback` as text or as {"lesson": …})."""
    if isinstance(value, str):
        return _quote(value) if value.strip() else None
    if isinstance(value, dict) and depth > 0:
        for key in FEEDBACK_FIELDS:
            found = _first_text(value.get(key), depth - 1)
            if found:
                return found
    return None


def describe(ops: list[dict], memory, verdict: dict | None, ledger, *, evolve_id: str, scenario: str,
             base_release: str, gated: bool) -> tuple[str, str]:
    """(title, Markdown body) of the proposal."""
    adds = [o for o in ops if o.get("op") == "add"]
    title = f"reef: {len(ops)} learned change(s) to the harness ({scenario})" if ops else "reef: pattern memory only"
    lines = [f"Proposed by `reef harness evolve --branch` (evolve `{evolve_id}`, scenario `{scenario}`, "
             f"over release `{base_release}`).", "", "## Bullets", ""]
    if not ops:
        lines.append("_No bullet changes; pattern memory only._")
    for o in ops:
        sign = {"add": "+", "remove": "−", "update": "~", "merge": "~"}.get(o.get("op"), o.get("op"))
        lines.append(f"- {sign} `reef:{o.get('bullet_id')}` in `{o.get('path')}` ({o.get('zone') or 'zone ?'}): "
                     f"{_quote(o.get('text') or '')}")
        if o.get("reason"):
            lines.append(f"  - why: {_quote(o['reason'])}")
        pattern = memory.patterns.get(o.get("key")) if o.get("key") else None
        for rid in (pattern.evidence if pattern is not None else [])[-5:]:
            said = _feedback(ledger, rid)
            lines.append(f"  - from record `{rid}`" + (f": > {said}" if said else ""))
    lines += ["", "## Gate", ""]
    if verdict is None or not gated:
        lines.append("Not gated: the harness has no canary tasks (or only Learned-zone paths changed).")
    else:
        iv = verdict.get("interval")
        ivs = f" — paired difference interval [{iv[0]:+.3f}, {iv[1]:+.3f}]" if isinstance(iv, (list, tuple)) \
            and len(iv) == 2 and all(isinstance(x, (int, float)) for x in iv) else ""
        lines.append(f"**{verdict.get('decision')}**{ivs}; {verdict.get('reason', '')} "
                     f"({verdict.get('episodes_spent', 0)} episodes, gate record `{verdict.get('record_id')}`)")
        for t in verdict.get("per_task") or []:
            lines.append(f"- `{t.get('task_id')}`: {t.get('status')} "
                         f"({t.get('current')} → {t.get('candidate')})")
    if adds:
        lines += ["", f"After merging, publish it with `reef publish --from-git <merged ref>` (or `reef sync`)."]
    return title, "\n".join(lines) + "\n"


def refuse_existing_branch(store, branch: str) -> None:
    """`evolve --branch NAME` where NAME exists: refused before anything is reflected or gated (write_branch would
    refuse it only after the gate's episodes were paid for)."""
    repo, _ = user_repo(store.project.root)
    if repo.get_ref(f"refs/heads/{check_branch_name(branch)}") is not None:
        raise ConflictError(f"branch '{branch}' already exists in {repo.path}; pass another --branch NAME or delete it")


def write_branch(store, base_files: dict, files: dict, *, branch: str, title: str, body: str, evolve_id: str,
                 base_release: str) -> BranchResult:
    """One commit on `refs/heads/<branch>` of the user's repository; refuses to move an existing branch."""
    from .gitstore import Entry

    repo, prefix = user_repo(store.project.root)
    ref = f"refs/heads/{check_branch_name(branch)}"
    tip = repo.get_ref(ref)
    if tip is not None:
        if f"\nReef-Proposal: {evolve_id}\n" in repo.commit_info(tip)[0]:  # this evolve's, written before a kill
            return BranchResult(branch, str(tip), f"# {title}\n\n{body}")
        raise ConflictError(f"branch '{branch}' already exists in {repo.path}; pass another --branch NAME or delete it")
    head = None if repo.repo.head_is_unborn else str(repo.repo.head.target)
    base_tree = repo.commit_info(head)[1] if head else repo.write_tree({})
    changes: dict[str, Entry | None] = {}
    for rel in sorted(set(base_files) | set(files)):
        if base_files.get(rel) != files.get(rel):
            changes[prefix + rel] = files.get(rel)
    tree = repo.update_tree(base_tree, changes) if changes else base_tree
    trailers = (f"\nReef-Proposal: {evolve_id}\nReef-Scenario: {store.scenario}\n"
                f"Reef-Base-Release: {base_release}\n")
    message = f"{title}\n\n{body}{trailers}"
    import time

    commit = repo.commit(tree, head, message, int(time.time()))
    try:
        repo.repo.references.create(ref, repo._pygit2.Oid(hex=commit), force=False)
    except (repo._pygit2.GitError, ValueError):
        raise ConflictError(f"branch '{branch}' appeared in {repo.path} while reef wrote it; nothing changed") from None
    return BranchResult(branch, commit, f"# {title}\n\n{body}")


def open_pr(project_root: Path, result: BranchResult, title: str, body: str) -> str | None:
    """Open the pull request with GitHub's `gh` when it is installed (it pushes the branch); None without it."""
    gh = shutil.which("gh")
    if gh is None:
        return None
    proc = subprocess.run([gh, "pr", "create", "--head", result.branch, "--title", title, "--body", body],
                          cwd=project_root, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise InvalidInput(f"gh pr create failed: {' '.join(proc.stderr.split())[:300]}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else None


def files_at(store, ref: str) -> tuple[dict, str, list[dict]]:
    """The harness files of the project at the user's Git `ref`, its commit id, and the proposals (trailers) in
    its history that no release of this scenario links to yet."""
    from .config import CONFIG_NAME, parse_config
    from .harness_files import SKIP_DIRS

    repo, prefix = user_repo(store.project.root)
    try:
        commit = repo.repo.revparse_single(ref).peel(repo._pygit2.Commit)
    except (KeyError, ValueError, repo._pygit2.GitError):
        raise NotFound(f"--from-git {ref}: no such commit or branch in {repo.path}") from None
    cid = str(commit.id)
    everything = repo.read_tree(str(commit.tree_id))
    inside = {rel[len(prefix):]: e for rel, e in everything.items()
              if rel.startswith(prefix) and rel[len(prefix):].split("/")[0] not in SKIP_DIRS}
    if CONFIG_NAME not in inside:
        raise InvalidInput(f"--from-git {ref}: the commit holds no {prefix}{CONFIG_NAME}; not this harness")
    config = parse_config(inside[CONFIG_NAME].data, source=f"{CONFIG_NAME} at {ref}")
    from .zones import glob_matcher

    inc, exc = glob_matcher(tuple(config.include) + (CONFIG_NAME,)), glob_matcher(tuple(config.exclude))
    files = {rel: e for rel, e in inside.items() if inc(rel) and not exc(rel)}
    linked = {r.meta.get("proposal") for r in store.releases()} | {r.meta.get("evolve_id") for r in store.releases()}
    proposals = []
    walker = repo.repo.walk(commit.id)
    for n, c in enumerate(walker):
        if n >= 500:
            break
        tr = _trailers(c.message)
        if tr.get("Reef-Proposal") and tr.get("Reef-Scenario", store.scenario) == store.scenario \
                and tr["Reef-Proposal"] not in linked:
            proposals.append({"proposal": tr["Reef-Proposal"], "commit_id": str(c.id),
                              "base_release_id": tr.get("Reef-Base-Release")})
    return dict(sorted(files.items())), cid, proposals


def _trailers(message: str) -> dict:
    out = {}
    for line in message.strip().splitlines()[-6:]:
        key, sep, value = line.partition(": ")
        if sep and key.startswith("Reef-"):
            out[key] = value.strip()
    return out


def publish_from_git(store, ref: str, *, reason: str | None = None, expected_head=..., allow_secret: bool = False):
    """Publish the harness as committed at `ref`, under the checks a working-tree publish has: admission, and a
    secret in what it adds or changes refused unless `allow_secret` (a commit is anyone's text, merged or not)."""
    from .admission import check_files

    files, commit, proposals = files_at(store, ref)
    # the files are within the commit's own include globs already; a link leaving the harness or a nested .git is not
    check_files(files, f"--from-git {ref} ({commit[:12]})", None, done="nothing was published")
    if not allow_secret:
        from .config import CONFIG_NAME, parse_config
        from .harness_secrets import in_changes, refuse

        refuse(in_changes(store, files, parse_config(files[CONFIG_NAME].data, f"{CONFIG_NAME} at {ref}",
                                                     validate=False)))
    links = [p["proposal"] for p in proposals]
    meta = {"git_commit": commit, "git_ref": ref}
    if proposals:
        meta["proposal"] = links[0]
        meta["proposals"] = proposals
    why = reason or (f"merged proposal {', '.join(links)} from git {ref} ({commit[:12]})" if links
                     else f"from git {ref} ({commit[:12]})")
    return store.publish(reason=why, files=files, expected_head=expected_head, meta=meta)


def merged_proposal(store):
    """What `reef sync` publishes from the user's Git HEAD: (PublishResult or None, a note saying why not or None).

    Only a `Reef-Proposal` trailer naming a proposal this scenario's own evolve made (its `prop-<id>` record is in
    the local ledger, over the base release the trailer names) counts — anyone can type a trailer into a commit. And
    HEAD is published only when it is that proposal's merge onto the current head: every harness path where HEAD
    differs from the head release is one the proposal changed, and the head release still holds it as the proposal
    found it. Otherwise publishing HEAD would silently revert (or add) what the proposal never touched."""
    from .errors import ReefError
    from .gitstore import user_repo_root

    if user_repo_root(store.project.root) is None:
        return None, None
    try:
        head_git, commit, proposals = files_at(store, "HEAD")
    except (NotFound, InvalidInput):  # an unborn HEAD or a commit without this harness: nothing merged to publish
        return None, None
    if not proposals:
        return None, None
    ledger = store.ledger()
    real = []
    for p in proposals:
        try:
            record = ledger.get(f"prop-{p['proposal']}")
        except ReefError:
            record = None
        if record is None or (record.payload or {}).get("base_release_id") != p.get("base_release_id"):
            return None, (f"commit {p['commit_id'][:12]} carries 'Reef-Proposal: {p['proposal']}', which no evolve "
                          f"of scenario '{store.scenario}' made here; nothing was published from Git HEAD")
        real.append(p)
    head = store.require_head()
    ours = store.files_of(head)
    changed: dict[str, object] = {}  # path -> the proposal's base version of it
    for p in real:
        after, _, _ = files_at(store, p["commit_id"])
        try:
            before, _, _ = files_at(store, p["commit_id"] + "^")
        except (NotFound, InvalidInput):
            before = {}
        for rel in set(before) | set(after):
            if before.get(rel) != after.get(rel):
                changed.setdefault(rel, before.get(rel))
    for rel in sorted(set(head_git) | set(ours)):
        if head_git.get(rel) == ours.get(rel):
            continue
        if rel not in changed:
            why = f"differs from release step {head.step} in {rel}, which proposal {real[0]['proposal']} did not change"
        elif changed[rel] != ours.get(rel):
            why = f"has proposal {real[0]['proposal']}'s {rel} but release step {head.step} changed it since"
        else:
            continue
        return None, (f"Git HEAD ({commit[:12]}) {why} — publishing HEAD would overwrite it; nothing was published "
                      f"(rebase the proposal onto the current harness, or run 'reef publish --from-git HEAD' if HEAD "
                      f"is what you mean)")
    from .config import CONFIG_NAME, parse_config
    from .harness_secrets import in_changes, refusal

    found = in_changes(store, head_git, parse_config(head_git[CONFIG_NAME].data, f"{CONFIG_NAME} at HEAD",
                                                      validate=False))
    if found:  # named like the other reasons not to, and sync goes on to push what is already published
        return None, (f"Git HEAD ({commit[:12]}): " + refusal(found, "'reef publish --from-git HEAD --allow-secret'"))
    return publish_from_git(store, "HEAD", allow_secret=True), None
