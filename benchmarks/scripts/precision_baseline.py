"""Words per second of plain nlp.pipe (arrival order) with and without the length-sorted
sub-batches, fp32 and bf16, interleaved rounds, one thread.

    python benchmarks/scripts/precision_baseline.py PIPELINE TEST.spacy OUT.json
"""
import json
import statistics
import sys
import time

import torch
from spacy.tokens import DocBin

from spacy_maral.pipeline.loading import load_pipeline

torch.set_num_threads(1)
pipeline, test, out = sys.argv[1], sys.argv[2], sys.argv[3]
settings = [(precision, sort) for precision in ("fp32", "bf16") for sort in (False, True)]
pipelines = {(p, s): load_pipeline(pipeline, precision=p, sort_by_length=s) for p, s in settings}
docs = list(DocBin().from_disk(test).get_docs(pipelines[settings[0]].vocab))[:400]
texts, words = [d.text for d in docs], sum(len(d) for d in docs)
samples = {}
for _ in range(3):
    for precision, sort in settings:
        nlp = pipelines[(precision, sort)]
        start = time.perf_counter()
        for _doc in nlp.pipe(texts, batch_size=64):
            pass
        samples.setdefault(f"{precision}, sub-batches {'on' if sort else 'off'}", []).append(words / (time.perf_counter() - start))
result = {k: round(statistics.median(v), 1) for k, v in samples.items()}
print(result)
with open(out, "w", encoding="utf8") as f:
    json.dump({"words_per_second_1_thread": result, "sentences": len(texts), "words": words}, f, indent=2)
