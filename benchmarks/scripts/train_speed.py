"""Training steps per second of stage 1, fp32 against bf16, interleaved, one thread.

configs/source.cfg with multilingual-e5-small (word embeddings frozen, as configured),
batches of 8 English training sentences tokenized from their raw text; 5 warm-up steps,
then N timed steps, two rounds of each precision.

    python benchmarks/scripts/train_speed.py N ENCODER_DIR EN_TRAIN.spacy
"""
import json
import random
import sys
import time
from pathlib import Path

import spacy
import torch
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Config, fix_random_seed

torch.set_num_threads(1)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 40
ENCODER, TRAIN = sys.argv[2], sys.argv[3]
cfg = Config().from_disk(Path(__file__).resolve().parents[2] / "configs" / "source.cfg", interpolate=False)
cfg["paths"]["encoder"] = ENCODER
cfg["paths"]["train"] = TRAIN
cfg["paths"]["dev"] = TRAIN
res = {}
for rnd in range(2):
    for prec in ("fp32", "bf16"):
        fix_random_seed(0)
        cfg["components"]["transformer"]["model"]["precision"] = prec  # spacy_maral.EncoderRuntime.v1
        nlp = spacy.util.load_model_from_config(cfg.interpolate(), auto_fill=True)
        gold = list(DocBin().from_disk(TRAIN).get_docs(nlp.vocab))
        random.Random(0).shuffle(gold)
        examples = [Example(nlp.make_doc(d.text), d) for d in gold[: 8 * (N + 5) + 200]]
        sample = examples[:200]
        nlp.initialize(lambda sample=sample: sample)
        opt = nlp.create_optimizer()
        batches = [examples[200 + 8 * i: 208 + 8 * i] for i in range(N + 5)]
        for b in batches[:5]:
            nlp.update(b, sgd=opt, losses={})
        losses = {}
        t = time.perf_counter()
        for b in batches[5:]:
            nlp.update(b, sgd=opt, losses=losses)
        dt = time.perf_counter() - t
        res.setdefault(prec, []).append(round(N / dt, 3))
        print(prec, rnd, round(N / dt, 3), losses, flush=True)
print(json.dumps(res))
