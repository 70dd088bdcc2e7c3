"""docs/cli.md is generated from the command tree; this keeps it from drifting."""

from conftest import REPO


def test_cli_reference_is_current():
    from reef_cli.cli.reference import render

    assert (REPO / "docs" / "cli.md").read_text() == render(), (
        "docs/cli.md is stale: run .venv/bin/python -m reef_cli.cli.reference > docs/cli.md"
    )


def test_every_command_is_documented_with_a_sentence():
    from reef_cli.cli.reference import render

    text = render()
    sections = text.split("\n## ")[1:]
    assert len(sections) >= 30
    for section in sections:
        title, _, body = section.partition("\n")
        first = body.strip().splitlines()[0] if body.strip() else ""
        assert first and not first.startswith(("- ", "Arguments:")), f"{title} has no help sentence"
