"""A secret typed into a harness file is refused at `reef publish` (the working tree, `--from-git REF`, and the merged
proposal `reef sync` publishes): a release is a Git commit, pushed with the store
and compiled into every agent's instruction files, and reef promises never to store a secret.

Only what a human publish adds or changes is read (reef's own lessons are redacted before they are written), with
the same redactor that guards records; a match is reported by file, line and kind, never by its value. The person
publishing can override with `--allow-secret` (a test fixture, a documented dummy key): the redactor tunes for
missing as few secrets as possible, so it sometimes flags what is not one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PolicyError


@dataclass(frozen=True)
class Found:
    path: str
    line: int
    kind: str

    def shown(self) -> str:
        return f"{self.path}:{self.line} ({self.kind.replace('_', ' ')})"


def find(files: dict, paths) -> list[Found]:
    """The first secret-shaped string in each of `paths` of `files` (path -> Entry), in path order; binary files
    (not UTF-8) are not read."""
    import re

    from .redact import redact

    found = []
    for path in sorted(paths):
        entry = files.get(path)
        if entry is None:
            continue
        try:
            text = entry.data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out, count = redact(text)
        if not count:
            continue
        at = next((i for i, (a, b) in enumerate(zip(text, out)) if a != b), min(len(text), len(out)))
        mark = re.compile(r"\[REDACTED:([a-z_]+)\]").search(out, max(0, at - len("[REDACTED:") - 40))
        found.append(Found(path, text.count("\n", 0, at) + 1, mark.group(1) if mark else "secret"))
    return found


def in_changes(store, files: dict, config) -> list[Found]:
    """`find` over what publishing `files` would add or change against the head release (a deletion adds nothing)."""
    return find(files, [c.path for c in store.changes(store.head(), files, config) if c.change != "deleted"])


def refusal(found: list[Found], override: str = "--allow-secret") -> str:
    listed = ", ".join(f.shown() for f in found[:3]) + (f" and {len(found) - 3} more file(s)" if len(found) > 3 else "")
    return (f"{listed}: looks like a secret; a release is stored in Git, pushed and compiled into the agent's files, "
            f"so nothing was published — remove it (use an environment variable), or publish anyway with {override}")


def refuse(found: list[Found]) -> None:
    if found:
        raise PolicyError(refusal(found))
