"""Evaluation reports: a metrics table for several pipelines, and a displaCy page.

spaCy's `spacy evaluate --displacy-path` only draws components named `ner`, without
confidence scores. `render_predictions` draws the entities of any pipeline, each
labelled with its probability from `doc.spans[spans_key].attrs["scores"]`.
"""
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from spacy import displacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from wasabi import table

from spacy_maral.corpora.docbin import bare_copy
from spacy_maral.fileio import atomic_write_text
from spacy_maral.pipeline.entity_scores import entity_scores, scores_key

# displaCy's default entity colours, extended with fallbacks for other labels
_COLOURS = {"PER": "#aa9cfc", "ORG": "#7aecec", "LOC": "#ff9561", "MISC": "#e4e7d2"}
_FALLBACK = ["#bfeeb7", "#feca74", "#c887fb", "#9cc9cc", "#ffeb80", "#ff8197"]


def evaluate_pipeline(nlp: Language, docs: Sequence[Doc], batch_size: int = 64) -> Dict[str, object]:
    """Entity-level scores of `nlp` against gold `docs` (spaCy's NER scorer).

    nlp (Language): the pipeline to evaluate.
    docs (Sequence[Doc]): gold docs (entities in doc.ents).
    batch_size (int): docs per nlp.pipe batch.
    RETURNS (dict): ents_p, ents_r, ents_f, ents_per_type, speed (words/second).
    """
    examples = [Example(bare_copy(doc, nlp.vocab), doc) for doc in docs]
    scores = nlp.evaluate(examples, batch_size=batch_size)
    keep = ("ents_p", "ents_r", "ents_f", "ents_per_type", "speed")
    return {k: scores[k] for k in keep if k in scores}


def format_table(results: Dict[str, Dict[str, object]]) -> str:
    """A text table: one row per system, overall P/R/F1 then F1 per entity type."""
    types = sorted({t for r in results.values() for t in (r.get("ents_per_type") or {})})
    header = ["system", "P", "R", "F1"] + [f"F1 {t}" for t in types]
    rows = []
    for name, r in results.items():
        per_type = r.get("ents_per_type") or {}
        row = [name] + [f"{100 * float(r.get(k) or 0.0):.2f}" for k in ("ents_p", "ents_r", "ents_f")]
        row += [f"{100 * per_type[t]['f']:.2f}" if t in per_type else "-" for t in types]
        rows.append(row)
    return table(rows, header=header, divider=True, aligns=["l"] + ["r"] * (len(header) - 1)).strip("\n")


def format_quality_table(results: Dict[str, Dict[str, object]]) -> str:
    """A text table of raw-text results: unreachable gold entities (boundary inside a
    token / wider than max_width / bounded by characters that are not text), the recall
    ceiling, and the calibration of the scores."""
    header = ["system", "gold ents", "misaligned", "too wide", "non-text", "recall ceiling", "ECE", "P@>=0.5 (n)", "P@>=0.9 (n)"]
    rows = []
    for name, r in results.items():
        u = r.get("unreachable") or {}
        c = r.get("calibration") or {}

        def at(t: float, c: dict = c) -> str:
            p = c.get(f"precision_at_{t}")
            return "-" if p is None else f"{100 * p:.2f} ({c.get(f'count_at_{t}')})"

        rows.append([
            name, u.get("entities", "-"), u.get("misaligned", "-"), u.get("too_wide", "-"), u.get("non_text", "-"),
            f"{100 * u['recall_ceiling']:.2f}" if "recall_ceiling" in u else "-",
            f"{c['ece']:.4f}" if c.get("ece") is not None else "-", at(0.5), at(0.9),
        ])
    return table(rows, header=header, divider=True, aligns=["l"] + ["r"] * (len(header) - 1)).strip("\n")


def render_predictions(
    nlp: Language,
    texts: Iterable[str],
    spans_key: Optional[str] = None,
    title: str = "spacy-maral predictions",
) -> str:
    """A standalone displaCy HTML page of the pipeline's entities with their scores.

    nlp (Language): the pipeline (its maral_ner writes doc.spans[spans_key]).
    texts (Iterable[str]): the sentences to draw.
    spans_key (Optional[str]): the SpanGroup with attrs["scores"]; default: the key of
        the pipeline's maral_ner, or doc.ents without scores if it has none.
    title (str): the page title.
    RETURNS (str): the HTML page.
    """
    if spans_key is None:
        spans_key = scores_key(nlp)
    pages: List[Dict[str, object]] = []
    colours: Dict[str, str] = {}
    for doc in nlp.pipe(texts):
        ents = []
        for ent, score in zip(doc.ents, entity_scores(doc, spans_key)):
            label = ent.label_ if score is None else f"{ent.label_} {float(score):.2f}"
            colours[label] = _COLOURS.get(ent.label_) or _FALLBACK[hash(ent.label_) % len(_FALLBACK)]
            ents.append({"start": ent.start_char, "end": ent.end_char, "label": label})
        pages.append({"text": doc.text, "ents": ents, "title": None})
    body = displacy.render(pages, style="ent", manual=True, page=False, options={"colors": colours})
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title></head>\n<body style=\"font-family: sans-serif; padding: 2em\">\n"
        f"<h2>{title}</h2>\n{body}\n</body></html>\n"
    )


def write_predictions_page(nlp: Language, texts: Iterable[str], path: Path, **kwargs) -> Path:
    """Render `render_predictions` to `path` (written atomically) and return the path."""
    path = Path(path)
    atomic_write_text(path, render_predictions(nlp, texts, **kwargs))
    return path
