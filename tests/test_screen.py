"""The injection/escalation screen: every attack of the corpus is caught with its kind, no benign look-alike is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reef_cli.screen import normalise, screen

CORPUS = json.loads((Path(__file__).parent / "data" / "screen_corpus.json").read_text())


@pytest.mark.parametrize("text,kind", CORPUS["attacks"])
def test_attacks_are_caught(text, kind):
    finding = screen(text)
    assert finding is not None, text
    assert finding.kind == kind
    assert finding.excerpt and finding.excerpt.lower() in " ".join(normalise(text).split()).lower()
    assert "reef never teaches it to an agent" in finding.reason()


@pytest.mark.parametrize("text", CORPUS["benign"])
def test_benign_look_alikes_pass(text):
    assert screen(text) is None


def test_the_corpus_is_big_enough_on_both_sides():
    kinds = [k for _, k in CORPUS["attacks"]]
    assert kinds.count("injection") >= 12 and kinds.count("escalation") >= 12 and len(CORPUS["benign"]) >= 20
