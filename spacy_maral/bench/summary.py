"""Collect a benchmark run (trained systems, timings, speed, margins, plots) into
benchmark.json and a BENCHMARKS.md page."""
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.bench.machine import machine_description
from spacy_maral.bench.plots import plot_cosines, plot_projection, plot_pseudo_label_f1, plot_training_curves, read_jsonl
from spacy_maral.bench.speed import words_per_second
from spacy_maral.corpora.target_text import iter_target_docs
from spacy_maral.evaluation.margins import class_mean_geometry, span_class_geometry
from spacy_maral.evaluation.raw_text import evaluate_raw_text
from spacy_maral.evaluation.report import evaluate_pipeline
from spacy_maral.fileio import atomic_write_text
from spacy_maral.pipeline.folder import load_naming_the_damaged_file
from spacy_maral.pipeline.maral_ner import MaralNER
from spacy_maral.pipeline.tokenizer import set_tokenizer_lang
from spacy_maral.util import Printer
from spacy_maral.workflow.measured import read_measurement

msg = Printer()


@dataclass
class System:
    """One trained system: a name and its `spacy train --output` directory, which holds
    the checkpoint to score (model-best/ or model-last/), and optionally timing.json
    (spacy_maral.bench measure), log.jsonl (the training logger) and diagnostics.jsonl (stage 2).

    name (str): the system's name in the report.
    run_dir (Path): the training output directory.
    checkpoint (str): the sub-directory scored: "model-best" (stage 1) or "model-last"
        (stage-2 students, BENCHMARKS.md protocol).
    """

    name: str
    run_dir: Path
    checkpoint: str = "model-best"

    @property
    def model(self) -> Path:
        return self.run_dir / self.checkpoint

    def timing(self) -> Dict[str, object]:
        """The run's timing.json (bench measure's record); empty when it has none."""
        return read_measurement(self.run_dir / "timing.json") or {}

    def training(self) -> Dict[str, object]:
        """Wall time, steps, sentences/second and peak memory of the training run."""
        timing = self.timing()
        rows = read_jsonl(self.run_dir / "log.jsonl")
        steps = rows[-1]["step"] if rows else None
        batch = None
        config_path = self.run_dir / "model-last" / "config.cfg"
        if config_path.exists():
            from thinc.api import Config

            training = Config().from_disk(config_path, interpolate=False)["training"]
            size = training["batcher"].get("size")
            batch = size if isinstance(size, int) else None
            max_steps, every = training.get("max_steps"), training.get("eval_frequency")
            # the logger writes a row per evaluation; a run that was not stopped early
            # (patience stops right at an evaluation) went on to max_steps
            if steps is not None and isinstance(max_steps, int) and isinstance(every, int) and steps + every > max_steps > 0:
                steps = max_steps
        wall = timing.get("wall_s")
        rate = round(steps * batch / wall, 2) if steps and batch and wall else None
        return {"wall_s": wall, "steps": steps, "batch_sentences": batch, "sentences_per_s": rate,
                "peak_rss_gb": timing.get("peak_rss_gb")}


def _scores_row(scores: Dict[str, object]) -> Dict[str, object]:
    per_type = {k: round(100 * v["f"], 2) for k, v in (scores.get("ents_per_type") or {}).items()}
    return {"p": round(100 * float(scores["ents_p"] or 0), 2), "r": round(100 * float(scores["ents_r"] or 0), 2),
            "f": round(100 * float(scores["ents_f"] or 0), 2), "per_type": per_type}


def run_benchmark_report(
    systems: List[System],
    test_path: Path,
    dev_path: Path,
    output_dir: Path,
    before: Optional[str] = None,
    after: Optional[str] = None,
    speed_pair: Optional[List[str]] = None,
    extra_timings: Optional[Dict[str, Path]] = None,
    command: str = "",
    n_projection: int = 300,
    speed_limit: int = 0,
    speed_from: Optional[Path] = None,
    lang: Optional[str] = None,
) -> Dict[str, object]:
    """Evaluate every system on the target test set, measure inference speed, draw the
    plots, and write benchmark.json and BENCHMARKS.md into `output_dir`.

    systems (List[System]): the trained systems, in table order.
    test_path (Path): the gold target-language test set.
    dev_path (Path): the source dev set (for the projection plot).
    output_dir (Path): where the report, JSON and PNGs go.
    before, after (Optional[str]): names of the stage-1 and adapted maral systems, for
        the cosine and projection plots.
    speed_pair (Optional[List[str]]): [ner system, maral system] to time with nlp.pipe.
    extra_timings (Optional[Dict[str, Path]]): other measured steps (e.g. pseudo-labelling).
    command (str): the command line that produced the run, for the report.
    n_projection (int): sentences of dev and test whose entities are projected.
    speed_limit (int): time only the first N test sentences (0 = all).
    lang (Optional[str]): give every system this language's tokenizer rules (the
        target language) before scoring; None = each system's own.
    speed_from (Optional[Path]): instead of timing now, copy the speed block of this
        earlier benchmark.json (for a report regenerated on a busy machine); the report
        says where the numbers come from.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    result: Dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M"), "command": command,
                                 "machine": machine_description(), "test": str(test_path),
                                 "n_projection": n_projection, "systems": {}}
    loaded: Dict[str, Language] = {}
    test_docs: List[Doc] = []
    dev_docs: List[Doc] = []
    geometries: Dict[str, Dict[str, Dict[str, object]]] = {"span vectors": {}, "logit state": {}}
    for system in systems:
        if not system.model.exists():
            msg.warn(f"{system.name}: {system.model} does not exist; skipped")
            continue
        nlp = load_naming_the_damaged_file(system.model)
        if lang:
            set_tokenizer_lang(nlp, lang)
        loaded[system.name] = nlp
        test_docs = list(iter_target_docs(test_path, nlp, gold_tokens=True))
        msg.info(f"evaluating {system.name} on {len(test_docs)} sentences (gold tokens and raw text)")
        scores = evaluate_pipeline(nlp, test_docs)
        raw = evaluate_raw_text(nlp, test_docs)
        entry = {"model": str(system.model), **_scores_row(scores), "raw_text": {
            **_scores_row(raw), "recall_ceiling": round(100 * float(raw["unreachable"]["recall_ceiling"]), 2),
            "ece": (raw.get("calibration") or {}).get("ece")}, "training": system.training()}
        if any(isinstance(p, MaralNER) for _, p in nlp.pipeline):
            keys = ("min_angle_deg", "min_angle_entities_deg", "mean_cosine")
            if not dev_docs:
                dev_docs = list(iter_target_docs(dev_path, nlp, gold_tokens=True))[:n_projection]
            geo = geometries["logit state"][system.name] = class_mean_geometry(nlp)
            spans = geometries["span vectors"][system.name] = span_class_geometry(nlp, dev_docs)
            entry["margins"] = {**{k: geo[k] for k in keys}, "spans": {k: spans[k] for k in keys}}
        result["systems"][system.name] = entry  # type: ignore[index]
    result["other_steps"] = {k: record for k, v in (extra_timings or {}).items() if (record := read_measurement(Path(v))) is not None}
    if speed_from is not None:
        earlier = json.loads(Path(speed_from).read_text(encoding="utf8"))
        if "speed" not in earlier:
            raise ValueError(f"{speed_from} has no speed block to reuse")
        result["speed"] = {**earlier["speed"], "measured_in": f"{speed_from} ({earlier.get('date', 'date unknown')})"}
    elif speed_pair and all(name in loaded for name in speed_pair):
        ner_name, maral_name = speed_pair
        docs = test_docs[:speed_limit] if speed_limit else test_docs
        msg.info(f"timing nlp.pipe (batch 64) on {len(docs)} test sentences")
        ner_speed = words_per_second(loaded[ner_name], docs)
        maral_speed = words_per_second(loaded[maral_name], docs)
        trf_speed = words_per_second(loaded[maral_name], docs, enable=["transformer"])
        result["speed"] = {
            "sentences": len(docs), "batch_size": 64,
            ner_name: ner_speed, maral_name: maral_speed, "transformer alone": trf_speed,
            "maral_over_ner": round(maral_speed["words_per_second"] / ner_speed["words_per_second"], 3),
            "head_overhead": round((maral_speed["seconds"] - trf_speed["seconds"]) / trf_speed["seconds"], 3),
        }
    plots: Dict[str, str] = {}
    curve = plot_training_curves({s.name: s.run_dir / "log.jsonl" for s in systems}, output_dir / "training_curves.png")
    if curve:
        plots["training curves"] = curve.name
    maral_pair = {n: loaded[n] for n in (before, after) if n and n in loaded}
    if maral_pair:
        pair_geometries = {kind: {n: row[n] for n in maral_pair} for kind, row in geometries.items()}
        plots["class-mean cosines"] = plot_cosines(pair_geometries, output_dir / "class_mean_cosines.png").name
        plots["span-vector projection"] = plot_projection(
            maral_pair, dev_docs, test_docs[:n_projection], output_dir / "span_projection.png").name
    pl = plot_pseudo_label_f1({s.name: s.run_dir / "diagnostics.jsonl" for s in systems}, output_dir / "pseudo_label_f1.png")
    if pl:
        plots["pseudo-label F1 per epoch"] = pl.name
    result["plots"] = plots
    atomic_write_text(output_dir / "benchmark.json", json.dumps(result, indent=2))
    atomic_write_text(output_dir / "BENCHMARKS.md", render_markdown(result))
    msg.good(f"benchmark report: {output_dir / 'BENCHMARKS.md'}")
    return result


def _fmt(value: object, suffix: str = "") -> str:
    return "-" if value is None else f"{value}{suffix}"


def render_markdown(result: Dict[str, object]) -> str:
    """The BENCHMARKS.md page of a run."""
    m = result["machine"]
    systems: Dict[str, dict] = result["systems"]  # type: ignore[assignment]
    lines = [
        "# spacy-maral benchmark run", "",
        f"Produced {result['date']} by:", "", f"    {result['command']}", "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB RAM, GPU: {m['gpu']}; "
        f"Python {m['python']}, torch {m['torch']}, spaCy {m['spacy']}, transformers {m['transformers']}.", "",
        f"## Entity-level scores on `{result['test']}` (all gold entities)", "",
        "Raw text: the detokenized test sentences through `nlp.pipe(texts)`, scored by exact character "
        "offsets (the headline). Gold tokens: spaCy's NER scorer on the CoNLL tokens.", "",
        "| system | raw text P | R | **F1** | recall ceiling | ECE | gold tokens P | R | F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, s in systems.items():
        raw = s.get("raw_text") or {}
        ece = raw.get("ece")
        lines.append(
            f"| {n} | {_fmt(raw.get('p'))} | {_fmt(raw.get('r'))} | **{_fmt(raw.get('f'))}** | {_fmt(raw.get('recall_ceiling'))} | "
            f"{'-' if ece is None else f'{ece:.3f}'} | {s['p']:.2f} | {s['r']:.2f} | {s['f']:.2f} |"
        )
    types = sorted({t for s in systems.values() for t in s["per_type"]})
    lines += ["", "F1 per type (gold tokens):", "", "| system | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
    lines += [f"| {n} | " + " | ".join(_fmt(s["per_type"].get(t)) for t in types) + " |" for n, s in systems.items()]
    lines += ["", "## Training", "", "| system | wall time | steps | sentences/step | sentences/s | peak RSS |",
              "|---|---|---|---|---|---|"]
    for n, s in systems.items():
        t = s["training"]
        wall = None if t["wall_s"] is None else f"{t['wall_s'] / 60:.1f} min"
        lines.append(f"| {n} | {_fmt(wall)} | {_fmt(t['steps'])} | {_fmt(t['batch_sentences'])} | "
                     f"{_fmt(t['sentences_per_s'])} | {_fmt(t['peak_rss_gb'], ' GB')} |")
    for name, t in (result.get("other_steps") or {}).items():
        lines.append(f"| {name} | {t['wall_s'] / 60:.1f} min | | | | {t['peak_rss_gb']} GB |")
    speed = result.get("speed")
    if speed:
        lines += ["", f"## Inference speed (nlp.pipe, batch {speed['batch_size']}, {speed['sentences']} test sentences, CPU)", ""]
        if speed.get("measured_in"):
            lines += [f"Measured in an earlier run of this report on an idle machine: {speed['measured_in']}.", ""]
        lines += ["| pipeline | words/s | seconds |", "|---|---|---|"]
        for k, v in speed.items():
            if isinstance(v, dict):
                lines.append(f"| {k} | {v['words_per_second']} | {v['seconds']} |")
        ok_ratio = "met" if speed["maral_over_ner"] >= 0.9 else "missed"
        ok_head = "met" if speed["head_overhead"] <= 0.15 else "missed"
        lines += ["", f"maral / ner words per second: **{speed['maral_over_ner']}** (target >= 0.9: {ok_ratio}); "
                      f"span head overhead (maral - transformer) / transformer: **{100 * speed['head_overhead']:.1f}%** "
                      f"(target <= 15%: {ok_head})."]
    margins = {n: s["margins"] for n, s in systems.items() if "margins" in s}
    if margins:
        lines += ["", "## Class-mean margins", "",
                  "Span vectors: the class means of z over the gold-labelled spans of the first "
                  f"{result.get('n_projection', '?')} source dev sentences (what the model learned). Logit state: the means "
                  "the logits use, which within the first epoch still average in the random "
                  "initial directions (nearly orthogonal whatever was learned).", "",
                  "| system | span vectors: smallest angle | (entities) | mean cosine | logit state: smallest angle | mean cosine |",
                  "|---|---|---|---|---|---|"]
        for n, g in margins.items():
            sp = g.get("spans", {})
            lines.append(f"| {n} | {_fmt(sp.get('min_angle_deg'), ' deg')} | {_fmt(sp.get('min_angle_entities_deg'), ' deg')} | "
                         f"{_fmt(sp.get('mean_cosine'))} | {g['min_angle_deg']} deg | {g['mean_cosine']} |")
    if result.get("plots"):
        lines += ["", "## Plots", ""]
        lines += [f"- {title}: ![{title}]({path})" for title, path in result["plots"].items()]
    return "\n".join(lines) + "\n"
