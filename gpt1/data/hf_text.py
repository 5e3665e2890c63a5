"""The project's text standardisation (spec §5) as transformers' own tokenizer components, so
that an export-hf folder reads raw text as `gpt1 predict` does.

`gpt1.data.clean.standardize_text` runs ftfy, the original release's punctuation rules and
spaCy's English tokenizer; tokenizers cannot run Python, so `standardizer` writes the same
steps as tokenizer.json's `normalizer` (NFC, the quote / dash / ellipsis replacements, newlines
as tokens, lower-case, and a cap on the characters read) and `pre_tokenizer` (whitespace, the
punctuation runs of `clean._PUNCT`, spaCy's prefixes, suffixes and infixes, and its tokenizer
exceptions: `don't` -> `do n't`, `mr.` kept whole), built from spaCy's own tables. The rest
(ftfy's other repairs, spaCy's URL and emoticon matching, rules that read letter case) is not
expressed; tests/unit/test_export.py measures the agreement on raw sentences.
"""

from __future__ import annotations

import re
from typing import Any

from gpt1.data import clean

_QUOTES = {"‘": "'", "’": "'", "‚": "'", "‛": "'", "“": '"', "”": '"', "„": '"', "‟": '"'}
"""ftfy's uncurl_quotes (on in fix_text)."""
_ORTH = 65
"""spaCy's attribute id of a token's text (spacy.attrs.ORTH) in its exception table."""


def _replace(old: str, new: str, regex: bool = False) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"Regex" if regex else "String": old}, "content": new}


def _split(pattern: str, behavior: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior,
            "invert": False}


def _spacy_tables() -> tuple[list[str], dict[str, list[str]], list[str]]:
    """(single-token exceptions holding punctuation, lower-cased; multi-token exceptions by
    their lower-case text; the ASCII units spaCy splits from a number) of the English
    tokenizer that `clean.standardize_texts` runs."""
    from spacy.lang.char_classes import UNITS

    keep, split = set(), {}
    for text, tokens in clean._tokenizer().rules.items():
        parts = [t[_ORTH] for t in tokens]
        if "".join(parts) != text or any(c.isspace() for c in text):
            continue
        if len(parts) > 1 and text == text.lower():
            split[text] = parts
        elif len(parts) == 1 and re.search(r"[^a-z0-9]", text.lower()):
            keep.add(text.lower())
    units = {u.lower() for u in UNITS.split("|") if u.isascii() and "/" not in u}
    longest = sorted(keep, key=len, reverse=True)
    return longest, split, sorted(units, key=len, reverse=True)


def standardizer(max_chars: int) -> dict[str, Any]:
    """tokenizer.json's `normalizer` and `pre_tokenizer` (tokenizers' JSON) reproducing
    `clean.standardize_text` followed by the BPE's lower-casing and word split; each text is
    cut after `max_chars` characters (not spaces), so that it never gives more tokens."""
    keep, split, units = _spacy_tables()
    esc = re.escape
    affix = (
        rf"\A(?:{'|'.join(map(esc, keep))}|(?:[a-z]\.){{2,}})\z"  # kept whole: mr. e.g. u.s.
        r"|\A(?:\.{2,}|[$£€¥#&'`<>=§%:])"  # prefixes
        r"|\.{2,}|'s\z|(?<=[a-z0-9%'°])\.\z|[':`>%]\z"  # suffixes (and the ellipsis infix)
        r"|(?<=[a-z0-9])[:<>=](?=[a-z])"  # infixes
        rf"|(?<=[0-9])(?:{'|'.join(map(esc, units))})\z")  # 250mb -> 250 mb
    exceptions = "|".join(
        rf"(?<=\A{esc(''.join(parts[:i]))}){esc(parts[i])}(?={esc(''.join(parts[i + 1:]))}\z)"
        for parts in split.values() for i in range(1, len(parts)))
    dashes = {chr(k): v for k, v in clean._DASHES.items()}
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "NFC"},
        *(_replace(a, b) for a, b in {**_QUOTES, **dashes, "…": "..."}.items()),
        _replace(r"\s*\n\s*", " \n ", regex=True),
        {"type": "Lowercase"},
        _replace(rf"\A(?:[^\S\n]*[\S\n]){{{max_chars}}}\K[\s\S]*", "", regex=True),
    ]}
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [
        _split(r"[^\S\n]+", "Removed"),
        _split(clean._PUNCT.pattern, "Isolated"),
        _split(affix, "Isolated"),
        _split(affix, "Isolated"),  # spaCy strips affixes repeatedly: `end.'` -> end . '
        _split(exceptions, "Isolated"),
    ]}
    return {"normalizer": normalizer, "pre_tokenizer": pre_tokenizer}
