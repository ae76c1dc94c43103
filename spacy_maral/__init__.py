"""spacy-maral: large-margin cross-lingual NER (MARAL) as a spaCy pipeline component.

Importing the package registers the `maral_ner` and `maral_mlm` factories and the
registered functions; spaCy also finds them through the package's entry points, without
an import. The subpackages, layers listed lowest first (a module imports only its own
layer and those listed before it; docs/architecture.md):

- `corpora`: CoNLL and WikiANN reading and writing, target text, detokenization;
- `ml`: the span model (span enumeration, vMF classes, the reweighted loss, decoding);
- `adaptation`: stage 2's progressive adaptation, the state the student's maral_ner holds;
- `pipeline`: the `maral_ner` and `maral_mlm` components, decoding of documents, tokenizer rules;
- `evaluation`: raw-text scoring, calibration, the guard, margins, reports;
- `inference`: engines that run a pipeline over a corpus (local, processes, Ray),
  `annotate` and the teacher's pseudo-labelling;
- `training`: the stage-2 reader, training callbacks, weight averaging;
- `workflow`: commands, trainings per seed and languages run as child processes;
- `encoders`: the offline build of multilingual-e5-small;
- `cli`: the `python -m spacy_maral` commands;
- `bench`: the benchmark workflow's measurements and report (`python -m spacy_maral.bench`);

and the shared helpers below them all: `util` (registry, logger, the commands' printer),
`fileio`, `threads`, `prf`, `about`.
"""
from spacy_maral.about import __version__
from spacy_maral.adaptation import progressive  # noqa: F401  (registrations)
from spacy_maral.ml import loss, pooling, span_ner  # noqa: F401  (registrations)
from spacy_maral.pipeline import encoder_runtime, maral_mlm, subwords, tokenizer  # noqa: F401  (registrations)
from spacy_maral.pipeline.maral_ner import MaralNER, make_maral_ner
from spacy_maral.training import callbacks, readers  # noqa: F401  (registrations)

__all__ = ["MaralNER", "make_maral_ner", "__version__"]
