"""Is a raw target text fit to train on? Checked before any model loads or trains.

Errors (a `ValueError` naming the file): a file that does not exist or has a format the
readers would take for plain text, a language code spaCy has no rule-based tokenizer
for, a text with no sentence (empty or whitespace-only), fewer sentences than the run's
budget needs. Warnings (returned with their figures): a text that is mostly in the
source language (by the stopwords of the two languages that the other does not share),
or mostly in another script than the target language's.
"""
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Optional

import spacy
from spacy.tokenizer import Tokenizer

from spacy_maral.corpora.target_path import CONLL_SUFFIXES, check_target_path
from spacy_maral.corpora.target_text import iter_target_docs

# the scripts a language's letters are written in, for the languages not written in
# Latin letters (every other code: Latin); the first word of a letter's Unicode name
SCRIPTS: Dict[str, FrozenSet[str]] = {
    **{lang: frozenset({"CYRILLIC"}) for lang in ("ru", "uk", "bg", "mk", "be", "kk", "ky", "tt", "mn")},
    "sr": frozenset({"CYRILLIC", "LATIN"}),
    "el": frozenset({"GREEK"}),
    **{lang: frozenset({"ARABIC"}) for lang in ("ar", "fa", "ur", "ps")},
    **{lang: frozenset({"HEBREW"}) for lang in ("he", "yi")},
    **{lang: frozenset({"DEVANAGARI"}) for lang in ("hi", "mr", "ne", "sa")},
    **{lang: frozenset({"BENGALI"}) for lang in ("bn", "as")},
    "gu": frozenset({"GUJARATI"}), "pa": frozenset({"GURMUKHI"}), "ta": frozenset({"TAMIL"}),
    "te": frozenset({"TELUGU"}), "kn": frozenset({"KANNADA"}), "ml": frozenset({"MALAYALAM"}),
    "si": frozenset({"SINHALA"}), "th": frozenset({"THAI"}), "ko": frozenset({"HANGUL"}),
    "ja": frozenset({"CJK", "HIRAGANA", "KATAKANA"}), "zh": frozenset({"CJK"}),
    "hy": frozenset({"ARMENIAN"}), "ka": frozenset({"GEORGIAN"}), "am": frozenset({"ETHIOPIC"}),
}
LATIN = frozenset({"LATIN"})
# a warning when more than this share of the sentences (or of the letters) is off
WARN_SHARE = 0.5
# sentences read for the language and script figures (the count reads every line)
SAMPLE = 2000
WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class TextReport:
    """What the check found in one target text.

    path (Path): the text.
    lang (str): its language code.
    sentences (int): its non-empty sentences.
    source_share (Optional[float]): of the sampled sentences with stopwords of either
        language, the share with more of the source language's; None without a source
        language or without stopword lists.
    script_share (Optional[float]): of the sampled letters, the share in the target
        language's scripts; None for `xx`.
    warnings (List[str]): one line each, with its figure.
    """

    path: Path
    lang: str
    sentences: int
    source_share: Optional[float] = None
    script_share: Optional[float] = None
    warnings: List[str] = field(default_factory=list)


def language_rules(lang: str) -> Tokenizer:
    """spaCy's rule-based tokenizer of `lang` (that of `spacy.blank(lang)`): the one place
    that says whether a language code can be given tokenizer rules.

    lang (str): a spaCy language code, e.g. "fi".
    RETURNS (Tokenizer): the tokenizer whose rules (prefixes, suffixes, infixes,
        exceptions) the language's text is split by.
    RAISES ValueError: an unknown code, or a language whose tokenizer is not rule-based
        (or needs a package that is not installed: ja, ko, th, vi).
    """
    try:
        lang_class = spacy.util.get_lang_class(lang)
    except (ImportError, KeyError) as err:
        raise ValueError(
            f"unknown language code {lang!r}: spaCy has no language of that code "
            "(a two-letter ISO 639-1 code such as de, fi, es; xx for rules shared by every language)"
        ) from err
    try:
        tokenizer = lang_class().tokenizer
    except ImportError as err:  # spaCy knows the language; its tokenizer needs a segmenter package
        needs = str(err).strip().split("\n")[0]
        raise ValueError(
            f"language {lang!r}: spaCy's tokenizer for it is not rule-based ({needs}); the xx pipeline can't take its rules"
        ) from err
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(
            f"language {lang!r}: spaCy's tokenizer for it is {type(tokenizer).__name__}, not rule-based; "
            "the xx pipeline can't take its rules"
        )
    return tokenizer


def target_sentences(path: Path) -> Iterator[str]:
    """The non-empty sentences of a target text, as text: plain text (one a line), a
    CoNLL-style file (its tokens joined by spaces) or .spacy.

    path (Path): the text.
    """
    from spacy_maral.corpora.lines import decoded_lines

    if path.is_dir() or path.suffix.lower() == ".spacy" or path.suffix.lower() in CONLL_SUFFIXES:
        nlp = spacy.blank("xx")
        for doc in iter_target_docs(path, nlp, gold_tokens=True):
            if doc.text.strip():
                yield doc.text
        return
    for _, line in decoded_lines(path):
        if line.strip():
            yield line.strip()


def check_target_text(
    path: Path, lang: str, source_lang: Optional[str] = None, min_sentences: int = 0
) -> TextReport:
    """Check a raw target text before any model loads: errors raise, doubts are warnings.

    path (Path): the text (plain text, CoNLL-style or .spacy).
    lang (str): its language code (the tokenizer rules it gets).
    source_lang (Optional[str]): the labelled source language, for the share of source
        sentences.
    min_sentences (int): the fewest sentences the run needs (its budget of target
        sentences); 0 = any.
    RETURNS (TextReport): the figures and the warnings.
    RAISES (ValueError): a missing or unreadable file, an unknown language code, an
        empty or whitespace-only text, fewer sentences than min_sentences.
    """
    path = Path(path)
    language_rules(lang)
    check_target_path(path)
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(f"{path}: the target text is empty")
    n = 0
    sample: List[str] = []
    for text in target_sentences(path):
        n += 1
        if len(sample) < SAMPLE:
            sample.append(text)
    if n == 0:
        raise ValueError(f"{path}: the target text has no sentence (only empty or whitespace lines)")
    if n < min_sentences:
        raise ValueError(
            f"{path}: {n} sentences, fewer than the {min_sentences} the run's budget needs "
            "(give more text, or lower the target sentences: the workflow's target_docs)"
        )
    report = TextReport(path=path, lang=lang, sentences=n)
    if source_lang and source_lang != lang:
        report.source_share = source_share(sample, lang, source_lang)
        if report.source_share is not None and report.source_share > WARN_SHARE:
            report.warnings.append(
                f"{path}: {report.source_share:.0%} of the sentences read have more {source_lang}-only "
                f"than {lang}-only stopwords: is this {lang} text, and target_lang right?"
            )
    report.script_share = script_share(sample, lang)
    if report.script_share is not None and report.script_share < 1 - WARN_SHARE:
        expected = "/".join(sorted(SCRIPTS.get(lang, LATIN))).lower()
        report.warnings.append(
            f"{path}: only {report.script_share:.0%} of the letters read are in the {expected} "
            f"script of {lang!r}: is target_lang right for this text?"
        )
    return report


def stop_words(lang: str) -> FrozenSet[str]:
    """spaCy's stopwords of `lang` (empty where it has none)."""
    try:
        return frozenset(w.lower() for w in spacy.blank(lang).Defaults.stop_words)
    except (ImportError, KeyError):
        return frozenset()


def source_share(sentences: List[str], lang: str, source_lang: str) -> Optional[float]:
    """Of the sentences with a stopword of only one of the two languages, the share with
    more of the source language's than of the target's.

    sentences (List[str]): the sentences.
    lang (str): the target language.
    source_lang (str): the source language.
    RETURNS (Optional[float]): the share; None if either language has no stopword list or
        no sentence holds one of them.
    """
    target, source = stop_words(lang), stop_words(source_lang)
    if not target or not source:
        return None
    only_target, only_source = target - source, source - target
    voted = source_votes = 0
    for text in sentences:
        words = [w.lower() for w in WORD.findall(text)]
        n_source = sum(w in only_source for w in words)
        n_target = sum(w in only_target for w in words)
        if n_source or n_target:
            voted += 1
            source_votes += n_source > n_target
    return source_votes / voted if voted else None


def script_share(sentences: List[str], lang: str) -> Optional[float]:
    """The share of the letters written in the scripts of `lang` (None for xx or no letters).

    sentences (List[str]): the sentences.
    lang (str): the language code.
    """
    if lang == "xx":
        return None
    expected = SCRIPTS.get(lang, LATIN)
    letters = inside = 0
    for text in sentences:
        for ch in text:
            if ch.isalpha():
                letters += 1
                inside += unicodedata.name(ch, "?").split(" ")[0] in expected
    return inside / letters if letters else None
