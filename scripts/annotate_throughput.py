"""Throughput of `annotate`: length-sorted batches against the bare encoder, and engines.

Part 1 (one thread, the same sentences, side by side in one run): words/s of
- nlp.pipe in arrival order (batch 64);
- the bare encoder forward (Hugging Face tokenizer + model, no spaCy) in arrival order;
- the bare encoder forward over length-sorted batches (the floor a pipeline can reach);
- the annotate worker (annotate_records: length-sorted nlp.pipe, rows in input order);
- the whole local `annotate` (JSONL in, Parquet out), one process.
Target: annotate >= 0.9x the bare length-sorted encoder.

Part 2 (this machine's CPUs): sentences/s and peak memory per worker of the local
engine (1 process with all threads, 1 process with 1 thread, N processes) and of Ray
(1 and 2 actors of 1 CPU), timed from the first partition sent (worker start-up is
reported apart).

    python scripts/annotate_throughput.py --encoder encoders/multilingual-e5-small \
        --conll ../shared/data/conll/de/test.conll --output runs/annotate_throughput.json

The maral pipeline is built with an untrained span head when --pipeline does not exist
(throughput does not depend on the head's training). Writes JSON to --output and prints
a Markdown table. The machine's load (uptime) is recorded before and after.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def uptime() -> str:
    """The output of `uptime` (load averages)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def read_conll_sentences(path: Path, limit: int) -> List[List[str]]:
    """The first `limit` sentences (word lists) of a CoNLL file (-DOCSTART- skipped).

    path (Path): the CoNLL file (word first on each line, blank line between sentences).
    limit (int): how many (0 = all).
    """
    sentences: List[List[str]] = []
    words: List[str] = []
    with path.open(encoding="utf8") as f:
        for line in f:
            line = line.strip()
            if not line:
                if words:
                    sentences.append(words)
                    words = []
                    if limit and len(sentences) >= limit:
                        break
                continue
            word = line.split()[0]
            if word != "-DOCSTART-":
                words.append(word)
    if words and (not limit or len(sentences) < limit):
        sentences.append(words)
    return sentences


def build_pipeline(encoder: Path, output: Path) -> Path:
    """A maral pipeline (configs/source.cfg) on `encoder` with an untrained span head.

    encoder (Path): a Hugging Face encoder directory (build-encoder).
    output (Path): where to save it.
    """
    import spacy
    from spacy.tokens import Doc, Span
    from spacy.training import Example
    from thinc.api import Config

    config = Config().from_disk(REPO / "configs" / "source.cfg", overrides={"paths.encoder": str(encoder)})
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    examples = []
    for words, ents in [
        ("Angela Merkel besuchte Paris .".split(), [(0, 2, "PER"), (3, 4, "LOC")]),
        ("Siemens eröffnet ein Büro in Berlin .".split(), [(0, 1, "ORG"), (5, 6, "LOC")]),
        ("Die Olympischen Spiele beginnen .".split(), [(1, 3, "MISC")]),
    ]:
        ref = Doc(nlp.vocab, words=words)
        ref.ents = [Span(ref, s, e, label=label) for s, e, label in ents]
        examples.append(Example(Doc(nlp.vocab, words=words), ref))
    nlp.initialize(lambda: examples)
    nlp.to_disk(output)
    return output


def bare_encoder_forward(nlp, texts: List[str], batch_size: int, sort: bool):
    """A function that runs the encoder alone over `texts`: the HF tokenizer and the
    forward pass (no spaCy), batches in arrival or length order.

    nlp (Language): the pipeline whose transformer (model and tokenizer) to run.
    texts (List[str]): the sentences.
    batch_size (int): sentences per batch.
    sort (bool): sort all sentences by length before batching.
    """
    import torch

    from spacy_maral.batching import length_order

    trf = nlp.get_pipe("transformer").model
    model, tokenizer = trf.transformer, trf.tokenizer
    order = length_order(texts) if sort else list(range(len(texts)))
    batches = [[texts[i] for i in order[s : s + batch_size]] for s in range(0, len(order), batch_size)]

    def run() -> None:
        model.eval()  # thinc's predict puts the model back in train mode (dropout) after each call
        with torch.inference_mode():
            for batch in batches:
                enc = tokenizer(batch, padding="longest", truncation=True, max_length=512, return_tensors="pt")
                model(**enc)

    return run


def without_encoder_forward(nlp, texts: List[str], batch_size: int):
    """A function that runs the pipeline over length-sorted batches with the encoder's
    forward pass replaced by zeros: the host-side work alone (spaCy tokenization, the
    word-piece tokenizer and alignment, the span head, decoding). On a GPU the forward
    pass leaves the CPU; this is the CPU work per sentence that remains.

    nlp (Language): the pipeline.
    texts (List[str]): the sentences.
    batch_size (int): sentences per batch.
    """
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    from spacy_maral.annotate import default_scores_key, entity_rows
    from spacy_maral.batching import pipe_length_sorted

    model = nlp.get_pipe("transformer").model.transformer
    width = model.config.hidden_size
    key = default_scores_key(nlp)

    def stub(input_ids=None, attention_mask=None, **kwargs):
        return BaseModelOutput(last_hidden_state=torch.zeros(*input_ids.shape, width))

    def run() -> None:
        model.forward = stub
        try:
            list(pipe_length_sorted(nlp, texts, batch_size=batch_size, buffer_size=0, transform=lambda d: entity_rows(d, key)))
        finally:
            del model.forward  # back to the class's forward

    return run


def part1(pipeline: Path, sentences: List[List[str]], batch_size: int, work: Path, repeats: int) -> Dict[str, Dict[str, object]]:
    """One thread, side by side: nlp.pipe, bare encoder (arrival, sorted), annotate.

    The runs are interleaved and repeated `repeats` times; each run's best (the least
    disturbed by other load on the machine) is reported, with all the times.
    """
    import shutil

    import spacy
    import torch

    from spacy_maral.annotate import annotate, annotate_records
    from spacy_maral.engines import make_engine

    torch.set_num_threads(1)
    nlp = spacy.load(pipeline)
    texts = [" ".join(words) for words in sentences]
    n_words = sum(len(w) for w in sentences)
    records = [(str(i), t, "bench", i + 1) for i, t in enumerate(texts)]
    corpus = work / "part1.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf8")
    out = work / "part1-out"

    def end_to_end() -> None:
        shutil.rmtree(out, ignore_errors=True)
        with make_engine("local", pipeline, nlp=nlp) as engine:
            annotate(engine, corpus, out, partition_size=len(texts), batch_size=batch_size, progress=False)

    runs = {
        "nlp.pipe, arrival order": lambda: [None for _ in nlp.pipe(texts, batch_size=batch_size)],
        "bare encoder, arrival order": bare_encoder_forward(nlp, texts, batch_size, sort=False),
        "bare encoder, length-sorted": bare_encoder_forward(nlp, texts, batch_size, sort=True),
        "annotate worker (length-sorted nlp.pipe)": lambda: annotate_records(nlp, records, batch_size=batch_size),
        "annotate, local engine end to end (JSONL -> Parquet)": end_to_end,
        "host-side work alone (annotate worker, encoder forward stubbed)": without_encoder_forward(nlp, texts, batch_size),
    }
    for _ in nlp.pipe(texts[:batch_size], batch_size=batch_size):  # warm-up
        pass
    bare_encoder_forward(nlp, texts[:batch_size], batch_size, sort=False)()
    times: Dict[str, List[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(round(time.perf_counter() - start, 2))
            print(f"    {name}: {times[name][-1]} s", flush=True)
    results: Dict[str, Dict[str, object]] = {}
    for name, ts in times.items():
        best = min(ts)
        results[name] = {"seconds_best": best, "seconds_all": ts, "words_per_second": round(n_words / best, 1),
                         "sentences_per_second": round(len(texts) / best, 2)}
    floor = results["bare encoder, length-sorted"]["words_per_second"]
    for row in results.values():
        row["x_bare_sorted"] = round(row["words_per_second"] / floor, 3)
    return results


def part2_run(pipeline: Path, corpus: Path, out: Path, engine: str, batch_size: int, partition_size: int, **options) -> Dict[str, object]:
    """One engine run of `annotate` in a fresh process (so each gets a clean memory peak)."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(REPO)!r})
from spacy_maral.annotate import annotate
from spacy_maral.engines import make_engine
t0 = time.perf_counter()
with make_engine({engine!r}, {str(pipeline)!r}, **{options!r}) as engine:
    startup = time.perf_counter() - t0
    stats = annotate(engine, {str(corpus)!r}, {str(out)!r}, partition_size={partition_size}, batch_size={batch_size}, progress=False)
print(json.dumps({{"startup_s": round(startup, 1), **stats.to_dict()}}))
"""
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} {options} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu_s = sum(result["workers_cpu_s"].values())
    return {
        "engine": engine, "options": options, "workers": result["n_workers"], "documents": result["documents"],
        "seconds": result["seconds"], "sentences_per_second": result["documents_per_second"],
        "worker_cpu_seconds": round(cpu_s, 1), "sentences_per_cpu_second": round(result["documents"] / cpu_s, 2) if cpu_s else None,
        "startup_s": result["startup_s"], "peak_rss_mb_per_worker": sorted(result["workers"].values()),
        "rss_mb_per_worker_after": sorted(result["workers_rss"].values()),
    }


def part2(pipeline: Path, sentences: List[List[str]], batch_size: int, partition_size: int, work: Path, with_ray: bool,
          only: Optional[List[str]] = None) -> List[Dict[str, object]]:
    """Engines on this machine's CPUs: local 1 process (all threads, 1 thread), local
    N processes, Ray 1 and 2 actors; `only` keeps the runs with these keys
    (local-threads, local-1, local-n, ray-1, ray-2)."""
    import pyarrow.parquet as pq

    n_cpu = os.cpu_count() or 1
    corpus = work / "part2.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": " ".join(w)}) + "\n" for i, w in enumerate(sentences)), encoding="utf8")
    runs = [
        ("local-threads", "local", {"threads": 0}, f"local, 1 process, {n_cpu} threads"),
        ("local-1", "local", {"threads": 1}, "local, 1 process, 1 thread"),
        ("local-n", "local", {"n_process": n_cpu, "threads": 1}, f"local, {n_cpu} processes x 1 thread"),
    ]
    if with_ray:
        runs += [
            ("ray-1", "ray", {"num_actors": 1, "cpus_per_actor": 1}, "ray, 1 actor x 1 CPU"),
            ("ray-2", "ray", {"num_actors": min(2, n_cpu), "cpus_per_actor": 1}, f"ray, {min(2, n_cpu)} actors x 1 CPU"),
        ]
    runs = [(engine, options, name) for key, engine, options, name in runs if not only or key in only]
    results = []
    reference = None
    for engine, options, name in runs:
        out = work / f"part2-{len(results)}"
        load_before = os.getloadavg()[0]
        row = part2_run(pipeline, corpus, out, engine, batch_size, partition_size, **options)
        row["name"] = name
        row["load_1min_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        table = pq.read_table(out)
        if reference is None:
            reference = table
        row["rows_equal_to_first"] = bool(table.equals(reference))
        print(f"  {name}: {row['sentences_per_second']} sentences/s", flush=True)
        results.append(row)
    base = results[0]["sentences_per_second"]
    for row in results:
        row["x_local_1_process"] = round(row["sentences_per_second"] / base, 3)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, default=REPO / "runs" / "annotate-bench" / "maral-e5-small")
    parser.add_argument("--encoder", type=Path, default=REPO / "encoders" / "multilingual-e5-small")
    parser.add_argument("--conll", type=Path, default=REPO.parent / "shared" / "data" / "conll" / "de" / "test.conll")
    parser.add_argument("--sentences", type=int, default=400, help="part 1: sentences")
    parser.add_argument("--engine-sentences", type=int, default=1600, help="part 2: sentences")
    parser.add_argument("--partition-size", type=int, default=200, help="part 2: partition size")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="part 1: interleaved repeats (best reported)")
    parser.add_argument("--skip-part1", action="store_true", help="only part 2 (engines)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--only", default="", help="part 2: comma-separated runs (local-threads,local-1,local-n,ray-1,ray-2)")
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "annotate_throughput.json")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    work = args.output.parent / "annotate-bench"
    work.mkdir(parents=True, exist_ok=True)
    if not args.pipeline.exists():
        print(f"building {args.pipeline} (untrained head) on {args.encoder}", flush=True)
        build_pipeline(args.encoder, args.pipeline)
    report: Dict[str, object] = {
        "pipeline": str(args.pipeline), "corpus": str(args.conll), "batch_size": args.batch_size,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "uptime_before": uptime(),
    }
    if args.skip_part1 and args.output.exists():  # keep the earlier run's part 1
        earlier = json.loads(args.output.read_text(encoding="utf8"))
        if "part1" in earlier:
            report["part1"] = {**earlier["part1"], "from_earlier_run": earlier.get("uptime_before")}
    if not args.skip_part1:
        sentences = read_conll_sentences(args.conll, args.sentences)
        report["part1"] = {"sentences": len(sentences), "words": sum(map(len, sentences)), "threads": 1,
                           "repeats": args.repeats,
                           "results": part1(args.pipeline, sentences, args.batch_size, work, args.repeats)}
        report["uptime_after_part1"] = uptime()
        for name, row in report["part1"]["results"].items():
            print(f"  {name}: {row['words_per_second']} words/s ({row['x_bare_sorted']}x bare sorted)", flush=True)
    sentences = read_conll_sentences(args.conll, args.engine_sentences)
    report["part2"] = {"sentences": len(sentences), "partition_size": args.partition_size,
                       "results": part2(args.pipeline, sentences, args.batch_size, args.partition_size, work, not args.no_ray,
                                        [x for x in args.only.split(",") if x])}
    report["uptime_after"] = uptime()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2), encoding="utf8")
    print(markdown(report))
    print(f"-> {args.output}")


def markdown(report: Dict[str, object]) -> str:
    """The report's tables in Markdown."""
    lines = []
    if "part1" in report:
        p1 = report["part1"]
        lines += [f"Part 1: {p1['sentences']} sentences, {p1['words']} words, 1 thread, batch {report['batch_size']}, best of {p1['repeats']}", "",
                  "| run | words/s | x bare sorted |", "|---|---|---|"]
        lines += [f"| {name} | {row['words_per_second']} | {row['x_bare_sorted']} |" for name, row in p1["results"].items()]
        lines.append("")
    p2 = report["part2"]
    lines += [f"Part 2: {p2['sentences']} sentences, partitions of {p2['partition_size']}", "",
              "| engine | workers | sentences/s | x local 1 process | sentences per worker CPU-second | peak RSS per worker (MB) | RSS after (MB) | start-up (s) | rows equal | load (1 min) before, after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in p2["results"]:
        lines.append(f"| {row['name']} | {row['workers']} | {row['sentences_per_second']} | {row['x_local_1_process']} | {row['sentences_per_cpu_second']} | "
                     f"{', '.join(str(round(x)) for x in row['peak_rss_mb_per_worker'])} | "
                     f"{', '.join(str(round(x)) for x in row['rss_mb_per_worker_after'])} | {row['startup_s']} | {row['rows_equal_to_first']} | {row['load_1min_before_after'][0]}, {row['load_1min_before_after'][1]} |")
    lines += ["", f"load before: {report['uptime_before']}", f"load after: {report['uptime_after']}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
