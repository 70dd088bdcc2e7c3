"""The zone guard against real trees with real symlinks: every spelling of a frozen path must stay frozen."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reef_cli.errors import InvalidInput, PolicyError
from reef_cli.zones import ZoneDecision, ZoneMap, check_write, classify_many, decide, glob_match

ZONES = ZoneMap.from_mapping(
    {
        "frozen": [
            ".claude/rules/**",
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".claude/hooks/**",
            ".claude/commands/**",
        ],
        "evolvable": [".claude/skills/**", ".claude/agents/**", ".agents/skills/**"],
        "learned": ["CLAUDE.local.md", "reef/memory/**", "reef/notes.md"],
        "managed": ["CLAUDE.md", "AGENTS.md"],
        "always_frozen": ["canary/**", "evaluators/**"],
    }
)

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs posix symlinks")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A harness tree shaped like the default template."""
    h = tmp_path / "harness"
    for d in (".claude/rules", ".claude/skills/review", ".claude/hooks", "reef/memory", "canary", ".git"):
        (h / d).mkdir(parents=True)
    for f in ("CLAUDE.md", "harness.yaml", ".claude/rules/style.md", ".claude/skills/review/SKILL.md"):
        (h / f).write_text("x\n")
    return h


def zone_of(root: Path, path: str | os.PathLike) -> str:
    return decide(root, ZONES, path).zone


def assert_zone(root: Path, path: str, zone: str, reason_part: str = "") -> ZoneDecision:
    decision = decide(root, ZONES, path)
    assert decision.zone == zone, decision
    assert decision.automatic_write == ("blocked" if zone == "frozen" else "allowed"), decision
    assert reason_part in decision.reason, decision
    return decision


# ------------------------------------------------------------------------------------------- glob_match


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("a/**/b", "a/b", True),  # ** matches zero segments
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("a/**", "a", True),  # trailing /** includes the directory itself
        ("a/**", "a/x/y", True),
        ("a/**", "ab", False),
        ("**/x.md", "x.md", True),
        ("**/x.md", "d/e/x.md", True),
        ("**", "any/thing", True),
        ("*.md", "CLAUDE.md", True),
        ("*.md", "docs/CLAUDE.md", False),  # anchored, * never crosses /
        ("CLAUDE.md", "sub/CLAUDE.md", False),
        ("a/*/c", "a/b/c", True),
        ("a/*/c", "a/b/b/c", False),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[abc].md", "b.md", True),
        ("[abc].md", "d.md", False),
        ("[!abc].md", "d.md", True),
        ("[!abc].md", "a.md", False),
        ("x[+-0]y", "x/y", False),  # a range spanning '/' still never matches it
        ("x[+-0]y", "x.y", True),
        ("[a", "[a", True),  # unclosed class is literal
        ("[]a].md", "].md", True),  # ']' first is a member
        ("[-a].md", "-.md", True),
        ("[a-c].md", "b.md", True),
        ("[a-c].md", "-.md", False),
        (r"[a\-c].md", "-.md", True),
        ("[&&|~~].md", "~.md", True),
        (r"\*.md", "*.md", True),
        (r"\*.md", "a.md", False),
        ("dir/", "dir/file", True),
        ("./dir/**", "dir/file", True),
        ("/CLAUDE.md", "CLAUDE.md", True),
        (".claude/skills/**", ".claude/skills", True),
        (".claude/skills/**", ".claude/skillsx/a", False),
    ],
)
def test_glob_match(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


def test_glob_match_casefold() -> None:
    assert not glob_match(".claude/rules/**", ".CLAUDE/Rules/x.md")
    assert glob_match(".claude/rules/**", ".CLAUDE/Rules/x.md", casefold=True)
    assert glob_match("STRASSE.md", "straße.md", casefold=True)


def test_glob_match_rejects_bad_pattern() -> None:
    with pytest.raises(InvalidInput, match=r"invalid glob '\[z-a\]'"):
        glob_match("[z-a]", "b")


# ------------------------------------------------------------------------------------------- ZoneMap


def test_zone_map_from_mapping_round_trips() -> None:
    assert ZoneMap.from_mapping(ZONES.to_json()) == ZONES
    assert ZoneMap.from_mapping({"frozen": None}) == ZoneMap()


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"frozen": [], "secret": []}, "unknown key 'secret'"),
        ({"frozen": "a/**"}, "zones.frozen must be a list"),
        ({"learned": [""]}, "zones.learned holds ''"),
        ({"learned": [3]}, "zones.learned holds 3"),
        ({"evolvable": ["../x/**"]}, "uses '..'"),
        ({"managed": ["[z-a]"]}, "zones.managed: invalid glob"),
    ],
)
def test_zone_map_rejects_bad_mapping(mapping: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=re_escape(message)):
        ZoneMap.from_mapping(mapping)


def test_zone_map_rejects_non_mapping() -> None:
    with pytest.raises(InvalidInput, match="must be a mapping"):
        ZoneMap.from_mapping(["frozen"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("zones_yaml", "message"),
    [("managed: ['[z-a]']", "zones.managed: invalid glob"), ("evolvable: ['../x/**']", "uses '..'")],
)
def test_harness_yaml_zones_get_the_zone_map_checks(zones_yaml: str, message: str) -> None:
    """The schema only asks for non-empty strings; the zone map a writer gets from harness.yaml is checked too."""
    from reef_cli.config import parse_config

    config = parse_config(f"version: 1\ninclude: ['**']\nzones:\n  {zones_yaml}\n")
    with pytest.raises(InvalidInput, match=re_escape(message)):
        config.zone_map()


def test_harness_yaml_zone_map() -> None:
    from reef_cli.config import parse_config

    config = parse_config("version: 1\ninclude: ['**']\nzones:\n  learned: [reef/**]\ngate:\n  tasks: [c/*.yaml]\n")
    assert config.zone_map() == ZoneMap(learned=("reef/**",), always_frozen=("c/*.yaml", "evaluators/**"))


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# ------------------------------------------------------------------------------------------- zones and precedence


@pytest.mark.parametrize(
    ("path", "zone", "reason_part"),
    [
        (".claude/rules/style.md", "frozen", "matches frozen glob '.claude/rules/**'"),
        (".claude/settings.json", "frozen", "frozen glob '.claude/settings.json'"),
        ("canary/task.yaml", "frozen", "matches always-frozen glob 'canary/**'"),
        ("evaluators/judge.py", "frozen", "always-frozen glob 'evaluators/**'"),
        ("CLAUDE.md", "managed", "only text inside reef managed blocks may change"),
        ("AGENTS.md", "managed", "managed glob 'AGENTS.md'"),
        (".claude/skills/review/SKILL.md", "evolvable", "schema validation and the canary gate"),
        (".agents/skills/x/SKILL.md", "evolvable", "evolvable glob '.agents/skills/**'"),
        ("reef/memory/2024/notes.md", "learned", "learned glob 'reef/memory/**'"),
        ("CLAUDE.local.md", "learned", "learned glob 'CLAUDE.local.md'"),
        ("README.md", "frozen", "not listed in any zone; unlisted paths are frozen"),
        ("reef/other.md", "frozen", "unlisted paths are frozen"),
        ("docs/CLAUDE.md", "frozen", "unlisted"),  # globs are anchored
    ],
)
def test_default_zones(root: Path, path: str, zone: str, reason_part: str) -> None:
    assert_zone(root, path, zone, reason_part)


@pytest.mark.parametrize(
    ("zones", "path", "zone", "reason_part"),
    [
        (ZoneMap(always_frozen=("x/**",), learned=("x/**",)), "x/a", "frozen", "always-frozen"),
        (ZoneMap(always_frozen=("x/**",), frozen=("x/**",)), "x/a", "frozen", "always-frozen"),
        (ZoneMap(frozen=("x/**",), managed=("x/a",)), "x/a", "frozen", "frozen glob"),
        (ZoneMap(frozen=("x/a",), evolvable=("x/**",)), "x/a", "frozen", "frozen glob 'x/a'"),
        (ZoneMap(frozen=("x/a",), evolvable=("x/**",)), "x/b", "evolvable", "evolvable glob"),
        (ZoneMap(managed=("x/a",), evolvable=("x/**",)), "x/a", "managed", "managed glob"),
        (ZoneMap(managed=("x/a",), learned=("x/**",)), "x/a", "managed", "managed glob"),
        (ZoneMap(evolvable=("x/**",), learned=("x/**",)), "x/a", "evolvable", "evolvable glob"),
        (ZoneMap(learned=("x/**",)), "x/a", "learned", "learned glob"),
        (ZoneMap(learned=("**",)), "harness.yaml", "frozen", "harness.yaml is the zone map"),
        (ZoneMap(learned=("**",)), "harness.yml", "frozen", "harness.yml is the zone map"),
        (ZoneMap(learned=("**",)), "sub/.git/config", "frozen", "path enters .git"),
        (ZoneMap(learned=("**",)), ".reef/state.json", "frozen", "path enters .reef"),
        (ZoneMap(learned=("**",)), "deep/er/.reef", "frozen", "path enters .reef"),
        (ZoneMap(learned=("**",)), "sub/harness.yaml", "learned", "learned glob"),  # the zone map lives at the root
        (ZoneMap(), "anything", "frozen", "unlisted"),
    ],
)
def test_precedence(root: Path, zones: ZoneMap, path: str, zone: str, reason_part: str) -> None:
    decision = decide(root, zones, path)
    assert (decision.zone, decision.automatic_write == "allowed") == (zone, zone != "frozen")
    assert reason_part in decision.reason


# ------------------------------------------------------------------------------------------- blocked outright


@pytest.mark.parametrize(
    ("path", "reason_part"),
    [
        ("", "path is empty"),
        (".", "harness root itself"),
        ("reef/..", "harness root itself"),
        ("reef/memory/a\x00b.md", "control character U+0000"),
        ("reef/memory/a\nb.md", "control character U+000A"),
        ("reef/memory/a\x7fb.md", "control character U+007F"),
        ("reef/memory/a\u2028b.md", "control character U+2028"),
        ("reef/memory/\udcff.md", "not valid UTF-8"),
        ("../outside.md", "path leaves the harness root"),
        ("reef/memory/../../../x", "path leaves the harness root"),
        ("/etc/passwd", "path leaves the harness root"),
        ("C:/Windows/x", "path leaves the harness root"),
        ("\\\\server\\share\\x", "path leaves the harness root"),
        (".git/config", "path enters .git"),
        (".git", "path enters .git"),
        ("reef/memory/.git/hooks/pre-commit", "path enters .git"),
        (".reef/refs", "path enters .reef"),
        ("harness.yaml", "harness.yaml is the zone map and is always frozen"),
    ],
)
def test_blocked_outright(root: Path, path: str, reason_part: str) -> None:
    assert_zone(root, path, "frozen", reason_part)


# ------------------------------------------------------------------------------------------- spellings


@pytest.mark.parametrize(
    ("path", "zone", "reason_part", "normalized"),
    [
        # separators, empty and dot segments, trailing slash, lexical ..
        ("reef//memory/./x.md/", "learned", "learned glob", "reef/memory/x.md"),
        (".claude/skills/../skills/review/SKILL.md", "evolvable", "", ".claude/skills/review/SKILL.md"),
        (".claude/skills/../rules/style.md", "frozen", "frozen glob '.claude/rules/**'", ".claude/rules/style.md"),
        ("reef/memory/../../harness.yaml", "frozen", "zone map", "harness.yaml"),
        ("./CLAUDE.md", "managed", "", "CLAUDE.md"),
        # backslash read as a separator too
        ("reef/memory/a\\b.md", "learned", "", "reef/memory/a\\b.md"),
        (".claude\\rules\\style.md", "frozen", "frozen glob '.claude/rules/**'", ".claude\\rules\\style.md"),
        ("reef/memory\\..\\..\\harness.yaml", "frozen", "zone map", "reef/memory\\..\\..\\harness.yaml"),
        # case
        (".CLAUDE/Rules/x.md", "frozen", "'.claude/rules/**' ignoring case", ".CLAUDE/Rules/x.md"),
        ("HARNESS.YAML", "frozen", "zone map", "HARNESS.YAML"),
        (".Git/config", "frozen", "path enters .git", ".Git/config"),
        (".REEF/x", "frozen", "path enters .reef", ".REEF/x"),
        ("Canary/T.yaml", "frozen", "always-frozen", "Canary/T.yaml"),
        ("Reef/Memory/x.md", "learned", "ignoring case", "Reef/Memory/x.md"),
        (".claude/Skills/x/SKILL.md", "evolvable", "ignoring case", ".claude/Skills/x/SKILL.md"),
        # Unicode forms
        ("\uff48\uff41\uff52\uff4e\uff45\uff53\uff53.yaml", "frozen", "zone map", None),  # fullwidth letters
        (".claude/\uff52ules/x.md", "frozen", "frozen glob", None),
        (".claude/skills/\uff0e\uff0e\uff0frules/x.md", "frozen", "frozen glob '.claude/rules/**'", None),
        (".claude/skills/cafe\u0301/SKILL.md", "evolvable", "", None),  # NFD accent stays evolvable
        (".claude/skills/caf\u00e9/SKILL.md", "evolvable", "", None),
        ("reef/memory/\ufb01le.md", "learned", "", None),  # ligature
        ("c\u0327anary/x", "frozen", "", None),  # combining cedilla: unlisted either way
        # default-ignorable code points dropped
        ("harness\u200b.yaml", "frozen", "zone map", None),
        (".claude/skills/..\u200d/rules/x.md", "frozen", "frozen glob '.claude/rules/**'", None),
        (".g\u200cit/config", "frozen", "path enters .git", None),
        ("reef/memory/a\u200bb.md", "learned", "", None),
        # Windows aliases: trailing dots and spaces, NTFS streams
        ("harness.yaml.", "frozen", "zone map", "harness.yaml."),
        ("harness.yaml ", "frozen", "zone map", "harness.yaml "),
        ("harness.yaml::$DATA", "frozen", "zone map", "harness.yaml::$DATA"),
        ("harness.yaml:stream", "frozen", "zone map", None),
        (".claude/rules./x.md", "frozen", "frozen glob '.claude/rules/**'", None),
        (".claude/rules /x.md", "frozen", "frozen glob", None),
        (".git./config", "frozen", "path enters .git", None),
        (".claude/skills/.. /rules/x.md", "frozen", "frozen glob '.claude/rules/**'", None),
        ("CLAUDE.md:stream", "frozen", "", None),
        ("reef/memory/x.md.", "learned", "", "reef/memory/x.md."),
        ("reef/memory/x.md:stream", "learned", "", None),
        ("HARNES~1.YAM", "frozen", "8.3 short name", None),
        ("GIT~1/config", "frozen", "8.3 short name", None),
        # percent-encoding, decoded once
        ("reef/memory/%2e%2e/%2e%2e/harness.yaml", "frozen", "zone map", None),
        ("reef/memory/%2e%2e/%2e%2e/.claude/rules/x.md", "frozen", "frozen glob '.claude/rules/**'", None),
        ("reef/memory/..%2f..%2f.claude%2frules/x.md", "frozen", "frozen glob", None),
        ("reef/memory/%2E%2E%5C%2E%2E%5Charness.yaml", "frozen", "zone map", None),
        ("reef/memory/a%2fb.md", "learned", "", "reef/memory/a%2fb.md"),
        ("reef/memory/100%25.md", "learned", "", None),
        ("reef/memory/%252e%252e/%252e%252e/harness.yaml", "learned", "", None),  # only decoded once
        ("reef/memory/%00.md", "frozen", "control character U+0000", "reef/memory/%00.md"),
    ],
)
def test_spellings(root: Path, path: str, zone: str, reason_part: str, normalized: str | None) -> None:
    decision = assert_zone(root, path, zone, reason_part)
    if normalized is not None:
        assert decision.normalized == normalized


def test_alias_reason_names_the_reading(root: Path) -> None:
    decision = decide(root, ZONES, "reef/memory/%2e%2e/%2e%2e/harness.yaml")
    assert "read as 'reef/memory/../../harness.yaml'" in decision.reason


def test_absolute_paths(root: Path, tmp_path: Path) -> None:
    assert_zone(root, str(root / "reef/memory/x.md"), "learned")
    assert decide(root, ZONES, root / "reef/memory/x.md").normalized == "reef/memory/x.md"
    assert_zone(root, str(root / ".claude/rules/style.md"), "frozen", "frozen glob")
    assert_zone(root, f"{root}/reef/../harness.yaml", "frozen", "zone map")
    # '..' above the root is never taken lexically in an absolute path: a symlink there would change it
    assert_zone(root, f"{root}/../harness/reef/memory/x.md", "frozen", "path leaves the harness root")
    assert_zone(root, f"{root}//./reef/memory/x.md", "learned")
    assert_zone(root, str(tmp_path / "elsewhere.md"), "frozen", "path leaves the harness root")
    assert_zone(root, str(root) + "x/reef/memory/a.md", "frozen", "leaves the harness root")  # sibling prefix
    assert decide(root, ZONES, str(root)).zone == "frozen"
    assert decide(root, ZONES, "/etc/passwd").normalized is None


def test_path_like_and_bytes(root: Path) -> None:
    assert zone_of(root, Path("reef/memory/x.md")) == "learned"
    assert zone_of(root, b"reef/memory/x.md") == "learned"  # type: ignore[arg-type]
    assert zone_of(root, b"reef/memory/\xff.md") == "frozen"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "zone", "normalized"),
    [
        (".claude/rules/", "frozen", ".claude/rules"),
        (".claude/skills/", "evolvable", ".claude/skills"),
        (".claude/", "frozen", ".claude"),
        ("reef/memory/", "learned", "reef/memory"),
        ("canary/", "frozen", "canary"),
        (".git/", "frozen", ".git"),
    ],
)
def test_directories(root: Path, path: str, zone: str, normalized: str) -> None:
    decision = decide(root, ZONES, path)
    assert (decision.zone, decision.normalized) == (zone, normalized)


# ------------------------------------------------------------------------------------------- symlinks


@needs_symlinks
@pytest.mark.parametrize(
    ("links", "path", "zone", "reason_part"),
    [
        # a link in a learned directory into a frozen one
        ({"reef/memory/r": "../../.claude/rules"}, "reef/memory/r/style.md", "frozen",
         "symlink 'reef/memory/r' lands in frozen path '.claude/rules'"),
        ({"reef/memory/z.md": "../../harness.yaml"}, "reef/memory/z.md", "frozen",
         "lands in frozen path 'harness.yaml' (harness.yaml is the zone map"),
        ({"reef/memory/g": "../../.git"}, "reef/memory/g/config", "frozen", "path enters .git"),
        ({"reef/memory/c": "../../canary"}, "reef/memory/c/new.yaml", "frozen", "always-frozen"),
        # dangling link to a frozen place, and an absolute link target
        ({"reef/memory/d.md": "../../.claude/hooks/new.sh"}, "reef/memory/d.md", "frozen", "lands in frozen path"),
        ({"reef/memory/a": "{root}/.claude/rules"}, "reef/memory/a/x.md", "frozen", "lands in frozen path"),
        # out of the harness
        ({"reef/memory/out": "{outside}"}, "reef/memory/out/x.md", "frozen",
         "symlink 'reef/memory/out' points outside the harness"),
        ({"reef/memory/up": "../../.."}, "reef/memory/up/x", "frozen", "points outside the harness"),
        ({"reef/memory/top": "../.."}, "reef/memory/top/reef/notes.md", "frozen", "lands on the harness root"),
        # '..' after a link applies to the link's target, as in the kernel
        ({"reef/memory/deep": "../../.claude/skills/review"}, "reef/memory/deep/../../memory/x.md", "frozen",
         "unlisted"),
        # a chain: a -> b -> frozen
        ({"reef/memory/a": "b", "reef/memory/b": "../../.claude/rules"}, "reef/memory/a/x", "frozen",
         "symlink 'reef/memory/a' lands in frozen path '.claude/rules'"),
        # loops
        ({"reef/memory/l1": "l2", "reef/memory/l2": "l1"}, "reef/memory/l1/x", "frozen", "loop"),
        ({"reef/memory/self": "self"}, "reef/memory/self", "frozen", "loop"),
        # allowed: links that stay within allowed zones
        ({"reef/memory/alias": "real"}, "reef/memory/alias/x.md", "learned", "learned glob 'reef/memory/**'"),
        ({".agents/skills": "../.claude/skills"}, ".agents/skills/review/SKILL.md", "evolvable", ""),
        ({"AGENTS.md": "CLAUDE.md"}, "AGENTS.md", "managed", ""),
        # the most restrictive of the lexical and resolved readings wins
        ({"reef/memory/sk": "../../.claude/skills"}, "reef/memory/sk/review/SKILL.md", "evolvable",
         "it reaches '.claude/skills/review/SKILL.md'"),
        ({"reef/memory/m.md": "../../CLAUDE.md"}, "reef/memory/m.md", "managed", "managed glob 'CLAUDE.md'"),
    ],
)
def test_symlinks(root: Path, tmp_path: Path, links: dict, path: str, zone: str, reason_part: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / ".agents").mkdir()
    (root / "reef/memory/real").mkdir()
    for link, target in links.items():
        os.symlink(target.format(root=root, outside=outside), root / link)
    assert_zone(root, path, zone, reason_part)


def test_non_ascii_root_with_absolute_paths(tmp_path: Path) -> None:
    root = tmp_path / "caf\u00e9" / "h\uff41rness"
    (root / "reef/memory").mkdir(parents=True)
    assert_zone(root, str(root / "reef/memory/x.md"), "learned")
    assert_zone(root, str(root / "harness.yaml"), "frozen", "zone map")


@pytest.mark.skipif(not hasattr(os, "link"), reason="needs hard links")
def test_hard_links_are_blocked(root: Path) -> None:
    os.link(root / ".claude/rules/style.md", root / "reef/memory/style.md")
    assert_zone(root, "reef/memory/style.md", "frozen", "'reef/memory/style.md' has 2 hard links")
    (root / "reef/memory/own.md").write_text("x\n")
    assert_zone(root, "reef/memory/own.md", "learned")


@needs_symlinks
def test_backslash_and_percent_spellings_are_walked_too(root: Path) -> None:
    os.symlink("../../.claude/rules", root / "reef/memory/r")
    assert_zone(root, "reef/memory/a%2f..%2fr/x.md", "frozen", "lands in frozen path")
    assert_zone(root, "reef\\memory\\r\\x.md", "frozen", "lands in frozen path")


@needs_symlinks
def test_root_given_through_a_symlink(root: Path, tmp_path: Path) -> None:
    via = tmp_path / "via"
    os.symlink(root, via)
    for base in (root, via):
        assert_zone(via, str(base / "reef/memory/x.md"), "learned")
        assert_zone(via, str(base / ".claude/rules/style.md"), "frozen", "frozen glob")
        assert_zone(base, "reef/memory/x.md", "learned")
    os.symlink(via / ".claude/rules", root / "reef/memory/r")  # absolute target through the root's alias
    assert_zone(root, "reef/memory/r/x.md", "frozen", "lands in frozen path '.claude/rules'")


@needs_symlinks
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads everything")
def test_unreadable_component_is_blocked(root: Path) -> None:
    locked = root / "reef/memory/locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        assert_zone(root, "reef/memory/locked/x.md", "frozen", "cannot inspect 'reef/memory/locked/x.md'")
    finally:
        locked.chmod(0o755)


# ------------------------------------------------------------------------------------------- API shape


def test_to_json_shape(root: Path) -> None:
    decision = decide(root, ZONES, "reef/memory/x.md")
    data = decision.to_json()
    assert set(data) == {"path", "normalized", "zone", "automatic_write", "reason"}
    assert data["zone"] == "learned" and data["automatic_write"] == "allowed"
    assert ZoneDecision.from_json(json.loads(json.dumps(data))) == decision
    blocked = decide(root, ZONES, "../x").to_json()
    assert blocked == {
        "path": "../x",
        "normalized": None,
        "zone": "frozen",
        "automatic_write": "blocked",
        "reason": "path leaves the harness root",
    }


def test_check_write(root: Path) -> None:
    assert check_write(root, ZONES, "reef/memory/x.md").zone == "learned"
    assert check_write(root, ZONES, "CLAUDE.md").zone == "managed"
    with pytest.raises(PolicyError, match=r"refusing to write '\.claude/rules/style\.md' automatically: "
                       r"matches frozen glob '\.claude/rules/\*\*'"):
        check_write(root, ZONES, ".claude/rules/style.md")
    with pytest.raises(PolicyError, match=r"'a\\x00b'.*control character"):
        check_write(root, ZONES, "a\x00b")


def test_classify_many_keeps_order(root: Path) -> None:
    paths = ["CLAUDE.md", "harness.yaml", "reef/notes.md", ".claude/skills/x"]
    assert [d.zone for d in classify_many(root, ZONES, paths)] == ["managed", "frozen", "learned", "evolvable"]
    assert [d.path for d in classify_many(root, ZONES, iter(paths))] == paths


def test_decisions_are_stable(root: Path) -> None:
    """Deciding twice (a writer re-checks after taking its lock) gives the same answer."""
    first = decide(root, ZONES, ".claude/skills/\uff0e\uff0e\uff0frules/x.md")
    assert decide(root, ZONES, ".claude/skills/\uff0e\uff0e\uff0frules/x.md") == first


def test_component_that_cannot_be_inspected_is_blocked(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rule as above where tests run as root: any lstat failure but 'missing' blocks."""
    real_lstat = os.lstat
    locked = str(root.resolve() / "reef/memory/locked")

    def lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied")
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    assert_zone(root, "reef/memory/locked/x.md", "frozen", "cannot inspect 'reef/memory/locked': Permission denied")
    assert_zone(root, "reef/memory/open/x.md", "learned")
