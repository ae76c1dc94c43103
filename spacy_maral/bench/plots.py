"""The benchmark's pictures (matplotlib, PNG): training curves, class-mean cosines, a 2-D
projection of entity span vectors, and pseudo-label F1 per epoch."""
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.evaluation.margins import labelled_span_vectors


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(plt, fig, axes, output: Path) -> Path:
    """Grid and legend on each axis, then save the figure to `output` and close it."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def read_jsonl(path: Path) -> List[dict]:
    """The records of a JSON-lines file ([] if it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines() if line.strip()]


def plot_training_curves(logs: Dict[str, Path], output: Path) -> Optional[Path]:
    """Loss and source-dev entity F1 against the step, one line per training run.

    logs (Dict[str, Path]): run name -> spaCy ConsoleLogger.v3 JSONL file.
    output (Path): the PNG to write.
    """
    plt = _pyplot()
    fig, (ax_loss, ax_f1) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = False
    for name, path in logs.items():
        rows = read_jsonl(path)
        if not rows:
            continue
        steps = [r["step"] for r in rows]
        loss = [sum(v for k, v in r.get("losses", {}).items() if k != "transformer") for r in rows]
        # spaCy's ConsoleLogger.v3 writes the dev scores in percent under "scores"
        f1 = [float((r.get("scores") or {}).get("ents_f") or 0.0) for r in rows]
        ax_loss.plot(steps[1:], loss[1:], marker=".", label=name)
        ax_f1.plot(steps, f1, marker=".", label=name)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax_loss.set(title="training loss (sum between evaluations; log scale)", xlabel="step", ylabel="loss", yscale="log")
    ax_f1.set(title="source dev entity F1", xlabel="step", ylabel="F1")
    return _finish(plt, fig, (ax_loss, ax_f1), output)


def plot_cosines(geometries: Dict[str, Dict[str, Dict[str, object]]], output: Path) -> Path:
    """Heatmaps of the pairwise cosines of class mean directions: one row per kind of
    geometry, one column per pipeline.

    geometries (Dict[str, Dict[str, Dict[str, object]]]): kind (e.g. "span vectors",
        "logit state") -> pipeline name -> a geometry of spacy_maral.evaluation.margins
        (span_class_geometry, class_mean_geometry).
    output (Path): the PNG to write.
    """
    plt = _pyplot()
    names = list(dict.fromkeys(n for row in geometries.values() for n in row))
    fig, axes = plt.subplots(len(geometries), len(names), figsize=(4.8 * len(names), 4.2 * len(geometries)), squeeze=False)
    im = None
    for r, (kind, row) in enumerate(geometries.items()):
        for ax, name in zip(axes[r], names):
            if name not in row:
                ax.axis("off")
                continue
            geo = row[name]
            # one class order for every panel: O first, then the entity labels sorted
            order = sorted(range(len(geo["classes"])), key=lambda i: (i != 0, geo["classes"][i]))
            cos = numpy.asarray(geo["cosines"])[numpy.ix_(order, order)]
            classes = [geo["classes"][i] for i in order]
            im = ax.imshow(cos, vmin=-1, vmax=1, cmap="coolwarm")
            ax.set_xticks(range(len(classes)), classes)
            ax.set_yticks(range(len(classes)), classes)
            for i in range(len(classes)):
                for j in range(len(classes)):
                    ax.text(j, i, f"{cos[i, j]:.2f}", ha="center", va="center", fontsize=8)
            ax.set_title(f"{name}, {kind}\nsmallest angle {geo['min_angle_deg']:.1f} deg", fontsize=10)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="cosine of class means")
    fig.savefig(output, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return output


def entity_vectors(nlp: Language, docs: Sequence[Doc]) -> Tuple[numpy.ndarray, List[str]]:
    """The span vectors z of the gold entities of `docs` (those within max_width)."""
    z, labels, classes = labelled_span_vectors(nlp, docs)
    entity = labels > 0
    return z[entity], [classes[i] for i in labels[entity]]


def plot_projection(
    pipelines: Dict[str, Language], source_docs: Sequence[Doc], target_docs: Sequence[Doc], output: Path
) -> Path:
    """PCA (scikit-learn) of source and target gold entity span vectors, coloured by class,
    one panel per pipeline; circles: source language, crosses: target language."""
    from sklearn.decomposition import PCA

    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pipelines), figsize=(5.5 * len(pipelines), 5), squeeze=False)
    colours = {"PER": "tab:purple", "ORG": "tab:cyan", "LOC": "tab:orange", "MISC": "tab:olive"}
    for ax, (name, nlp) in zip(axes[0], pipelines.items()):
        zs, zs_labels = entity_vectors(nlp, source_docs)
        zt, zt_labels = entity_vectors(nlp, target_docs)
        if len(zs) + len(zt) < 3:
            ax.set_title(f"{name}: too few entities")
            continue
        pca = PCA(n_components=2, random_state=0).fit(numpy.concatenate([a for a in (zs, zt) if len(a)]))
        for vecs, labels, marker, lang in ((zs, zs_labels, "o", "source"), (zt, zt_labels, "x", "target")):
            if not len(vecs):
                continue
            xy = pca.transform(vecs)
            for label in sorted(set(labels)):
                mask = numpy.asarray(labels) == label
                ax.scatter(xy[mask, 0], xy[mask, 1], s=10, marker=marker, alpha=0.55,
                           color=colours.get(label), label=f"{label} ({lang})")
        ax.set_title(f"{name}: PCA of entity span vectors")
        ax.legend(fontsize=7, markerscale=1.5, ncol=2)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def plot_pseudo_label_f1(diagnostics: Dict[str, Path], output: Path) -> Optional[Path]:
    """Pseudo-label P/R/F1 against the target corpus's tags per epoch (diagnostics only)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for name, path in diagnostics.items():
        rows = [r for r in read_jsonl(path) if r.get("pseudo_label_prf")]
        if not rows:
            continue
        epochs = [r["epoch_completed"] for r in rows]
        ax.plot(epochs, [100 * r["pseudo_label_prf"]["f"] for r in rows], marker="o", label=f"{name} F1")
        ax.plot(epochs, [100 * r["pseudo_label_prf"]["r"] for r in rows], ls="--", alpha=0.6, label=f"{name} R")
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set(title="pseudo-labels vs target tags (diagnostic only)", xlabel="epoch", ylabel="%")
    return _finish(plt, fig, (ax,), output)
