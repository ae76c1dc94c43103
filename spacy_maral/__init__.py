"""spacy-maral: large-margin cross-lingual NER (MARAL) as a spaCy pipeline component.

Importing the package registers the `maral_ner` and `maral_mlm` factories and the
registered functions; spaCy also finds them through the package's entry points, without
an import. The subpackages:

- `ml`: the span model (span enumeration, vMF classes, the reweighted loss);
- `pipeline`: the `maral_ner` and `maral_mlm` components, decoding, tokenizer rules;
- `training`: readers, training callbacks, pseudo-labelling and `stage2` (the student);
- `inference`: engines that run a pipeline over a corpus (local, processes, Ray) and
  `annotate`;
- `corpora`: CoNLL and WikiANN reading and writing, target text, detokenization;
- `evaluation`: raw-text scoring, calibration, the guard, margins, reports;
- `encoders`: the offline build of multilingual-e5-small;
- `bench`: the benchmark workflow's measurements and report;
- `cli`: the `python -m spacy_maral` commands.
"""
from spacy_maral.about import __version__
from spacy_maral.adaptation import progressive  # noqa: F401  (registrations)
from spacy_maral.ml import loss, pooling, span_ner  # noqa: F401  (registrations)
from spacy_maral.pipeline import encoder_runtime, maral_mlm, tokenizer  # noqa: F401  (registrations)
from spacy_maral.pipeline.maral_ner import MaralNER, make_maral_ner
from spacy_maral.training import callbacks, readers  # noqa: F401  (registrations)

__all__ = ["MaralNER", "make_maral_ner", "__version__"]
