"""Split long texts into overlapping passages by a token budget.

Tokens here are whitespace-separated words: no model is needed to chunk, and MiniLM-size
encoders (256 word pieces) hold a 200-word passage with room to spare.
"""

from __future__ import annotations

import re

from tandem.errors import ConfigError

_WORD = re.compile(r"\S+")


def chunk_text(text: str, max_tokens: int = 200, overlap: int = 40) -> list[str]:
    """Windows of at most ``max_tokens`` words, each sharing ``overlap`` words with the previous one.

    Paragraph breaks are preferred as cut points: paragraphs are packed greedily into a window and
    only a paragraph longer than the budget is cut mid-way.
    """
    if max_tokens <= 0 or not 0 <= overlap < max_tokens:
        raise ConfigError(f"chunking needs max_tokens > overlap >= 0, got {max_tokens=} {overlap=}")
    paragraphs = [p.split() for p in re.split(r"\n\s*\n", text) if p.strip()]
    chunks: list[list[str]] = []
    current: list[str] = []
    for words in paragraphs:
        # a paragraph that fits a window starts a new one; a longer one is cut below anyway
        if current and len(current) + len(words) > max_tokens and len(words) <= max_tokens:
            chunks.append(current)
            current = current[-overlap:] if overlap else []
        current = current + words
        start = 0  # cut by moving an offset: slicing the rest off each time is quadratic in a long paragraph
        while len(current) - start > max_tokens:
            chunks.append(current[start:start + max_tokens])
            start += max_tokens - overlap
        current = current[start:]
    if current and (not chunks or len(current) > overlap):
        chunks.append(current)
    return [" ".join(c) for c in chunks]
