"""A language's own tokenizer rules inside the multi-language (`xx`) pipeline.

spaCy's `xx` rules split every hyphenated word (`SPD-Fraktion` -> `SPD - Fraktion`) and
English clitics (`Merkel's`); the `de`, `es`, `nl` and `en` rule sets keep hyphenated
compounds whole, as the CoNLL annotations do. `spacy_maral.tokenizer.v1` builds the
rules of `spacy.blank(lang)` with the pipeline's own vocab, so a packaged pipeline stays
`xx_maral_ner` while tokenizing its target language as that language's rules say. The
rules are written with the pipeline (`nlp.to_disk`) and read back on load.

```ini
[nlp.tokenizer]
@tokenizers = "spacy_maral.tokenizer.v1"
lang = "de"
```
"""
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

import spacy
from spacy.language import Language
from spacy.tokenizer import Tokenizer

from spacy_maral.util import registry

TOKENIZER_NAME = "spacy_maral.tokenizer.v1"


@registry.tokenizers(TOKENIZER_NAME)
def create_language_tokenizer(lang: str = "xx") -> Callable[[Language], Tokenizer]:
    """The tokenizer rules of spaCy's blank pipeline for `lang`, on the pipeline's vocab.

    lang (str): a spaCy language code ("de", "es", "en", "xx", ...) whose prefix,
        suffix and infix patterns, special cases, token_match and url_match are used.
        Languages whose spaCy tokenizer is not rule-based (e.g. "zh", "ja", "th") are
        refused with an error.
    RETURNS (Callable[[Language], Tokenizer]): the tokenizer factory spaCy calls.
    """

    def make_tokenizer(nlp: Language) -> Tokenizer:
        return language_tokenizer(nlp, lang)

    return make_tokenizer


def language_tokenizer(nlp: Language, lang: str) -> Tokenizer:
    """A Tokenizer on `nlp.vocab` with the rules of `spacy.blank(lang)`.

    nlp (Language): the pipeline whose vocab the tokens use.
    lang (str): the spaCy language code of the rules.
    RETURNS (Tokenizer): the tokenizer.
    """
    try:
        rules = spacy.blank(lang).tokenizer
    except (ImportError, KeyError) as err:
        raise ValueError(f"{TOKENIZER_NAME}: can't build the tokenizer of language {lang!r}: {err}") from err
    if not isinstance(rules, Tokenizer):
        raise ValueError(
            f"{TOKENIZER_NAME}: spaCy's tokenizer for {lang!r} is {type(rules).__name__}, not a rule-based "
            "Tokenizer; use that language's own pipeline (spacy.blank) instead of the xx pipeline"
        )
    return Tokenizer(
        nlp.vocab,
        rules=rules.rules,
        prefix_search=rules.prefix_search,
        suffix_search=rules.suffix_search,
        infix_finditer=rules.infix_finditer,
        token_match=rules.token_match,
        url_match=rules.url_match,
    )


def tokenizer_lang(nlp: Language) -> str:
    """The language of the pipeline's tokenizer rules (its config's `lang`, else nlp.lang)."""
    block = nlp.config["nlp"].get("tokenizer", {})
    if block.get("@tokenizers") == TOKENIZER_NAME:
        return str(block.get("lang", "xx"))
    return nlp.lang


def set_tokenizer_lang(nlp: Language, lang: str) -> Language:
    """Give a loaded pipeline the tokenizer rules of `lang` (in place), in its config too,
    so that `nlp.to_disk` and `spacy package` keep them.

    nlp (Language): the pipeline.
    lang (str): the spaCy language code of the rules.
    RETURNS (Language): nlp.
    """
    nlp.tokenizer = language_tokenizer(nlp, lang)
    nlp.config["nlp"]["tokenizer"] = {"@tokenizers": TOKENIZER_NAME, "lang": lang}
    return nlp


@contextmanager
def tokenizer_rules(nlp: Language, lang: Optional[str]) -> Iterator[Language]:
    """Within the block, `nlp` tokenizes with the rules of `lang` (None: its own rules);
    its own tokenizer is put back afterwards, also when the block raises. The config is
    not touched: for a permanent change, use set_tokenizer_lang.

    nlp (Language): the pipeline.
    lang (Optional[str]): the spaCy language code of the rules, or None.
    """
    own = nlp.tokenizer
    if lang:
        nlp.tokenizer = language_tokenizer(nlp, lang)
    try:
        yield nlp
    finally:
        nlp.tokenizer = own
