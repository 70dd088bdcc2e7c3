"""Thin typer commands over the core; every command parses, calls one core function, renders."""
