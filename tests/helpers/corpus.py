"""Generated raw corpora for the data tests (never real data): Gutenberg-style books."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = (
    "the a of and to in was he she it that his her had with for as at on by said but not "
    "be they you we all from one there been were would old house river night morning came "
    "went little great long through never again before after door window letter garden ship "
    "king queen captain doctor mother father sister brother friend dark light cold warm"
).split()
SYLLABLES = "ka lo mi ren tas vol ung per sti dra qu ix bel mor fen ath ow ier cle nox".split()
PUNCT = [",", ";", "!", "?", "—", "…"]


def _word(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return rng.choice(WORDS)
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3)))


def make_text(seed: int, n_paragraphs: int, width: int = 60) -> str:
    """Paragraphs of random sentences, hard-wrapped at `width` columns, blank-line separated."""
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(n_paragraphs):
        sentences = []
        for _ in range(rng.randint(2, 5)):
            words = [_word(rng) for _ in range(rng.randint(4, 12))]
            if rng.random() < 0.3:
                words.insert(rng.randint(1, len(words) - 1), rng.choice(PUNCT))
            sentence = " ".join(words).replace(" ,", ",").replace(" ;", ";")
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "!", "?"]))
        text, lines, line = " ".join(sentences), [], ""
        for word in text.split():
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}".strip()
        lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def make_book(seed: int, n_paragraphs: int = 20, end_marker: bool = True) -> str:
    """A Gutenberg-style book: licence header, START marker, body, END marker, footer."""
    title = f"BOOK NUMBER {seed}"
    head = (f"The Project Gutenberg eBook of {title}\n\nThis eBook is for the use of anyone "
            f"anywhere.\n\n*** START OF THE PROJECT GUTENBERG EBOOK {title} ***\n\n")
    tail = (f"\n\n*** END OF THE PROJECT GUTENBERG EBOOK {title} ***\n\nSection 1. General "
            "Terms of Use and Redistributing Project Gutenberg electronic works\n")
    return head + make_text(seed, n_paragraphs) + (tail if end_marker else "\n")


def write_corpus(mirror: Path, n_books: int, n_paragraphs: int = 20) -> Path:
    """mirror/corpus/book_XX.txt: UTF-8 with BOM and CRLF, as the real mirror's files are."""
    corpus = mirror / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i in range(n_books):
        text = make_book(i, n_paragraphs).replace("\n", "\r\n")
        (corpus / f"book_{i:02d}.txt").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    return corpus
