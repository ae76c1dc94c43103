"""spacy-maral: large-margin cross-lingual NER (MARAL) as a spaCy pipeline component.

spaCy finds the `maral_ner` and `maral_mlm` factories and the registered functions
through the package's entry points (setup.py), without an import; importing the package
imports nothing heavy, so that `python -m spacy_maral --help` and the option parser's
refusals answer at once. `spacy_maral.MaralNER` and `spacy_maral.make_maral_ner` are
imported on first use. The subpackages, layers listed lowest first (a module imports only its own
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
`fileio`, `fingerprint`, `threads`, `prf`, `about`.
"""
from typing import Any

from spacy_maral.about import __version__

__all__ = ["MaralNER", "make_maral_ner", "__version__"]


def __getattr__(name: str) -> Any:
    """MaralNER and make_maral_ner, imported (with torch and spaCy) on first use."""
    if name in ("MaralNER", "make_maral_ner"):
        from spacy_maral.pipeline import maral_ner

        return getattr(maral_ner, name)
    raise AttributeError(f"module 'spacy_maral' has no attribute {name!r}")
