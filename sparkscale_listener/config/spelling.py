"""Did you mean: the known word (a key, a value, a module name) that a misspelt one most likely
stands for, so that a message names it instead of listing everything accepted."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's similarity ratio from which two words count as one word misspelt: a letter dropped,
# added, swapped or changed in a word of eight or more letters stays above it.
CLOSE_RATIO = 0.8


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` most likely misspells (a difference of case first), or None."""
    by_lower: dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    matches = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=CLOSE_RATIO)
    return by_lower[matches[0]] if matches else None


def did_you_mean(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``"did you mean <prefix><closest candidate>?"``, or ``""`` when no candidate is close."""
    match = closest(word, candidates)
    return f"did you mean {prefix}{match}?" if match is not None and match != word else ""
