"""`annotate --engine ray` on Ray Data: the driver's peak memory and CPU time as the corpus
grows (it plans and adds up; the actors read and write), and sentences/s of 1 and 2
actors against the local engine. Writes one JSON results file.

    python benchmarks/scripts/ray_data_bench.py OUT.json --sizes 100000,1000000 \
        --speed-model xx_maral_ner --speed-corpus corpus/de-test.spacy

Each measurement runs `annotate` in a fresh Python process (this script's child), so
its ru_maxrss and CPU time are the driver's alone; the Ray actors are other processes.
The memory runs use a blank pipeline with an entity ruler (the driver's work does not
depend on the model); the speed runs use a trained pipeline, 1 thread per worker.
"""
import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict

DRIVER = r"""
import json, resource, sys, time
from spacy_maral.inference.annotate import annotate
from spacy_maral.inference.engines import make_engine
model, corpus, out, engine, actors = sys.argv[1:6]
start = time.perf_counter()
with make_engine(engine, model, num_actors=int(actors), threads=1) as workers:
    stats = annotate(workers, corpus, out, partition_size=int(sys.argv[6]), progress=False)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": round(time.perf_counter() - start, 1), "documents": stats.documents,
                  "entities": stats.entities, "driver_peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                  "driver_cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "workers": len(stats.workers)}))
"""


def run_driver(model: str, corpus: Path, out: Path, engine: str, actors: int, partition_size: int) -> Dict[str, Any]:
    env_cmd = [sys.executable, "-c", DRIVER, model, str(corpus), str(out), engine, str(actors), str(partition_size)]
    proc = subprocess.run(env_cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(engine, actors, corpus.name, result, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--speed-model", default=None)
    parser.add_argument("--speed-corpus", default=None, help="a .spacy file whose texts are annotated")
    parser.add_argument("--partition-size", type=int, default=10000)
    args = parser.parse_args()

    import spacy

    work = Path(tempfile.mkdtemp(prefix="ray-data-bench-"))
    ruler = spacy.blank("en")
    ruler.add_pipe("entity_ruler").add_patterns([{"label": "LOC", "pattern": "Paris"}, {"label": "ORG", "pattern": "EU"}])
    ruler.to_disk(work / "ruler")
    memory = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        corpus = work / f"sentences-{size}.txt"
        with corpus.open("w", encoding="utf8") as f:
            for i in range(size):
                f.write(f"The EU met in Paris on day {i} of the talks .\n")
        memory[str(size)] = {
            engine: run_driver(str(work / "ruler"), corpus, work / f"out-{engine}-{size}", engine, 2 if engine == "ray" else 1,
                               args.partition_size)
            for engine in ("ray", "local")
        }
    speed = {}
    if args.speed_model and args.speed_corpus:
        from spacy.tokens import DocBin

        texts = [d.text for d in DocBin().from_disk(args.speed_corpus).get_docs(ruler.vocab)]
        corpus = work / "speed.txt"
        corpus.write_text("".join(t.replace("\n", " ") + "\n" for t in texts), encoding="utf8")
        for engine, actors in (("local", 1), ("ray", 1), ("ray", 2)):
            result = run_driver(args.speed_model, corpus, work / f"speed-{engine}-{actors}", engine, actors, 500)
            result["sentences_per_second"] = round(result["documents"] / result["seconds"], 1)
            speed[f"{engine}, {actors} worker(s)"] = result
    out = {
        "claim": "annotate --engine ray on Ray Data: the driver's memory and CPU do not grow with the corpus",
        "measured": "driver peak RSS and CPU seconds of annotate (its own process) at each corpus size, Ray "
                    "(2 actors, local instance) against the local engine; sentences/s of 1 and 2 actors and the local "
                    "engine on the speed corpus (whole run, actors' start included)",
        "command": " ".join(["python benchmarks/scripts/ray_data_bench.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, the project's 2-core CPU machine",
        "partition_size": args.partition_size,
        "memory": memory,
        "speed": speed,
    }
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
