"""What the eval tests share: the tiny Llama's layer count and the words of the perplexity text."""

from __future__ import annotations

LAYERS = 3
"""Decoder layers of the tiny Llama the eval tests build (``tiny_llama_layers``) and of their adapter."""
WORDS = (
    "the river ran past a quiet town where people kept old books and told long stories about winters that "
    "never ended while children counted stars over the hills and the baker sang at dawn"
).split()
"""The vocabulary of the generated perplexity text."""
