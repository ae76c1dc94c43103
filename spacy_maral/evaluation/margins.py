"""The margins the large-margin loss is for: geometry of the learned class means."""
from typing import Dict, List, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.corpora.docbin import bare_copy
from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.maral_ner import find_maral_ner


def _geometry(classes: Sequence[str], mu: numpy.ndarray) -> Dict[str, object]:
    """Cosine matrix, largest cosine / smallest angle (all pairs and entity pairs), mean
    cosine and the regular-simplex optimum of unit class directions `mu` (C, d)."""
    cos = numpy.clip(mu @ mu.T, -1.0, 1.0)
    n = cos.shape[0]
    off = ~numpy.eye(n, dtype=bool)
    ent = off.copy()
    ent[0, :] = ent[:, 0] = False
    max_cos = float(cos[off].max())
    max_cos_ent = float(cos[ent].max()) if ent.any() else float("nan")
    return {
        "classes": list(classes),
        "cosines": cos.round(4).tolist(),
        "max_cosine": round(max_cos, 4),
        "min_angle_deg": round(float(numpy.degrees(numpy.arccos(max_cos))), 2),
        "max_cosine_entities": round(max_cos_ent, 4),
        "min_angle_entities_deg": round(float(numpy.degrees(numpy.arccos(max_cos_ent))), 2),
        "mean_cosine": round(float(cos[off].mean()), 4),
        "simplex_cosine": round(-1.0 / (n - 1), 4),
    }


def labelled_span_vectors(
    nlp: Language, docs: Sequence[Doc], batch_size: int = 64
) -> Tuple[numpy.ndarray, numpy.ndarray, List[str]]:
    """The span vectors z of every enumerated span of `docs`, with its gold class.

    A span's class is that of the entity of doc.ents with the same boundaries, else O
    (index 0); entities wider than max_width have no span.

    nlp (Language): a pipeline with a trained maral_ner.
    docs (Sequence[Doc]): gold-annotated docs; they are not modified (the pipeline runs
        on bare copies).
    batch_size (int): docs per forward pass.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray, List[str]]): z (n_spans, d) float64,
        class indices (n_spans,), and the class names (O first).
    """
    ner = find_maral_ner(nlp)
    classes = list(ner.classes)
    index = {label: i for i, label in enumerate(classes)}
    copies = list(nlp.pipe([bare_copy(d, nlp.vocab) for d in docs], disable=[ner.name], batch_size=batch_size))
    vectors: List[numpy.ndarray] = []
    labels: List[numpy.ndarray] = []
    for start in range(0, len(copies), batch_size):
        batch, gold = copies[start : start + batch_size], docs[start : start + batch_size]
        scores = ner.predict(batch)
        z = numpy.asarray(ner.model.ops.to_numpy(scores.vectors), dtype=numpy.float64)
        y = numpy.zeros(z.shape[0], dtype=numpy.int64)
        rows = {tuple(int(v) for v in row): i for i, row in enumerate(scores.spans)}
        for d, doc in enumerate(gold):
            for ent in doc.ents:
                i = rows.get((d, ent.start, ent.end))
                if i is not None and ent.label_ in index:
                    y[i] = index[ent.label_]
        vectors.append(z)
        labels.append(y)
    if not vectors or not sum(len(y) for y in labels):
        raise ValueError("labelled_span_vectors needs at least one doc with a token")
    return numpy.concatenate(vectors), numpy.concatenate(labels), classes


def span_class_geometry(nlp: Language, docs: Sequence[Doc], batch_size: int = 64) -> Dict[str, object]:
    """The geometry of the span vectors themselves: class means of z over gold-labelled spans.

    Every enumerated span of `docs` gets its gold class (labelled_span_vectors); the
    mean of the unit vectors z per class gives the direction (and the mean resultant
    length R, the concentration) of each class as the model actually places the spans.
    Unlike `class_mean_geometry`, this does not depend on the estimator state: within
    the first epoch the logits' class means still average in the random initial
    directions (docs/method.md, section 2), which are nearly orthogonal whatever the model
    learned.

    nlp (Language): a pipeline with a trained maral_ner.
    docs (Sequence[Doc]): gold-annotated docs (e.g. the source dev set).
    batch_size (int): docs per forward pass.
    RETURNS (Dict[str, object]): as `class_mean_geometry`, plus "resultant" (R per
        class) and "spans" (spans per class); a class without spans gets a zero direction.
    """
    z, labels, classes = labelled_span_vectors(nlp, docs, batch_size)
    sums = numpy.zeros((len(classes), z.shape[1]))
    numpy.add.at(sums, labels, z)
    counts = numpy.bincount(labels, minlength=len(classes)).astype(numpy.float64)
    means = sums / numpy.maximum(counts, 1.0)[:, None]
    resultant = numpy.linalg.norm(means, axis=1)
    mu = means / numpy.maximum(resultant, 1e-12)[:, None]
    geo = _geometry(classes, mu)
    geo["resultant"] = [round(float(r), 4) for r in resultant]
    geo["spans"] = [int(c) for c in counts]
    return geo


def class_mean_geometry(nlp: Language) -> Dict[str, object]:
    """Pairwise cosines of the class mean directions mu_c of a pipeline's maral_ner.

    nlp (Language): a pipeline with a trained maral_ner.
    RETURNS (Dict[str, object]): classes, the cosine matrix, the largest cosine and
        smallest angle (degrees) between two different classes, the same among entity
        classes only, the concentrations kappa, and the regular-simplex optimum
        -1 / (C - 1).

    These are the means the logits use. Within the first epoch of a run they still
    average in the random initial directions (nearly orthogonal in d = 64), so they can
    look well separated before the model has learned anything: `span_class_geometry`
    measures the span vectors themselves.
    """
    ner = find_maral_ner(nlp)
    mu, kappa = get_span_head(ner.model).class_distributions()
    geo = _geometry(ner.classes, mu.detach().cpu().numpy())
    geo["kappa"] = [round(float(k), 2) for k in kappa.detach().cpu().numpy()]
    return geo
