"""Calibration of the entity scores users threshold on.

`doc.spans["maral"].attrs["scores"]` holds, for every predicted entity, the probability
of its class. Calibrated, a score of 0.9 means that 90% of such entities are right (exact
characters and label). This module measures that (expected calibration error over equal
-width bins, the reliability diagram, precision above a score) and fits the one number
that fixes it, a score map (pipeline.decoding.ScoreMap): a temperature T on the decision
rule's logits, p = softmax(l / T), or Platt scaling of p's log-odds, sigmoid(a logit(p) +
b), increasing in p. Neither changes a prediction (the decoder's choices are made on the
uncalibrated probabilities); they only change the reported scores. It is fitted on a
gold dev set (a development language's, else the source language's) and stored in the
component's cfg; a student of a language other than the
dev set's gets OFF_DEV_LANGUAGE_TEMPERATURE instead, as maps fitted on another language
do not carry over (benchmarks/results/score-map-dev.json).
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy

from spacy_maral.pipeline.decoding import ScoreMap, class_log_odds, tempered_scores  # what calibration fits

#: How `calibrate` fits a score map: the temperature alone, or Platt's slope and offset on
#: the log-odds of the scores at T = 1.
SCORE_MAPS = ("temperature", "platt")

DEFAULT_BINS = 10
TEMPERATURE_GRID = numpy.exp(numpy.linspace(numpy.log(0.05), numpy.log(20.0), 400))
#: The temperature stored in a student adapted to a language other than its dev set's:
#: what the Spanish students were fitted to on Spanish dev (1.98 and 2.01). Fitted on a
#: language it was not adapted to, a student comes out underconfident on its own
#: (benchmarks/PROTOCOL.md, the student's score temperature off the development language).
OFF_DEV_LANGUAGE_TEMPERATURE = 2.0


def student_temperature(given: float, student_lang: Optional[str], dev_lang: Optional[str]) -> Optional[float]:
    """The temperature to store in a pipeline instead of fitting one on its dev set.

    given (float): a temperature the user gave (> 0), or 0 for the rule below.
    student_lang (Optional[str]): the language the student was adapted to, or None when
        the pipeline is not a student of a known language (a teacher, say).
    dev_lang (Optional[str]): the language of the dev set the temperature would be
        fitted on.
    RETURNS (Optional[float]): `given` when it is > 0; else None (fit on the dev set)
        when the student's language is the dev set's or unknown; else
        OFF_DEV_LANGUAGE_TEMPERATURE.
    """
    if given < 0:
        raise ValueError(f"must be > 0 (or 0: a fit, or OFF_DEV_LANGUAGE_TEMPERATURE for a student of another language), not {given:g}")
    if given > 0:
        return float(given)
    if student_lang is None or student_lang == dev_lang:
        return None
    return OFF_DEV_LANGUAGE_TEMPERATURE


def reliability(scores: Sequence[float], correct: Sequence[bool], n_bins: int = DEFAULT_BINS) -> Dict[str, object]:
    """Expected calibration error, reliability bins and precision at score thresholds.

    scores (Sequence[float]): the score of every predicted entity, in [0, 1].
    correct (Sequence[bool]): whether each entity is right (exact span and label).
    n_bins (int): equal-width score bins over [0, 1].
    RETURNS (dict): ece (sum over bins of |accuracy - mean score| * share of the
        entities in the bin), bins (lower, upper, count, mean score, accuracy), n, and
        precision_at_0.5 / precision_at_0.9 with the counts above those thresholds.
    """
    s = numpy.asarray(scores, dtype=numpy.float64)
    c = numpy.asarray(correct, dtype=numpy.float64)
    if s.shape != c.shape:
        raise ValueError(f"{s.shape[0]} scores but {c.shape[0]} correctness flags")
    edges = numpy.linspace(0.0, 1.0, n_bins + 1)
    # bin i holds scores in (edges[i], edges[i+1]]; a score of exactly 0 goes to bin 0
    index = numpy.clip(numpy.searchsorted(edges, s, side="left") - 1, 0, n_bins - 1)
    bins = []
    ece = 0.0
    for i in range(n_bins):
        in_bin = index == i
        n = int(in_bin.sum())
        mean_score = float(s[in_bin].mean()) if n else None
        accuracy = float(c[in_bin].mean()) if n else None
        if n:
            ece += abs(accuracy - mean_score) * n / s.shape[0]
        bins.append({"lower": float(edges[i]), "upper": float(edges[i + 1]), "count": n,
                     "mean_score": mean_score, "accuracy": accuracy})
    out: Dict[str, object] = {"n": int(s.shape[0]), "ece": float(ece) if s.shape[0] else None, "bins": bins}
    for threshold in (0.5, 0.9):
        above = s >= threshold
        out[f"precision_at_{threshold}"] = float(c[above].mean()) if above.any() else None
        out[f"count_at_{threshold}"] = int(above.sum())
    return out


def nothing_to_fit(correct: Sequence[bool]) -> bool:
    """Whether no map can be fitted: no entities, or all of them right (or all wrong),
    where the log loss only falls as the scores go to 1 (or 0) and has no minimum."""
    c = numpy.asarray(correct, dtype=bool)
    return c.shape[0] == 0 or bool(c.all()) or not c.any()


def fit_temperature(logits: numpy.ndarray, classes: numpy.ndarray, correct: Sequence[bool]) -> float:
    """The temperature that minimises the log loss of the entity scores against correctness.

    logits (numpy.ndarray): (n, C) the decision rule's logits of the predicted entities.
    classes (numpy.ndarray): (n,) the predicted class of each.
    correct (Sequence[bool]): whether each entity is right.
    RETURNS (float): T from a log-spaced grid over [0.05, 20]; 1.0 when there is nothing
        to fit: no entities, or all of them right (or all wrong), where the log loss only
        falls as T goes to 0 (or grows) and no temperature is best.
    """
    if nothing_to_fit(correct):
        return 1.0
    c = numpy.asarray(correct, dtype=numpy.float64)
    eps = 1e-7
    best, best_loss = 1.0, numpy.inf
    for t in TEMPERATURE_GRID:
        p = numpy.clip(tempered_scores(logits, classes, float(t)), eps, 1 - eps)
        loss = -(c * numpy.log(p) + (1 - c) * numpy.log(1 - p)).mean()
        if loss < best_loss:
            best, best_loss = float(t), loss
    return best


def fit_platt(log_odds: numpy.ndarray, correct: Sequence[bool]) -> Tuple[float, float]:
    """Platt's (slope, offset): sigmoid(slope * z + offset) of least log loss against
    Platt's smoothed targets, (n_right + 1) / (n_right + 2) for a right entity and
    1 / (n_wrong + 2) for a wrong one (scikit-learn's logistic regression, practically
    unpenalised). The smoothing keeps the map finite where the right and the wrong
    entities are separable (a handful of entities: plain log loss has no minimum there and
    maps every score to 0 or 1); on a dev set's entities it moves a target by 1 / (n + 2)
    (0.005 with 200 wrong entities).

    log_odds (numpy.ndarray): (n,) z, the log-odds of the entities' scores at T = 1
        (pipeline.decoding.class_log_odds).
    correct (Sequence[bool]): whether each entity is right.
    RETURNS (Tuple[float, float]): (1.0, 0.0), the scores as they are, when there is
        nothing to fit (no entities, all right or all wrong) or the fitted slope is not
        positive (a map that would reverse the scores' order).
    """
    from sklearn.linear_model import LogisticRegression

    if nothing_to_fit(correct):
        return 1.0, 0.0
    z = numpy.asarray(log_odds, dtype=numpy.float64)[:, None]
    right = numpy.asarray(correct, dtype=bool)
    n_right, n_wrong = int(right.sum()), int((~right).sum())
    target = numpy.where(right, (n_right + 1) / (n_right + 2), 1 / (n_wrong + 2))
    # a soft target t is the pair (label 1, weight t) and (label 0, weight 1 - t)
    labels = numpy.r_[numpy.ones(len(z), dtype=int), numpy.zeros(len(z), dtype=int)]
    model = LogisticRegression(C=1e6, max_iter=1000).fit(
        numpy.vstack([z, z]), labels, sample_weight=numpy.r_[target, 1 - target])
    slope, offset = float(model.coef_[0, 0]), float(model.intercept_[0])
    return (slope, offset) if slope > 0 else (1.0, 0.0)


@dataclass
class Calibration:
    """What calibrating a pipeline's scores on a dev set found.

    score_map (ScoreMap): the map to store.
    fitted (bool): the map was fitted on the dev set (not given, nor the off-language rule's).
    before (Dict[str, object]): the dev set's reliability under the pipeline's current map.
    after (Dict[str, object]): its reliability under `score_map`.
    """

    score_map: ScoreMap
    fitted: bool
    before: Dict[str, object]
    after: Dict[str, object]


def calibrate(
    logits: numpy.ndarray, classes: numpy.ndarray, correct: numpy.ndarray, current: ScoreMap, stored: Optional[float],
    method: str = "temperature",
) -> Calibration:
    """The score map to store for the entities of a dev set, and its calibration before
    and after.

    logits, classes, correct: the dev set's predicted entities (raw_text.entity_logits).
    current (ScoreMap): the pipeline's map now.
    stored (Optional[float]): a temperature to store as it is, with no Platt map (given,
        or student_temperature's rule); None fits a map.
    method (str): what to fit when stored is None, one of SCORE_MAPS: "temperature"
        (fit_temperature) or "platt" (fit_platt on the log-odds at T = 1); where Platt's
        fit finds no increasing map (a slope <= 0), the temperature is fitted instead.
    """
    if method not in SCORE_MAPS:
        raise ValueError(f"the score map must be one of {', '.join(SCORE_MAPS)}, not {method!r}")
    if stored is not None:
        score_map = ScoreMap(temperature=stored)
    else:
        platt = ScoreMap(1.0, *fit_platt(class_log_odds(logits, classes), correct)) if method == "platt" else ScoreMap()
        score_map = platt if platt.is_platt else ScoreMap(fit_temperature(logits, classes, correct))
    return Calibration(
        score_map=score_map, fitted=stored is None,
        before=reliability(current.scores(logits, classes), correct),
        after=reliability(score_map.scores(logits, classes), correct),
    )


def plot_reliability(curves: Dict[str, Dict[str, object]], path: Path, title: str = "Reliability of entity scores") -> Path:
    """A reliability diagram (accuracy against mean score per bin, one line a system).

    curves (Dict[str, dict]): name -> the output of `reliability`.
    path (Path): the PNG to write.
    title (str): the figure title.
    RETURNS (Path): path.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - matplotlib is in the dev/bench extras
        raise ValueError(
            "the reliability diagram needs matplotlib: spacy-maral's [bench] extra (pip install '.[bench]' in its clone)"
        ) from err
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    for name, rel in curves.items():
        bins = [b for b in rel["bins"] if b["count"]]  # type: ignore[index]
        xs = [b["mean_score"] for b in bins]
        ys = [b["accuracy"] for b in bins]
        ece = rel.get("ece")
        ax.plot(xs, ys, marker="o", label=f"{name} (ECE {ece:.3f}, n={rel['n']})" if ece is not None else name)
    ax.set_xlabel("entity score (mean in bin)")
    ax.set_ylabel("share of entities exactly right")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def stack_entity_logits(rows: List[Tuple[numpy.ndarray, int, bool]], n_classes: int) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """(logits, classes, correct) arrays from (logit row, class, correct) triples."""
    if not rows:
        return numpy.zeros((0, n_classes)), numpy.zeros(0, dtype=numpy.int64), numpy.zeros(0, dtype=bool)
    logits = numpy.stack([r[0] for r in rows]).astype(numpy.float64)
    classes = numpy.asarray([r[1] for r in rows], dtype=numpy.int64)
    correct = numpy.asarray([r[2] for r in rows], dtype=bool)
    return logits, classes, correct

