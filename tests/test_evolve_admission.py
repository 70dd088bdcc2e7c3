"""Every new bullet earns its place: per-bullet admission from the gate's leave-one-out attribution."""

from __future__ import annotations

from test_evolve import LINT, LINT_KEY, _gated_project, block_ids, evolve, feedback, memory, releases

USELESS = {"lesson": "Keep commit messages short."}
TABS = {"lesson": "Use tabs for indentation."}


def test_a_bullet_that_does_not_pay_its_way_does_not_ride_along(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    feedback(ledger, LINT, 5)
    feedback(ledger, USELESS, 5)
    out = evolve(reef, root)
    mem = memory(root)
    lint = mem[LINT_KEY]
    useless = next(p for p in mem.values() if p["text"] == USELESS["lesson"])
    assert out["status"] == "published" and out["verdict"]["decision"] == "publish"
    assert block_ids(root / "CLAUDE.md") == [lint["id"]]  # the joint candidate held both
    adm = out["admission"]
    assert adm["admitted"] == [lint["id"]] and [d["bullet_id"] for d in adm["dropped"]] == [useless["id"]]
    assert adm["utility"][lint["id"]] == 1.0 and adm["utility"][useless["id"]] == 0.0
    rel = out["release"]
    assert [o["bullet_id"] for o in rel["meta"]["bullets"]] == [lint["id"]]
    assert rel["meta"]["admission"]["dropped"][0]["bullet_id"] == useless["id"]
    assert adm["joint"]["record_id"] in rel["evidence"] and out["verdict"]["record_id"] in rel["evidence"]
    assert adm["joint"]["record_id"] != out["verdict"]["record_id"]  # the admitted subset was gated on its own
    neg = {n["key"]: n for n in out["negatives"]}
    assert neg[useless["key"]]["origin"] == "gate" and "did not pay its way" in neg[useless["key"]]["reason"]
    assert any("was not published" in w for w in out["warnings"])


def test_a_helpful_bullet_is_not_sunk_by_a_harmful_neighbour(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted && test ! -f broken")
    feedback(ledger, LINT, 5)
    feedback(ledger, TABS, 5)
    out = evolve(reef, root)
    mem = memory(root)
    lint, tabs = mem[LINT_KEY], mem["do:indentation+tab+use"]
    assert out["admission"]["joint"]["decision"] == "reject"  # together they fail every task
    assert out["admission"]["utility"][tabs["id"]] == -1.0
    assert out["status"] == "published" and out["verdict"]["decision"] == "publish"
    assert block_ids(root / "CLAUDE.md") == [lint["id"]]
    assert [n["key"] for n in out["negatives"]] == [tabs["key"]]
    assert len(releases(reef, root)) == 3


def test_attribution_off_keeps_the_joint_judgement(reef, tmp_path):
    root, ledger = _gated_project(reef, tmp_path, check="test -f linted")
    feedback(ledger, LINT, 5)
    feedback(ledger, USELESS, 5)
    out = evolve(reef, root, "--attribute", "0")
    assert out["status"] == "published" and out["admission"] is None
    assert len(block_ids(root / "CLAUDE.md")) == 2


def test_a_bullet_whose_gain_is_noise_is_not_admitted():
    """A positive leave-one-out utility that the gate's sign-flip test cannot tell from noise (greedy decoding
    flipping a few answers either way, as bench/efficacy_real.py saw for an unfollowable rule) does not ride along
    with a bullet that really helps; before, any utility above zero was admitted."""
    from reef_cli.curate import Op
    from reef_cli.evolve.admission import admit

    def add(bid, key):
        return Op(op="add", surface="block", path="CLAUDE.md", bullet_id=bid, key=key, text=key, reason="",
                  group=key)

    strong, noise = add("b-spanish", "spanish"), add("b-ok", "ok")
    few = add("b-coral", "coral")
    verdict = {"bullet_utility": {"b-spanish": 0.44, "b-ok": 0.0625, "b-coral": 0.0625},
               "trace": {"bullets": {"b-spanish": {"utility": 0.44, "pairs": 32, "admitted": True, "up": 17, "down": 3},
                                     "b-ok": {"utility": 0.0625, "pairs": 32, "admitted": False, "needed_mean": 0.094,
                                              "up": 3, "down": 1},
                                     # two tasks fixed, none hurt: too few pairs for the test, but not noise
                                     "b-coral": {"utility": 0.0625, "pairs": 32, "admitted": False, "up": 2,
                                                 "down": 0}}}}
    a = admit([strong, noise, few], verdict, limit=8)
    assert a.admitted == ("b-spanish", "b-coral")
    (dropped,) = a.dropped
    assert dropped["bullet_id"] == "b-ok" and "not distinguishable from noise over 32 pairs (3 up, 1 down)" in \
        dropped["reason"]
    assert "+0.094" in dropped["reason"]
    # a verdict recorded before the test existed keeps the old rule: utility above zero
    old = admit([strong, noise, few], {"bullet_utility": verdict["bullet_utility"]}, limit=8)
    assert old.admitted == ("b-spanish", "b-ok", "b-coral")
