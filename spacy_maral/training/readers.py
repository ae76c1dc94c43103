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
from typing import Callable, Iterator, List, Optional

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example

from spacy_maral.adaptation.soft_labels import AGREE_ATTR, DIAGNOSTIC_GOLD_KEY, PSEUDO_KEY, TARGET_INDEX_KEY
from spacy_maral.corpora.docbin import bare_copy, read_docs
from spacy_maral.pipeline.tokenizer import language_tokenizer
from spacy_maral.util import registry


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


class AdaptationCorpus:
    """The stage-2 corpus: source gold sentences interleaved with pseudo-labelled target
    sentences. Called with the pipeline, it yields one epoch of training examples (a
    fresh seeded order each call); `source_examples` and `target_examples` give every
    source sentence and every target sentence of the subset once, for maral_ner's
    initialize (`[initialize.components.maral_ner] adaptation_corpus`).

    Registered as `spacy_maral.AdaptationCorpus.v1` (the class is the registered
    function: its arguments are the config keys):

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
    agreed_only (bool): use only the target sentences where the teachers of an ensemble
        found the same entities (pseudo-label --ensemble-from records it); the subset of
        max_target_docs is drawn from those.
    """

    def __init__(
        self,
        source: Path,
        target: Path,
        source_per_batch: int = 8,
        target_per_batch: int = 8,
        max_target_docs: int = 0,
        seed: int = 0,
        gold_preproc: bool = True,
        source_lang: Optional[str] = None,
        agreed_only: bool = False,
    ) -> None:
        if source_per_batch < 1 or target_per_batch < 1:
            raise ValueError("source_per_batch and target_per_batch must be >= 1")
        self.source = source
        self.target = target
        self.source_per_batch = source_per_batch
        self.target_per_batch = target_per_batch
        self.max_target_docs = max_target_docs
        self.seed = seed
        self.gold_preproc = gold_preproc
        self.source_lang = source_lang
        self.agreed_only = agreed_only
        self.epoch = 0

    def _source_tokenizer(self, nlp: Language) -> Optional[Callable[[str], Doc]]:
        if self.gold_preproc:
            return None
        return language_tokenizer(nlp, self.source_lang) if self.source_lang else nlp.make_doc

    def _read(self, path: Path, nlp: Language, what: str) -> List[Doc]:
        docs = list(read_docs(path, nlp))
        if not docs:
            raise ValueError(f"the {what} corpus {path} is empty")
        return docs

    def _target_docs(self, nlp: Language) -> List[Doc]:
        """The target sentences adaptation may use (all, or those the teachers agree on)."""
        docs = self._read(self.target, nlp, "target")
        if not self.agreed_only:
            return docs
        flags = [doc.spans[PSEUDO_KEY].attrs.get(AGREE_ATTR) if PSEUDO_KEY in doc.spans else None for doc in docs]
        if all(flag is None for flag in flags):
            raise ValueError(
                f"agreed_only: the target corpus {self.target} records no teachers' agreement; "
                "pseudo-label it with several teachers (pseudo-label --ensemble-from) or set agreed_only false"
            )
        agreed = [doc for doc, flag in zip(docs, flags) if flag is True]
        if not agreed:
            raise ValueError(f"agreed_only: in the target corpus {self.target} the teachers agree on no sentence")
        return agreed

    def __call__(self, nlp: Language) -> Iterator[Example]:
        """One epoch: every target sentence of the subset once, in a fresh seeded order,
        each group of target_per_batch preceded by source_per_batch source sentences."""
        tokenize = self._source_tokenizer(nlp)
        source_docs = self._read(self.source, nlp, "source")
        target_docs = self._target_docs(nlp)
        subset = target_subset(len(target_docs), self.max_target_docs, self.seed)
        rng = numpy.random.default_rng(self.seed + 1000 * self.epoch)
        self.epoch += 1
        target_order = rng.permutation(subset.shape[0])
        source_order = rng.permutation(len(source_docs))
        cursor = 0
        for start in range(0, target_order.shape[0], self.target_per_batch):
            for _ in range(self.source_per_batch):
                yield source_example(source_docs[source_order[cursor % len(source_docs)]], nlp, tokenize)
                cursor += 1
            for j in target_order[start : start + self.target_per_batch]:
                k = int(j)  # position in the subset = the store's sentence index
                yield target_example(target_docs[int(subset[k])], k, nlp)

    def source_examples(self, nlp: Language) -> Iterator[Example]:
        """Every sentence of the source corpus once, in corpus order, tokenized as in
        training: what the class prior and class weights are counted over (an epoch
        holds only source_per_batch source sentences per target group)."""
        tokenize = self._source_tokenizer(nlp)
        for doc in read_docs(self.source, nlp):
            yield source_example(doc, nlp, tokenize)

    def target_examples(self, nlp: Language) -> Iterator[Example]:
        """Every target sentence of the subset once, by its index in the soft-label store
        (0..n-1): what the store is built from."""
        target_docs = self._target_docs(nlp)
        subset = target_subset(len(target_docs), self.max_target_docs, self.seed)
        for k, i in enumerate(subset.tolist()):
            yield target_example(target_docs[i], k, nlp)


# The class itself is the registered reader: its arguments are the config keys.
registry.readers.register("spacy_maral.AdaptationCorpus.v1", func=AdaptationCorpus)


def source_example(doc: Doc, nlp: Language, tokenize: Optional[Callable[[str], Doc]] = None) -> Example:
    """A source example with the gold doc as reference.

    doc (Doc): the gold source sentence.
    nlp (Language): the pipeline (its vocab).
    tokenize (Optional[Callable[[str], Doc]]): tokenizer of the raw text; None = the
        gold tokens (gold_preproc).
    """
    predicted = bare_copy(doc, nlp.vocab) if tokenize is None else tokenize(doc.text)
    return Example(predicted, doc)
