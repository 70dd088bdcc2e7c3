"""Fakes that speak real protocols on 127.0.0.1, for tests that run real clients (see llm_server.py)."""

from .llm_server import FakeLLM, Reply, Request, ToolCall, error, raw, text, tool, truncated

__all__ = ["FakeLLM", "Reply", "Request", "ToolCall", "error", "raw", "text", "tool", "truncated"]
