"""The margins the large-margin loss is for: geometry of the learned class means."""
from typing import Dict, List

import numpy
from spacy.language import Language

from .component import MaralNER
from .model import get_span_head


def class_mean_geometry(nlp: Language) -> Dict[str, object]:
    """Pairwise cosines of the class mean directions mu_c of a pipeline's maral_ner.

    nlp (Language): a pipeline with a trained maral_ner.
    RETURNS (Dict[str, object]): classes, the cosine matrix, the largest cosine and
        smallest angle (degrees) between two different classes, the same among entity
        classes only, the concentrations kappa, and the regular-simplex optimum
        -1 / (C - 1).
    """
    ner = next((pipe for _, pipe in nlp.pipeline if isinstance(pipe, MaralNER)), None)
    if ner is None:
        raise ValueError(f"the pipeline has no maral_ner (pipes: {nlp.pipe_names})")
    mu, kappa = get_span_head(ner.model).class_distributions()
    mu_np = mu.detach().cpu().numpy()
    cos = numpy.clip(mu_np @ mu_np.T, -1.0, 1.0)
    n = cos.shape[0]
    off = ~numpy.eye(n, dtype=bool)
    ent = off.copy()
    ent[0, :] = ent[:, 0] = False
    max_cos = float(cos[off].max())
    max_cos_ent = float(cos[ent].max()) if ent.any() else float("nan")
    return {
        "classes": list(ner.classes),
        "cosines": cos.round(4).tolist(),
        "max_cosine": round(max_cos, 4),
        "min_angle_deg": round(float(numpy.degrees(numpy.arccos(max_cos))), 2),
        "max_cosine_entities": round(max_cos_ent, 4),
        "min_angle_entities_deg": round(float(numpy.degrees(numpy.arccos(max_cos_ent))), 2),
        "mean_cosine": round(float(cos[off].mean()), 4),
        "kappa": [round(float(k), 2) for k in kappa.detach().cpu().numpy()],
        "simplex_cosine": round(-1.0 / (n - 1), 4),
    }


def format_cosines(geometry: Dict[str, object]) -> List[str]:
    """The cosine matrix as Markdown table lines."""
    classes = geometry["classes"]
    lines = ["| | " + " | ".join(classes) + " |", "|---" * (len(classes) + 1) + "|"]  # type: ignore[arg-type]
    for name, row in zip(classes, geometry["cosines"]):  # type: ignore[arg-type]
        lines.append(f"| {name} | " + " | ".join(f"{x:+.2f}" for x in row) + " |")
    return lines
