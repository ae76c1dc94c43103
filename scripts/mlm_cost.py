"""What the masked-LM auxiliary loss (maral_mlm) costs per stage-2 step.

Builds the stage-2 architecture (configs/source.cfg's transformer + maral_ner on the real
encoder) plus maral_mlm, and times nlp.update on batches of 8 source + 8 target
sentences, alternating steps with and without maral_mlm (so both see the same machine
load). The target sentences are flagged as target and carry no tags.

    python scripts/mlm_cost.py OUT.json [--encoder encoders/multilingual-e5-small]
        [--source corpus/en-train.spacy] [--target corpus/es-train.spacy] [--steps 12]
"""
import json
import platform
import resource
import time
from pathlib import Path

import numpy
import spacy
import typer
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Adam, Config, fix_random_seed
from tqdm import tqdm

from spacy_maral.readers import bare_copy, target_example

REPO = Path(__file__).resolve().parents[1]


def main(
    out: Path,
    encoder: Path = typer.Option(REPO / "encoders/multilingual-e5-small", help="encoder directory"),
    source: Path = typer.Option(REPO / "corpus/en-train.spacy", help="source DocBin (gold)"),
    target: Path = typer.Option(REPO / "corpus/es-train.spacy", help="target DocBin (tags ignored)"),
    steps: int = typer.Option(12, help="timed steps of each kind"),
    batch: int = typer.Option(8, help="sentences of each language per step"),
) -> None:
    import torch

    config = Config().from_disk(REPO / "configs" / "source.cfg", interpolate=False)
    config["paths"]["encoder"] = str(encoder)
    nlp = spacy.util.load_model_from_config(config.interpolate(), auto_fill=True, validate=True)
    nlp.add_pipe("maral_mlm", config={"head_from": str(encoder)})
    src_docs = list(DocBin().from_disk(source).get_docs(nlp.vocab))
    tgt_docs = list(DocBin().from_disk(target).get_docs(nlp.vocab))
    rng = numpy.random.default_rng(0)
    fix_random_seed(0)

    def src_batch():
        return [Example(bare_copy(src_docs[i], nlp.vocab), src_docs[i]) for i in rng.choice(len(src_docs), batch)]

    def tgt_batch():  # target examples as the stage-2 reader makes them: no entities
        return [target_example(tgt_docs[j], i, nlp) for i, j in enumerate(rng.choice(len(tgt_docs), batch))]

    init = [Example(bare_copy(d, nlp.vocab), d) for d in src_docs[:500]]
    nlp.initialize(lambda: init)
    optimizer = Adam(1e-5)
    times = {"without": [], "with": []}
    for i in tqdm(range(2 * steps + 2), desc="steps"):
        kind = "with" if i % 2 else "without"
        examples = src_batch() + tgt_batch()
        start = time.perf_counter()
        nlp.update(examples, sgd=optimizer, losses={}, exclude=[] if kind == "with" else ["maral_mlm"])
        if i >= 2:  # two warm-up steps
            times[kind].append(time.perf_counter() - start)
    result = {
        "encoder": str(encoder),
        "batch": f"{batch} source + {batch} target sentences",
        "steps_each": steps,
        "seconds_per_step": {k: round(float(numpy.median(v)), 3) for k, v in times.items()},
        "ratio_with_over_without": round(float(numpy.median(times["with"]) / numpy.median(times["without"])), 3),
        "pretrained_head": nlp.get_pipe("maral_mlm").cfg["pretrained_head"],
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
