"""Where the time of a training step goes: teacher (stage 1) and student (stage 2), fp32, one thread.

Each stage's pipeline is built as `spacy train` builds it (spacy.util.load_config with the
overrides below, spacy.training.initialize.init_nlp) and its batches come from the config's
[training] train_corpus and batcher (spacy.training.loop.create_train_batches), with the
before_update callback called as the loop calls it. After W warm-up steps:

1. N timed steps: `nlp.update(batch, drop=[training] dropout, sgd=optimizer, losses=...)`.
2. The Hugging Face encoder's forward + `.last_hidden_state.sum().backward()` alone,
   replayed on the inputs it received in those N steps (captured by a forward pre-hook).
3. A torch.profiler breakdown of that replay: self CPU time in matrix-product ops vs the rest.
4. Padding of the captured encoder inputs (windows per step, padded length).
5. A torch.profiler over P more whole steps: self CPU time of all torch ops vs wall time,
   the top ops by self CPU time with their input dtype, float64 time, and the inclusive time
   of the encoder's forward/backward, the span head's forward/backward and the vMF logits
   (record_function ranges added by this script only).
6. nlp.evaluate on E dev examples, scaled to the product's evaluation (L dev sentences
   every F steps), as a share of F steps plus one evaluation.

Results are merged into OUT.json, one object per (run kind, stage). The run kind is "avx2"
when ATEN_CPU_CAPABILITY is set, else "native" (or --kind).

    python benchmarks/scripts/train_profile.py OUT.json --encoder ENCODER_DIR \
        --train EN_TRAIN.spacy --dev EN_DEV.spacy --target FI_PSEUDO_DIR \
        [--stages teacher student] [--steps 20] [--profile-steps 5] [--eval-examples 200]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch

torch.set_num_threads(1)

import spacy  # noqa: E402
from spacy.schemas import ConfigSchemaTraining  # noqa: E402
from spacy.training.initialize import init_nlp  # noqa: E402
from spacy.training.loop import create_train_batches  # noqa: E402
from spacy.util import load_config, registry, resolve_dot_names  # noqa: E402
from thinc.api import fix_random_seed  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import spacy_maral.ml.span_ner as span_ner  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MATRIX = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_dot_product.*)$|mkldnn|onednn")
DTYPES = {"double": "float64", "float": "float32", "c10::BFloat16": "bf16", "c10::Half": "fp16"}
OURS = "maral::"  # this script's record_function ranges (their self time is Python, not torch)


def log(*parts: Any) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)


def stage_config(args: argparse.Namespace, stage: str):
    if stage == "teacher":
        path, overrides = args.teacher_config, {"paths.train": args.train, "paths.dev": args.dev}
    else:
        path = args.student_config
        overrides = {"paths.source": args.train, "paths.target": args.target, "paths.dev": args.dev,
                     "corpora.train.max_target_docs": args.max_target_docs, "nlp.tokenizer.lang": args.target_lang,
                     "corpora.train.source_lang": args.source_lang}
    overrides.update({"paths.encoder": args.encoder, "components.transformer.model.precision": "fp32"})
    if args.train_bucket_rows is not None:
        overrides["components.transformer.model.train_bucket_rows"] = args.train_bucket_rows
    return load_config(path, overrides=overrides, interpolate=False), overrides


def op_dtype(event: Any) -> str:
    found = [DTYPES[d] for d in (getattr(event, "input_dtypes", None) or []) if d in DTYPES]
    return found[0] if found else "-"


def torch_events(prof: profile) -> List[Any]:
    return [e for e in prof.events() if not e.name.startswith(OURS)]


@contextmanager
def ranges(hf_model: torch.nn.Module) -> Iterator[None]:
    """record_function ranges around the encoder's forward, the span head's forward, the vMF
    logits, and each torch.autograd.backward call (3-d gradient: the encoder, else the head)."""
    open_ranges: List[Any] = []
    pre = hf_model.register_forward_pre_hook(lambda m, a: open_ranges.append(record_function(OURS + "encoder.forward").__enter__()))
    post = hf_model.register_forward_hook(lambda m, a, o: open_ranges.pop().__exit__(None, None, None))
    logits, head_forward, backward = span_ner.vmf_contrastive_logits, span_ner.SpanHead.forward, torch.autograd.backward

    def wrap(name: Callable[..., str], fn: Callable) -> Callable:
        def wrapped(*a: Any, **k: Any) -> Any:
            with record_function(OURS + name(*a)):
                return fn(*a, **k)
        return wrapped

    span_ner.vmf_contrastive_logits = wrap(lambda *a: "vmf_logits.forward", logits)
    span_ner.SpanHead.forward = wrap(lambda *a: "span_head.forward", head_forward)
    def backward_name(tensors: Any, *a: Any) -> str:
        return "encoder.backward" if getattr(tensors, "dim", lambda: 0)() == 3 else "span_head.backward"

    torch.autograd.backward = wrap(backward_name, backward)
    try:
        yield
    finally:
        pre.remove(), post.remove()
        span_ner.vmf_contrastive_logits, span_ner.SpanHead.forward, torch.autograd.backward = logits, head_forward, backward


def replay(hf_model: torch.nn.Module, inputs: List[Dict[str, torch.Tensor]]) -> List[float]:
    hf_model.train()  # as thinc's PyTorchShim.begin_update (dropout on)
    times = []
    for kwargs in inputs:
        start = time.perf_counter()
        hf_model(**kwargs).last_hidden_state.sum().backward()
        times.append(time.perf_counter() - start)
    hf_model.zero_grad(set_to_none=True)
    return times


def profile_stage(args: argparse.Namespace, stage: str) -> Dict[str, Any]:
    config, overrides = stage_config(args, stage)
    start = time.perf_counter()
    nlp = init_nlp(config)
    log(stage, f"init_nlp {time.perf_counter() - start:.1f}s, pipeline {nlp.pipe_names}")
    resolved = nlp.config.interpolate()
    fix_random_seed(resolved["training"]["seed"])  # as spacy.training.loop.train
    T = registry.resolve(resolved["training"], schema=ConfigSchemaTraining)
    train_corpus, dev_corpus = resolve_dot_names(resolved, [T["train_corpus"], T["dev_corpus"]])
    optimizer, before_update = T["optimizer"], T["before_update"]
    batches = create_train_batches(nlp, train_corpus, T["batcher"], T["max_epochs"])
    trf = nlp.get_pipe("transformer").model
    assert trf.running() == "fp32", trf.running()
    hf_model = trf.transformer
    captured: List[Dict[str, torch.Tensor]] = []
    capture = {"on": False}

    def grab(module: torch.nn.Module, a: Tuple, kwargs: Dict[str, Any]) -> None:
        if capture["on"]:
            captured.append({k: v.detach() for k, v in kwargs.items() if isinstance(v, torch.Tensor)})

    hook = hf_model.register_forward_pre_hook(grab, with_kwargs=True)
    losses: Dict[str, float] = {}

    def step(i: int) -> Tuple[float, int]:
        epoch, batch = next(batches)
        if before_update:
            before_update(nlp, {"step": i, "epoch": epoch})
        t = time.perf_counter()
        nlp.update(batch, drop=T["dropout"], sgd=optimizer, losses=losses,
                   exclude=T["frozen_components"], annotates=T["annotating_components"])
        dt = time.perf_counter() - t
        optimizer.step_schedules()
        return dt, len(batch)

    i = 0
    for i in range(args.warmup):
        step(i)
    log(stage, f"{args.warmup} warm-up steps done")
    capture["on"] = True
    steps, sizes, calls = [], [], []
    for k in range(args.steps):
        before = len(captured)
        dt, n = step(args.warmup + k)
        steps.append(dt), sizes.append(n), calls.append(len(captured) - before)
        windows = sum(c["input_ids"].shape[0] for c in captured[before:])
        log(stage, f"step {k + 1}/{args.steps}: {dt:.2f}s, {n} examples, {windows} windows in {calls[-1]} encoder call(s)")
    capture["on"] = False
    hook.remove()
    if min(calls) < 1:  # train_bucket_rows runs the encoder once per sub-batch
        raise RuntimeError(f"a step with no encoder call: {calls}")

    # whole steps under the profiler
    with ranges(hf_model), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        t = time.perf_counter()
        for k in range(args.profile_steps):
            step(args.warmup + args.steps + k)
        prof_wall = time.perf_counter() - t
    log(stage, f"{args.profile_steps} profiled steps: {prof_wall:.1f}s")
    events = torch_events(prof)
    torch_self = sum(e.self_cpu_time_total for e in events) / 1e6
    by_op: Dict[Tuple[str, str], float] = {}
    for e in events:
        key = (e.name, op_dtype(e))
        by_op[key] = by_op.get(key, 0.0) + e.self_cpu_time_total / 1e6
    f64 = sum(e.self_cpu_time_total for e in events if "double" in (getattr(e, "input_dtypes", None) or [])) / 1e6
    scopes: Dict[str, float] = {}
    for e in prof.events():
        if e.name.startswith(OURS):
            scopes[e.name[len(OURS):]] = scopes.get(e.name[len(OURS):], 0.0) + e.cpu_time_total / 1e6
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[: args.top]

    # the encoder alone on the captured inputs
    replay(hf_model, captured[:1])  # warm-up
    enc = replay(hf_model, captured)
    log(stage, f"encoder replay: {sum(enc):.1f}s over {len(enc)} calls")
    with profile(activities=[ProfilerActivity.CPU]) as eprof:
        replay(hf_model, captured[: args.profile_steps])
    eevents = torch_events(eprof)
    e_total = sum(e.self_cpu_time_total for e in eevents)
    e_matrix = sum(e.self_cpu_time_total for e in eevents if MATRIX.search(e.name))
    e_ops: Dict[str, float] = {}
    for e in eevents:
        e_ops[e.name] = e_ops.get(e.name, 0.0) + e.self_cpu_time_total
    masks = [c["attention_mask"] for c in captured]
    real = sum(int(m.sum()) for m in masks)
    positions = sum(m.numel() for m in masks)

    # evaluation
    dev = list(islice(dev_corpus(nlp), args.eval_examples))
    t = time.perf_counter()
    scores = nlp.evaluate(dev)
    eval_s = time.perf_counter() - t
    eval_product = eval_s * args.eval_limit / len(dev)
    log(stage, f"evaluate {len(dev)} dev examples: {eval_s:.1f}s")

    t_step = statistics.median(steps)
    r = lambda x, n=3: round(x, n)  # noqa: E731
    return {
        "stage": stage,
        "config": str(Path(args.teacher_config if stage == "teacher" else args.student_config)),
        "overrides": {k: v for k, v in overrides.items()},
        "batch_examples": sorted(set(sizes)),
        "dropout": T["dropout"],
        "steps_timed": args.steps, "warmup_steps": args.warmup,
        "t_step_median_s": r(t_step), "t_step_mean_s": r(statistics.mean(steps)),
        "t_step_min_s": r(min(steps)), "t_step_max_s": r(max(steps)),
        "encoder": {
            "calls_per_step": r(statistics.mean(calls), 1),
            "t_call_median_s": r(statistics.median(enc)), "t_call_mean_s": r(statistics.mean(enc)),
            "share_of_step": r(sum(enc) / sum(steps)),
            "profiled_replays": min(args.profile_steps, len(captured)),
            "matrix_share_of_self_cpu": r(e_matrix / e_total),
            "top_ops_self_cpu_share": {k: r(v / e_total) for k, v in sorted(e_ops.items(), key=lambda kv: -kv[1])[:10]},
        },
        "padding": {
            "fraction": r(1 - real / positions),
            "windows_per_call_mean": r(statistics.mean(m.shape[0] for m in masks), 1),
            "windows_per_call_range": [min(m.shape[0] for m in masks), max(m.shape[0] for m in masks)],
            "padded_length_mean": r(statistics.mean(m.shape[1] for m in masks), 1),
            "padded_length_range": [min(m.shape[1] for m in masks), max(m.shape[1] for m in masks)],
            "real_positions": real, "positions": positions,
        },
        "whole_step_profile": {
            "steps": args.profile_steps,
            "wall_s": r(prof_wall),
            "torch_self_cpu_s": r(torch_self),
            "torch_share": r(torch_self / prof_wall),
            "outside_torch_share": r(1 - torch_self / prof_wall),
            "float64_self_cpu_share": r(f64 / prof_wall),
            "scopes_inclusive_share": {k: r(v / prof_wall) for k, v in sorted(scopes.items())},
            "top_ops": [{"op": name, "dtype": dt, "self_cpu_s_per_step": r(v / args.profile_steps, 4),
                         "share_of_wall": r(v / prof_wall)} for (name, dt), v in top],
            "note": "wall time under the profiler (its overhead included); scopes are this script's "
                    "record_function ranges, inclusive; vmf_logits.forward is inside span_head.forward",
        },
        "evaluation": {
            "dev_examples": len(dev), "seconds": r(eval_s),
            "ents_f": r(scores.get("ents_f") or 0.0),
            "product_eval_s": r(eval_product, 1),
            "product_setting": f"{args.eval_limit} dev sentences every {args.eval_frequency} steps",
            "share": r(eval_product / (args.eval_frequency * t_step + eval_product)),
        },
    }


def machine() -> Dict[str, Any]:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in lscpu.splitlines() if ln.startswith("Flags")), [])
    return {
        "lscpu_model_name": name, "avx512_bf16_flag": "avx512_bf16" in flags,
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "env": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")},
        "spacy": spacy.__version__, "loadavg_at_start": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--encoder", required=True)
    p.add_argument("--train", required=True, help="source-language training corpus (.spacy)")
    p.add_argument("--dev", required=True)
    p.add_argument("--target", help="pseudo-labelled target corpus (student's paths.target)")
    p.add_argument("--stages", nargs="+", default=["teacher", "student"], choices=["teacher", "student"])
    p.add_argument("--teacher-config", default=str(ROOT / "configs" / "source.cfg"))
    p.add_argument("--student-config", default=str(ROOT / "configs" / "adapt.cfg"))
    p.add_argument("--max-target-docs", type=int, default=800)
    p.add_argument("--target-lang", default="fi")
    p.add_argument("--source-lang", default="en")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--profile-steps", type=int, default=5)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--eval-examples", type=int, default=200)
    p.add_argument("--eval-limit", type=int, default=1000)
    p.add_argument("--eval-frequency", type=int, default=200)
    p.add_argument("--train-bucket-rows", type=int, help="the encoder's length-sorted sub-batches in training (default: the config's)")
    p.add_argument("--kind", default="avx2" if os.environ.get("ATEN_CPU_CAPABILITY") else "native")
    args = p.parse_args()
    if "student" in args.stages and not args.target:
        p.error("--target is needed for the student")
    env = " ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA") if k in os.environ)
    command = " ".join(filter(None, [env, "python", shlex.join(sys.argv)]))
    info = machine()
    log("run kind", args.kind, json.dumps(info))
    results = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
    for stage in args.stages:
        t = time.perf_counter()
        entry = {"run_kind": args.kind, **profile_stage(args, stage), "machine": info, "command": command,
                 "wall_s": round(time.perf_counter() - t, 1)}
        results["runs"] = [e for e in results["runs"] if (e["run_kind"], e["stage"]) != (args.kind, stage)] + [entry]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        log(stage, f"done in {entry['wall_s']}s: {entry['t_step_median_s']} s/step -> {args.out}")


if __name__ == "__main__":
    main()
