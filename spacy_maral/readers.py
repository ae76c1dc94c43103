"""The stage-2 training reader: source gold batches interleaved with target batches.

`spacy_maral.AdaptationCorpus.v1` is called by spaCy's training loop once per epoch
(set `[training] max_epochs = -1`, so spaCy neither caches nor reshuffles it). One
epoch is one pass over the (optionally subsampled) target corpus, in a fresh seeded
order; every group of `target_per_batch` target sentences is preceded by
`source_per_batch` source sentences, cycling through the shuffled source corpus. With
`[training.batcher] spacy.batch_by_sequence.v1` of size source_per_batch +
target_per_batch, each training step sees one source batch and one target batch.
"""
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Tuple, Union

import numpy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from spacy.training import Example
from spacy.vocab import Vocab

from .soft_labels import DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, TARGET_INDEX_KEY
from .tokenizer import language_tokenizer
from .util import registry


def docbin_paths(path: Union[str, Path]) -> List[Path]:
    """A .spacy file, or the sorted .spacy files of a directory (pseudo-label shards)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".spacy")
        if not files:
            raise ValueError(f"{path} has no .spacy files")
        return files
    if not path.exists():
        raise ValueError(f"corpus file {path} does not exist")
    return [path]


def read_docbin(path: Path, nlp: Language) -> Iterator[Doc]:
    """Stream the docs of one .spacy file, in order; an error names the file when it is
    not a readable DocBin."""
    try:
        yield from DocBin().from_disk(path).get_docs(nlp.vocab)
    except (ValueError, OSError, KeyError, TypeError, IndexError) as err:
        raise ValueError(f"{path}: not a readable .spacy (DocBin) file ({type(err).__name__}: {err})") from err


def read_docs(path: Union[str, Path], nlp: Language) -> Iterator[Doc]:
    """Stream the docs of a .spacy file or directory, in order."""
    for file in docbin_paths(path):
        yield from read_docbin(file, nlp)


def target_subset(n_docs: int, max_docs: int, seed: int) -> numpy.ndarray:
    """The indices of the target sentences used for adaptation (sorted).

    n_docs (int): sentences in the target corpus.
    max_docs (int): how many to use (0 = all).
    seed (int): random seed of the subsample.
    """
    if max_docs <= 0 or max_docs >= n_docs:
        return numpy.arange(n_docs)
    return numpy.sort(numpy.random.default_rng(seed).choice(n_docs, size=max_docs, replace=False))


def target_example(doc: Doc, index: int, nlp: Language) -> Example:
    """An Example for a pseudo-labelled target sentence.

    The reference keeps the soft labels (doc.spans["maral_pseudo"]) and the sentence
    index; it carries no entities, so nothing downstream can read target tags.
    """
    predicted = bare_copy(doc, nlp.vocab)
    reference = bare_copy(doc, nlp.vocab)
    if PSEUDO_KEY in doc.spans:
        group = doc.spans[PSEUDO_KEY]
        spans = [Span(reference, s.start, s.end, label=s.label_) for s in group]
        reference.spans[PSEUDO_KEY] = SpanGroup(reference, name=PSEUDO_KEY, spans=spans, attrs=dict(group.attrs))
    reference.user_data[TARGET_INDEX_KEY] = int(index)
    if DIAGNOSTIC_GOLD_KEY in doc.spans:
        # Read only by the adaptation diagnostics (pseudo-label P/R/F1), never by training.
        reference.user_data[DIAGNOSTIC_GOLD_KEY] = [(s.start, s.end, s.label_) for s in doc.spans[DIAGNOSTIC_GOLD_KEY]]
    return Example(predicted, reference)


def diagnostic_gold(example: Example, classes: List[str]) -> List[Tuple[int, int, int]]:
    """(start, end, class index) of the tags a target sentence happened to carry.

    For the adaptation diagnostics only; labels outside `classes` are left out.
    """
    tags = example.reference.user_data.get(DIAGNOSTIC_GOLD_KEY, [])
    return [(int(s), int(e), classes.index(label)) for s, e, label in tags if label in classes]


def is_target(example: Example) -> bool:
    """True for a target-language example made by target_example()."""
    return TARGET_INDEX_KEY in example.reference.user_data


def target_index(example: Example) -> int:
    return int(example.reference.user_data[TARGET_INDEX_KEY])


@registry.readers("spacy_maral.AdaptationCorpus.v1")
def create_adaptation_corpus(
    source: Path,
    target: Path,
    source_per_batch: int = 8,
    target_per_batch: int = 8,
    max_target_docs: int = 0,
    seed: int = 0,
    gold_preproc: bool = True,
    source_lang: Optional[str] = None,
) -> Callable[[Language], Iterable[Example]]:
    """Reader of source gold + pseudo-labelled target examples for stage 2.

    source (Path): source-language .spacy corpus with gold entities.
    target (Path): pseudo-labelled target corpus (.spacy file or a directory of shards
        written by `python -m spacy_maral pseudo-label`).
    source_per_batch (int): source sentences before every target group.
    target_per_batch (int): target sentences per group.
    max_target_docs (int): use a seeded random subset of this many target sentences
        (0 = all); scales an epoch to a CPU budget without removing any part of the method.
    seed (int): random seed of the order and the subset.
    gold_preproc (bool): train on the source corpus's own tokens (True), or on the
        tokenization of its raw text (False, as spaCy's Corpus does), the gold entities
        projected by spaCy's alignment. Target sentences keep the tokens the teacher gave
        them when it pseudo-labelled the raw text.
    source_lang (Optional[str]): with gold_preproc false, tokenize the source text with
        this language's rules (spacy_maral.tokenizer.v1; e.g. "en", as the teacher was
        trained); None = the pipeline's own tokenizer.
    """
    if source_per_batch < 1 or target_per_batch < 1:
        raise ValueError("source_per_batch and target_per_batch must be >= 1")
    state = {"epoch": 0}

    def source_tokenizer(nlp: Language) -> Optional[Callable[[str], Doc]]:
        if gold_preproc:
            return None
        return language_tokenizer(nlp, source_lang) if source_lang else nlp.make_doc

    def read(nlp: Language) -> Iterator[Example]:
        tokenize = source_tokenizer(nlp)
        source_docs = list(read_docs(source, nlp))
        target_docs = list(read_docs(target, nlp))
        if not source_docs:
            raise ValueError(f"the source corpus {source} is empty")
        if not target_docs:
            raise ValueError(f"the target corpus {target} is empty")
        subset = target_subset(len(target_docs), max_target_docs, seed)
        rng = numpy.random.default_rng(seed + 1000 * state["epoch"])
        state["epoch"] += 1
        target_order = rng.permutation(subset.shape[0])
        source_order = rng.permutation(len(source_docs))
        cursor = 0
        for start in range(0, target_order.shape[0], target_per_batch):
            for _ in range(source_per_batch):
                yield source_example(source_docs[source_order[cursor % len(source_docs)]], nlp, tokenize)
                cursor += 1
            for j in target_order[start : start + target_per_batch]:
                k = int(j)  # position in the subset = the store's sentence index
                yield target_example(target_docs[int(subset[k])], k, nlp)

    def source_examples(nlp: Language) -> Iterator[Example]:
        """Every sentence of the source corpus once, in corpus order, tokenized as in
        training: what the class prior and class weights are counted over (an epoch of
        `read` holds only source_per_batch source sentences per target group)."""
        tokenize = source_tokenizer(nlp)
        for doc in read_docs(source, nlp):
            yield source_example(doc, nlp, tokenize)

    read.source_examples = source_examples  # type: ignore[attr-defined]
    return read


def source_example(doc: Doc, nlp: Language, tokenize: Optional[Callable[[str], Doc]] = None) -> Example:
    """A source example with the gold doc as reference.

    doc (Doc): the gold source sentence.
    nlp (Language): the pipeline (its vocab).
    tokenize (Optional[Callable[[str], Doc]]): tokenizer of the raw text; None = the
        gold tokens (gold_preproc).
    """
    predicted = bare_copy(doc, nlp.vocab) if tokenize is None else tokenize(doc.text)
    return Example(predicted, doc)


def bare_copy(doc: Doc, vocab: Vocab) -> Doc:
    """A new Doc with the same tokens (words and spaces) and no annotation."""
    return Doc(vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc])
