"""A language's own tokenizer rules inside the multi-language (`xx`) pipeline.

spaCy's `xx` rules split every hyphenated word (`SPD-Fraktion` -> `SPD - Fraktion`) and
English clitics (`Merkel's`); the `de`, `es` and `nl` rule sets keep hyphenated
compounds whole, as the CoNLL annotations do (`en` splits them). `spacy_maral.tokenizer.v1` builds the
rules of `spacy.blank(lang)` with the pipeline's own vocab, so a packaged pipeline stays
`xx_maral_ner` while tokenizing its target language as that language's rules say. The
rules are written with the pipeline (`nlp.to_disk`) and read back on load.

```ini
[nlp.tokenizer]
@tokenizers = "spacy_maral.tokenizer.v1"
lang = "de"
```

Beyond the rules, the tokenizer (`MaralTokenizer`) makes each character that is not text
(controls, format characters...: spacy_maral.pipeline.nontext) a token of its own, so
that the words around it can still be entities, and a text that UTF-8 can't encode (a
lone surrogate, e.g. from bytes decoded with errors="surrogateescape") does not stop a
whole `nlp.pipe` stream: it is tokenized with U+FFFD in the place of each surrogate (the
offsets stay those of the text) and marked (`unencodable`), and maral_ner refuses that
document alone, through spaCy's error handler.
"""
import re
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, List, Optional, Tuple

from spacy.language import Language
from spacy.tokenizer import Tokenizer
from spacy.tokens import Doc

from spacy_maral.corpora.text_check import language_rules
from spacy_maral.pipeline.nontext import edge_re, split_off
from spacy_maral.util import registry

TOKENIZER_NAME = "spacy_maral.tokenizer.v1"
UNENCODABLE_KEY = "spacy_maral.unencodable"  # doc.user_data: [[offset, code point], ...] of the lone surrogates
SURROGATE = re.compile("[\ud800-\udfff]")


class MaralTokenizer(Tokenizer):
    """spaCy's rule-based Tokenizer (same arguments, serialization and pickling), whose
    Docs have each character that is not text as a token of its own, and that tokenizes
    a text UTF-8 can't encode with U+FFFD in the place of its lone surrogates, marked
    (see the module's docstring)."""

    def __call__(self, text: str) -> Doc:
        if not isinstance(text, str) or not edge_re().search(text):  # the common case: one regex search
            return super().__call__(text)
        surrogates = [m.start() for m in SURROGATE.finditer(text)]
        doc = super().__call__(SURROGATE.sub("\ufffd", text) if surrogates else text)
        split_non_text(doc, text)
        if surrogates:
            doc.user_data[UNENCODABLE_KEY] = [[i, ord(text[i])] for i in surrogates]
        return doc


def split_non_text(doc: Doc, text: str) -> None:
    """Split the tokens of `doc` that have characters that are not text (nontext.split_off,
    judged on `text`, the doc's text before surrogates were replaced: same offsets).

    doc (Doc): the tokenized doc.
    text (str): the original text.
    """
    cuts: List[Tuple[int, List[str]]] = []
    for token in doc:
        pieces = split_off(text[token.idx:token.idx + len(token)])
        if len(pieces) > 1:
            starts = [0]
            for piece in pieces:
                starts.append(starts[-1] + len(piece))
            cuts.append((token.i, [token.text[a:b] for a, b in zip(starts, starts[1:])]))
    if not cuts:
        return
    with doc.retokenize() as retokenizer:
        for i, orths in cuts:
            token = doc[i]
            retokenizer.split(token, orths, heads=[(token, k) for k in range(len(orths))])


def unencodable(doc: Doc) -> List[Tuple[int, int]]:
    """The (character offset, code point) of each lone surrogate the text of `doc` had
    (MaralTokenizer replaced them with U+FFFD); [] for a doc that had none."""
    return [(int(i), int(cp)) for i, cp in doc.user_data.get(UNENCODABLE_KEY, ())]


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
    """A MaralTokenizer on `nlp.vocab` with the rules of `spacy.blank(lang)`.

    nlp (Language): the pipeline whose vocab the tokens use.
    lang (str): the spaCy language code of the rules.
    RETURNS (Tokenizer): the tokenizer.
    """
    try:
        rules = language_rules(lang)
    except ValueError as err:
        raise ValueError(f"{TOKENIZER_NAME}: can't build the tokenizer: {err}") from err
    return MaralTokenizer(
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


def unencodable_error(doc: Doc, component: str, index: Optional[int] = None) -> Optional[ValueError]:
    """The error that refuses a doc whose text UTF-8 can't encode (unencodable), naming
    the document and where its lone surrogates were; None for any other doc.

    doc (Doc): the doc.
    component (str): the refusing component's name.
    index (Optional[int]): the doc's position in the stream the component received.
    """
    found = unencodable(doc)
    if not found:
        return None
    which = "the text" if index is None else f"the text at index {index} of the stream"
    where = ", ".join(f"U+{cp:04X} at character {i}" for i, cp in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    shown = doc.text[:80] + ("..." if len(doc.text) > 80 else "")
    return ValueError(
        f"{component}: {which} can't be encoded as UTF-8 (lone surrogate {where}), so it is not labelled: {shown!r} "
        "(shown with U+FFFD in their place). Repair the text, e.g. decode its bytes with errors='replace'."
    )


def refuse_unencodable(docs: Iterable[Doc], component: str) -> None:
    """Raise the unencodable_error of the first doc of `docs` that has one."""
    for doc in docs:
        err = unencodable_error(doc, component)
        if err is not None:
            raise err
