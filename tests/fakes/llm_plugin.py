"""pytest plugin: the `fake_llm` fixture, a started FakeLLM that is stopped after the test."""

from __future__ import annotations

import pytest

from .llm_server import FakeLLM


@pytest.fixture
def fake_llm():
    """A fake Anthropic/OpenAI server on 127.0.0.1; script it with `fake_llm.reply(...)` (see llm_server.py)."""
    with FakeLLM() as llm:
        yield llm
