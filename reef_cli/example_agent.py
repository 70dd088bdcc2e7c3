"""reef's EXAMPLE agent: a tiny, deterministic stand-in for a coding agent, for `reef demo` and reef's tests.

It is not a real coding agent and never calls a network. It understands a handful of prompts (write a text file,
create a Makefile, write a shell script, replace text in a file, write release notes) and how well it does them
depends only on the harness it is given in $REEF_HARNESS_DIR: bullet rules in AGENTS.md, CLAUDE.md,
CLAUDE.local.md and reef/notes.md, and skills whose SKILL.md `name` matches the prompt. That makes the canary
gate's job concrete: a harness with the right rules passes more tasks.

Rules it recognises (one bullet each, matched by keywords, later bullets win on conflicts):
  - trailing-newline  "Always end files with a trailing newline"       files end with "\\n"
  - makefile-tabs     "Use tabs for indentation in Makefiles"           Makefile recipes use a tab
  - spaces-indent     "Indent with four spaces"                         Makefile recipes use spaces (a bad rule)
  - shebang           "Start shell scripts with a #!/bin/sh shebang"    scripts get a shebang and +x
  - run-tests         "Run the tests before finishing (write TESTED)"   writes a TESTED marker
  - release-heading   "Start release notes with a '# Release notes' heading"

Noise (`--noise P` or $REEF_EXAMPLE_NOISE): each behaviour flips with probability P (a known rule is forgotten, an
unknown good habit happens by luck), drawn from $REEF_EPISODE_SEED and the prompt, so the same seed gives the same
luck to every harness. Routing decisions go to $REEF_ROUTING_FILE as JSON lines when it is set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md", "CLAUDE.local.md", "reef/notes.md")
SKILL_GLOBS = (".claude/skills", ".agents/skills", "skills")
GOOD_HABITS = ("trailing-newline", "makefile-tabs", "shebang", "run-tests", "release-heading")
_BULLET = re.compile(r"^\s*[-*]\s+(?P<text>\S.*?)\s*$")


SUITE_YAML = r"""# reef's example suite: tasks for the example agent (and for any real agent: they are plain file tasks).
# The canary split gates every automatic harness change; the train split is what `reef demo` runs sessions on,
# and each train task's description is the feedback a user would give when it fails.
version: 1
tasks:
  - id: greeting
    description: The agent can write a file at all (passes with any harness).
    prompt: 'Write the text "hello, world" to greeting.txt.'
    check: grep -qx 'hello, world' greeting.txt
    tags: [sentinel]
    timeout: 60
  - id: notes-newline
    prompt: 'Write the text "remember the milk" to notes.txt.'
    check: grep -qx 'remember the milk' notes.txt && test -z "$(tail -c1 notes.txt)"
    timeout: 60
  - id: typo-fix
    prompt: 'Replace "teh" with "the" in README.md.'
    setup:
      files:
        README.md: "teh quick brown fox\n"
    check: grep -qx 'the quick brown fox' README.md && test -z "$(tail -c1 README.md)"
    timeout: 60
  - id: makefile-build
    prompt: 'Create a Makefile with a target build that runs: echo building'
    check: grep -q '^build:' Makefile && grep -q "$(printf '\t')echo building" Makefile
    timeout: 60
  - id: script-ok
    prompt: 'Write a shell script run.sh that prints ok.'
    check: test -x run.sh && test "$(./run.sh)" = ok
    timeout: 60
  - id: train-shopping
    split: train
    description: Always end files with a trailing newline.
    prompt: 'Write the text "buy bread" to shopping.txt.'
    check: grep -qx 'buy bread' shopping.txt && test -z "$(tail -c1 shopping.txt)"
    timeout: 60
  - id: train-makefile
    split: train
    description: Use tabs for indentation in Makefiles.
    prompt: 'Create a Makefile with a target test that runs: echo testing'
    check: grep -q "$(printf '\t')echo testing" Makefile
    timeout: 60
  - id: train-script
    split: train
    description: "Start shell scripts with a #!/bin/sh shebang and make them executable."
    prompt: 'Write a shell script hello.sh that prints hello.'
    check: test -x hello.sh && test "$(./hello.sh)" = hello
    timeout: 60
"""


def suite_files() -> dict[str, str]:
    """The example suite, {path relative to canary/: YAML text}: what `reef demo` installs next to the agent."""
    return {"example.yaml": SUITE_YAML}


def classify(text: str) -> str | None:
    """The rule a bullet states, if it is one this agent knows."""
    t = text.lower()
    if "release notes" in t and "heading" in t:
        return "release-heading"
    if "newline" in t and ("trailing" in t or "end" in t):
        return "trailing-newline"
    if "tab" in t and "makefile" in t:
        return "makefile-tabs"
    if "indent" in t and "space" in t:
        return "spaces-indent"
    if "shebang" in t or "#!" in t:
        return "shebang"
    if "run the tests" in t or "tested" in t:
        return "run-tests"
    return None


@dataclass
class Harness:
    rules: dict[str, str] = field(default_factory=dict)  # rule -> source file, in reading order
    skills: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (description, SKILL.md path)

    def add_rules(self, text: str, source: str) -> None:
        for line in text.splitlines():
            m = _BULLET.match(line)
            rule = classify(m.group("text")) if m else None
            if rule is None:
                continue
            if rule in ("makefile-tabs", "spaces-indent"):  # contradictory indentation rules: the later one wins
                self.rules.pop("makefile-tabs", None)
                self.rules.pop("spaces-indent", None)
            self.rules.pop(rule, None)
            self.rules[rule] = source


def read_harness(root: Path | None) -> Harness:
    h = Harness()
    if root is None or not root.is_dir():
        return h
    for name in INSTRUCTION_FILES:
        path = root / name
        if path.is_file():
            h.add_rules(path.read_text(encoding="utf-8", errors="replace"), name)
    for base in SKILL_GLOBS:
        for skill_md in sorted((root / base).glob("*/SKILL.md")):
            meta = _frontmatter(skill_md.read_text(encoding="utf-8", errors="replace"))
            name = str(meta.get("name") or skill_md.parent.name)
            h.skills.setdefault(name, (str(meta.get("description") or ""), str(skill_md.relative_to(root))))
    return h


def _frontmatter(text: str) -> dict:
    from .frontmatter import parse

    return parse(text).meta or {}


@dataclass(frozen=True)
class Routing:
    path: str | None  # $REEF_ROUTING_FILE; None: decisions are not logged

    def log(self, **decision) -> None:
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(decision, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Agent:
    """One episode: the prompt, the harness it reads, and what it applied and wrote (for its closing line)."""

    prompt: str
    h: Harness
    dir: Path | None  # the harness directory, where a used skill's SKILL.md is read from
    noise: float
    seed: str
    routing: Routing
    cwd: Path
    applied: list[str] = field(default_factory=list)
    wrote: list[str] = field(default_factory=list)

    def luck(self, rule: str) -> bool:
        """Whether noise flips this behaviour in this episode (same seed and prompt: same answer)."""
        if self.noise <= 0:
            return False
        digest = hashlib.sha256(f"{self.seed}\0{self.prompt}\0{rule}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.noise

    def uses(self, rule: str) -> bool:
        known = rule in self.h.rules
        flip = rule in GOOD_HABITS and self.luck(rule)
        if known and flip:
            self.routing.log(decision="rule_forgotten", rule=rule, source=self.h.rules[rule], why="noise")
            return False
        if known:
            self.routing.log(decision="rule_applied", rule=rule, source=self.h.rules[rule])
            self.applied.append(rule)
            return True
        if flip:
            self.routing.log(decision="lucky", rule=rule, why="noise")
            self.applied.append(rule + " (luck)")
            return True
        return False

    def write(self, rel: str, text: str, *, executable: bool = False) -> None:
        if self.uses("trailing-newline"):
            text = text.rstrip("\n") + "\n"
        else:
            text = text.rstrip("\n")
        path = self.cwd / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if executable:
            path.chmod(0o755)
        self.wrote.append(rel)
        self.routing.log(decision="task", action="write", path=rel)

    def use_skills(self) -> None:
        words = set(re.findall(r"[a-z0-9]+", self.prompt.lower()))
        for name, (_desc, path) in self.h.skills.items():
            parts = [p for p in re.split(r"[^a-z0-9]+", name.lower()) if p]
            if parts and all(p in words for p in parts):
                self.routing.log(decision="skill_used", skill=name, source=path)
                if self.dir is not None:
                    body = (self.dir / path).read_text(encoding="utf-8", errors="replace")
                    self.h.add_rules(body, path)

    def run(self) -> int:
        self.use_skills()
        p = self.prompt.strip()
        m = re.match(r'(?is)^write the text "(.*?)" to (\S+?)\.?$', p)
        if m:
            self.write(m.group(2), m.group(1))
            return self.finish()
        m = re.match(r"(?is)^create a makefile with a target (\S+) that runs: (.+?)\.?$", p)
        if m:
            tabs = self.uses("makefile-tabs") and "spaces-indent" not in self.h.rules
            if "spaces-indent" in self.h.rules:
                self.routing.log(decision="rule_applied", rule="spaces-indent", source=self.h.rules["spaces-indent"])
                self.applied.append("spaces-indent")
            indent = "\t" if tabs else "    "
            self.write("Makefile", f"{m.group(1)}:\n{indent}{m.group(2)}")
            return self.finish()
        m = re.match(r"(?is)^write a shell script (\S+) that prints (.+?)\.?$", p)
        if m:
            shebang = self.uses("shebang")
            self.write(m.group(1), ("#!/bin/sh\n" if shebang else "") + f"echo {m.group(2)}", executable=shebang)
            return self.finish()
        m = re.match(r'(?is)^replace "(.*?)" with "(.*?)" in (\S+?)\.?$', p)
        if m:
            path = self.cwd / m.group(3)
            if not path.is_file():
                print(f"example-agent: {m.group(3)} does not exist", file=sys.stderr)
                return 1
            self.write(m.group(3), path.read_text(encoding="utf-8").replace(m.group(1), m.group(2)))
            return self.finish()
        m = re.match(r"(?is)^write release notes for version (\S+) to (\S+?)\.?$", p)
        if m:
            heading = "# Release notes\n\n" if self.uses("release-heading") else ""
            self.write(m.group(2), f"{heading}Version {m.group(1)}: bug fixes and improvements.")
            return self.finish()
        print("example-agent: I only understand: write the text \"X\" to FILE; create a Makefile with a target T "
              "that runs: CMD; write a shell script FILE that prints X; replace \"A\" with \"B\" in FILE; "
              "write release notes for version V to FILE", file=sys.stderr)
        return 1

    def finish(self) -> int:
        if self.uses("run-tests"):
            (self.cwd / "TESTED").write_text("ok\n", encoding="utf-8")
            self.wrote.append("TESTED")
        rules = ", ".join(self.applied) or "none"
        print(f"example-agent: wrote {', '.join(self.wrote)} (rules applied: {rules})")
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m reef_cli.example_agent",
        description="reef's EXAMPLE agent (for the demo and tests; not a real coding agent, no network): does a "
                    "few file-writing tasks, better or worse depending on the rules in $REEF_HARNESS_DIR.",
    )
    ap.add_argument("-p", "--prompt", required=True, help="the task, e.g. 'Write the text \"hi\" to hi.txt.'")
    ap.add_argument("--harness", type=Path, help="harness directory (default: $REEF_HARNESS_DIR)")
    ap.add_argument("--noise", type=float, help="chance that each behaviour flips (default: $REEF_EXAMPLE_NOISE or 0)")
    args = ap.parse_args(argv)
    env = os.environ
    root = args.harness or (Path(env["REEF_HARNESS_DIR"]) if env.get("REEF_HARNESS_DIR") else None)
    try:
        noise = args.noise if args.noise is not None else float(env.get("REEF_EXAMPLE_NOISE") or 0)
    except ValueError:
        ap.error(f"REEF_EXAMPLE_NOISE={env.get('REEF_EXAMPLE_NOISE')!r} is not a number")
    if not 0 <= noise <= 1:
        ap.error(f"noise must be in [0, 1], got {noise}")
    if root is None:
        print("example-agent: no harness given ($REEF_HARNESS_DIR unset); working without rules", file=sys.stderr)
    agent = Agent(args.prompt, read_harness(root), root, noise=noise, seed=env.get("REEF_EPISODE_SEED", ""),
                  routing=Routing(env.get("REEF_ROUTING_FILE")), cwd=Path.cwd())
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
