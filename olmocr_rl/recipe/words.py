"""The generator's words and numbers: pseudo-words (no real language for a model to lean on) and numbers, split
into a train pool and a held-out pool that share nothing.

- **Words** are made of syllables (an onset, a vowel, sometimes a coda) by one fixed random generator, so the
  list is the same everywhere; each word belongs to one split, chosen by a seeded hash of the word
  (``pool_seed``, default 0). A page draws a word by first drawing its length from one fixed distribution
  (:data:`LENGTHS`, the same for both splits) and then a word of that length from its split's pool, so the
  two splits differ in which words they use, not in how long they are.
- **Numbers** from 100 to 99,999 belong to a split by the same hash of their value (``4128`` and ``4,128`` are
  one number); a page draws uniformly among its split's numbers of the wanted digit count.
- **Shared on purpose** (structure, not content): the page-number words of :data:`STRUCTURAL_WORDS`, numbers
  under 100 (page numbers, list numbers, footnote markers) and punctuation.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re

__all__ = ["Vocabulary", "split_of", "SPLITS", "LENGTHS", "STRUCTURAL_WORDS", "content_tokens", "MIN_NUMBER",
           "MAX_NUMBER"]

SPLITS = ("train", "heldout")
#: word length (letters) -> weight; the same for both splits
LENGTHS = {2: 7, 3: 15, 4: 20, 5: 19, 6: 14, 7: 10, 8: 7, 9: 5, 10: 3}
STRUCTURAL_WORDS = frozenset({"page", "p", "of"})  # the page-number words ("Page 3 of 9", "p. 3")
MIN_NUMBER, MAX_NUMBER = 100, 99_999
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "dr",
           "kr", "pl", "st", "tr", "sk", "gl", "fr", "sh", "ch", "th", "qu", "x", "y")
_ONSET_WEIGHTS = (5, 3, 5, 3, 4, 3, 2, 5, 6, 6, 6, 5, 6, 7, 7, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea", "y")
_VOWEL_WEIGHTS = (9, 9, 8, 8, 5, 1, 1, 1, 1)
_CODAS = ("", "n", "r", "s", "t", "l", "m", "k", "x", "nd", "st")
_CODA_WEIGHTS = (24, 4, 4, 3, 3, 3, 2, 2, 1, 1, 1)
_CANDIDATES = 40_000  # syllable strings tried when the pool is made (once a process, about 0.1 s)
_TOKEN = re.compile(r"[A-Za-z]+|\d[\d,]*\d|\d")


def _hash_bit(pool_seed: int, key: str) -> int:
    return hashlib.blake2b(f"{pool_seed}:{key}".encode(), digest_size=8).digest()[0] & 1


def split_of(token: str | int, pool_seed: int = 0) -> str:
    """The split a word (any case) or a number (``4,128``, ``4128`` or 4128) belongs to."""
    if isinstance(token, int) or token.replace(",", "").isdigit():
        return SPLITS[_hash_bit(pool_seed, f"#{int(str(token).replace(',', ''))}")]
    return SPLITS[_hash_bit(pool_seed, token.lower())]


@functools.lru_cache(maxsize=1)
def _all_words() -> dict[int, tuple[str, ...]]:
    """Every pseudo-word of the pool by length (fixed: one generator with a constant seed)."""
    rng = random.Random("olmocr_rl.recipe.words")
    syllables = 3 * _CANDIDATES
    onsets = rng.choices(_ONSETS, _ONSET_WEIGHTS, k=syllables)
    vowels = rng.choices(_VOWELS, _VOWEL_WEIGHTS, k=syllables)
    codas = rng.choices(_CODAS, _CODA_WEIGHTS, k=syllables)
    counts = rng.choices((1, 2, 3, 4), (1, 2, 2, 1), k=_CANDIDATES)
    found: dict[int, set[str]] = {length: set() for length in LENGTHS}
    at = 0
    for count in counts:
        word = onsets[at] + vowels[at] + codas[at] + "".join(
            onsets[i] + vowels[i] + codas[i] for i in range(at + 1, at + count))
        at += count
        if len(word) in found and word not in STRUCTURAL_WORDS:
            found[len(word)].add(word)
    return {length: tuple(sorted(words)) for length, words in found.items()}


@functools.lru_cache(maxsize=8)
def _pool(split: str, pool_seed: int) -> dict[int, tuple[str, ...]]:
    return {length: tuple(w for w in words if split_of(w, pool_seed) == split)
            for length, words in _all_words().items()}


class Vocabulary:
    """Words and numbers of one split (``train`` or ``heldout``), drawn with the caller's random generator."""

    def __init__(self, split: str, pool_seed: int = 0) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        self.split, self.pool_seed = split, pool_seed
        self.words = _pool(split, pool_seed)

    def word(self, rng: random.Random, max_len: int = 10, min_len: int = 2) -> str:
        """A word whose length is drawn from LENGTHS (restricted to ``min_len``..``max_len``)."""
        lengths = [n for n in LENGTHS if min_len <= n <= max_len]
        if not lengths:
            raise ValueError(f"no word length between {min_len} and {max_len}")
        length = rng.choices(lengths, [LENGTHS[n] for n in lengths])[0]
        return rng.choice(self.words[length])

    def number(self, rng: random.Random, digits: int = 4, commas: bool = False) -> str:
        """A number of ``digits`` digits (3 to 5) of this split, with a thousands comma when ``commas``."""
        if not 3 <= digits <= 5:
            raise ValueError(f"numbers have 3 to 5 digits, got {digits}")
        low, high = max(MIN_NUMBER, 10 ** (digits - 1)), min(MAX_NUMBER, 10 ** digits - 1)
        while True:
            value = rng.randint(low, high)
            if split_of(value, self.pool_seed) == self.split:
                return f"{value:,}" if commas else str(value)

    def sentence(self, rng: random.Random, words: int, max_len: int = 10, numbers: bool = True) -> list[str]:
        """A sentence of ``words`` words as a list (first capitalised, the last ending with a period); a word is
        sometimes a number, sometimes followed by a comma."""
        out = []
        for i in range(words):
            if numbers and 0 < i and rng.random() < 0.1 and max_len >= 7:
                token = self.number(rng, rng.choice((3, 4, 4, 5)), commas=True)
            else:
                token = self.word(rng, max_len - 1 if i == words - 1 else max_len)  # room for the period
            if i == 0:
                token = token.capitalize()
            elif i < words - 1 and rng.random() < 0.08 and len(token) < max_len:
                token += ","
            out.append(token)
        out[-1] += "."
        return out

    def title(self, rng: random.Random, words: int, max_len: int = 8) -> str:
        """A heading or running head: ``words`` words, the first (or each, half the time) capitalised."""
        each = rng.random() < 0.5
        parts = [self.word(rng, max_len, 3) for _ in range(words)]
        return " ".join(p.capitalize() if each or i == 0 else p for i, p in enumerate(parts))


def content_tokens(text: str) -> tuple[set[str], set[int]]:
    """The words (lower case, structural words left out) and the numbers of 100 or more in ``text``."""
    words, numbers = set(), set()
    for token in _TOKEN.findall(text):
        if token[0].isdigit():
            value = int(token.replace(",", ""))
            if value >= MIN_NUMBER:
                numbers.add(value)
        elif token.lower() not in STRUCTURAL_WORDS:
            words.add(token.lower())
    return words, numbers
