"""What max_width costs at prediction time: spans per sentence, words/s and peak memory.

    OMP_NUM_THREADS=1 python scripts/max_width_cost.py runs/max-width-cost.json \
        ../shared/data/conll/es/test.conll --widths 4,5,6 --n 400

For each width, a fresh process builds configs/source.cfg's pipeline on the encoder
(the head initialised on a few sentences: the cost does not depend on its training),
then times `nlp.pipe` over the raw text of the first N sentences (after one warm-up
batch) and reads the process's peak RSS. One thread, so that the numbers compare.
"""
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import typer

REPO = Path(__file__).resolve().parent.parent


def measure(conll: str, width: int, n: int, encoder: str, lang: str) -> dict:
    import spacy
    from spacy.training import Example
    from spacy.vocab import Vocab

    from spacy_maral.convert import read_conll
    from spacy_maral.spans import count_spans
    from spacy_maral.tokenizer import set_tokenizer_lang

    config = spacy.util.load_config(REPO / "configs" / "source.cfg", overrides={
        "paths.encoder": encoder, "components.maral_ner.model.max_width": width,
    }, interpolate=True)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    set_tokenizer_lang(nlp, lang)
    docs = list(read_conll(conll, vocab=Vocab()))[:n]
    sample = [Example(nlp.make_doc(d.text), d) for d in docs[:16]]
    nlp.initialize(lambda: sample)
    texts = [d.text for d in docs]
    list(nlp.pipe(texts[:32], batch_size=32))  # warm-up
    start = time.perf_counter()
    out = list(nlp.pipe(texts, batch_size=64))
    seconds = time.perf_counter() - start
    words = sum(len(d) for d in out)
    return {
        "max_width": width, "sentences": len(texts), "words": words, "seconds": round(seconds, 2),
        "words_per_second": round(words / seconds, 1),
        "spans_per_sentence": round(sum(count_spans(len(d), width) for d in out) / len(out), 2),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 3),
    }


def main(
    output: Path = typer.Argument(..., help="JSON file for the results."),
    conll: str = typer.Argument(..., help="CoNLL file whose raw text is labelled."),
    widths: str = typer.Option("4,5,6", help="max_width values, comma-separated."),
    n: int = typer.Option(400, help="Sentences timed."),
    encoder: str = typer.Option(str(REPO / "encoders" / "multilingual-e5-small"), help="Encoder directory."),
    lang: str = typer.Option("es", help="Tokenizer rules of the text."),
    one: int = typer.Option(0, hidden=True, help="Internal: measure this width in this process."),
) -> None:
    if one:
        print(json.dumps(measure(conll, one, n, encoder, lang)))
        return
    results = []
    for width in [int(w) for w in widths.split(",")]:
        cmd = [sys.executable, __file__, str(output), conll, "--n", str(n), "--encoder", encoder, "--lang", lang, "--one", str(width)]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        results.append(json.loads(line))
        print(results[-1], flush=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"conll": conll, "lang": lang, "results": results}, indent=2))


if __name__ == "__main__":
    typer.run(main)
