"""Which Linear layers of the encoder cost entity agreement under dynamic int8: variants
that quantize a chosen set of the Hugging Face encoder's nn.Linear modules
(torch.ao.quantization.quantize_dynamic, qint8 weights, activations quantized on the fly),
each against the same pipeline in fp32, one thread.

    python benchmarks/scripts/int8_sensitivity.py OUT.json PIPELINE DEV.conll --limit 500 [--variants none all ...] [--per-channel]

--per-channel quantizes each weight matrix per output channel (one scale per row:
torch.ao.quantization.per_channel_dynamic_qconfig) instead of one scale per matrix.
--per-token quantizes as `precision int8` does (spacy_maral.pipeline.int8.Int8Linear: one
weight scale per output channel, one activation scale per token, torch._int_mm) instead of
torch's dynamic int8 (one activation scale per batch).
--outliers THRESHOLD (with --per-token) takes the activations' outlier columns out of int8
(LLM.int8(), Dettmers et al. 2022): in each batch, every input column whose largest |x|
exceeds THRESHOLD is multiplied in fp32 with its weight column, the rest in int8; no
calibration. The share of columns taken out is reported.
--rounding SIDE (instead of --per-token's int8 product) runs every chosen Linear as an fp32
product with only one operand rounded as `precision int8` rounds it: "weights" (int8, one
scale per output channel), "activations" (int8, one scale per token), "both"; or "bf16"
(both operands in bfloat16, the output fp32). It shows which side's rounding
costs the agreement; its words/s mean nothing.
--smooth ALPHA migrates the activations' outliers into the weights first (SmoothQuant,
Xiao et al. 2023): each quantized Linear's input channel j is divided by
s_j = max|X_j|^ALPHA / max|W_:,j|^(1-ALPHA) and its weight column multiplied by it, the
activation maxima taken in fp32 on --calibration sentences of the dev file that follow
the scored ones (an explicit division before each Linear: BERT's LayerNorm output is also
its residual stream, so the scale can't be folded into it).

Variants (default: every one, in this order):
  none, all                         no Linear int8 / every Linear int8 (pooler included);
  keep-qkv, keep-attn-out,          every Linear int8 except one kind, kept fp32 in every
  keep-intermediate, keep-output    layer (attention.self.query/key/value, attention.output.dense,
                                    intermediate.dense, output.dense);
  keep-layers-A-B                   every Linear int8 except layers A..B (the layers in thirds,
                                    0-3, 4-7, 8-11 for 12 layers);
  only-layer-I                      the Linear modules of layer I int8, everything else fp32.

Every variant quantizes a fresh deep copy of the fp32 encoder and puts it in the pipeline in
the place of the encoder. For each: the number of Linear modules quantized, entity agreement
with fp32 (the share of fp32's entities predicted identically, the F1 of its entities against
fp32's, the share of sentences with identical entities), raw-text P/R/F1 against gold by exact
character offsets (spacy_maral.evaluation.raw_text.char_prf), and words/s of nlp.pipe over the
sentences (batch size 64, one warm-up pass of 32 sentences first). OUT.json is rewritten after
each variant.
"""
import argparse
import copy
import itertools
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import torch

CharSpan = Tuple[int, int, str]
KINDS = {
    "qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "attn-out": ("attention.output.dense",),
    "intermediate": ("intermediate.dense",),
    "output": ("output.dense",),
}
LAYER_NAME = re.compile(r"^(?:.*\.)?layer\.(\d+)\.(.+)$")


def linear_names(module: torch.nn.Module) -> List[str]:
    """The names of the module's nn.Linear submodules, in order."""
    return [name for name, sub in module.named_modules() if isinstance(sub, torch.nn.Linear)]


def layer_and_kind(name: str) -> Tuple[Optional[int], Optional[str]]:
    """A Linear's layer index and kind (a key of KINDS); None for what is outside the layers."""
    match = LAYER_NAME.match(name)
    if not match:
        return None, None
    rest = match.group(2)
    return int(match.group(1)), next((kind for kind, tails in KINDS.items() if rest in tails), None)


def thirds(n_layers: int) -> List[Tuple[int, int]]:
    """The layers in three consecutive groups (first, last), as even as they go."""
    bounds = [round(n_layers * i / 3) for i in range(4)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(3) if bounds[i + 1] > bounds[i]]


def variant_sets(names: Sequence[str], n_layers: int) -> Dict[str, Set[str]]:
    """Every variant: the names of the Linear modules it quantizes."""
    every = set(names)
    info = {name: layer_and_kind(name) for name in names}
    out: Dict[str, Set[str]] = {"none": set(), "all": every}
    for kind in KINDS:
        out[f"keep-{kind}"] = {n for n in names if info[n][1] != kind}
    for first, last in thirds(n_layers):
        out[f"keep-layers-{first}-{last}"] = {n for n in names if not (info[n][0] is not None and first <= info[n][0] <= last)}
    for i in range(n_layers):
        out[f"only-layer-{i}"] = {n for n in names if info[n][0] == i}
    for name, chosen in out.items():
        if name not in ("none", "all") and (not chosen or chosen == every):
            raise SystemExit(f"variant {name}: its group matches no Linear module (names: {names[:8]} ...)")
    return out


class SmoothedLinear(torch.nn.Module):
    """x / s, then a Linear whose weight columns were multiplied by s (the same function)."""

    def __init__(self, linear: torch.nn.Linear, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("inv_scale", 1.0 / scale)
        self.linear = linear
        with torch.no_grad():
            self.linear.weight.mul_(scale[None, :])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inv_scale)


def activation_maxima(module: torch.nn.Module, names: Sequence[str], run) -> Dict[str, torch.Tensor]:
    """Per input channel, the largest |x| each named Linear sees while `run()` runs."""
    maxima: Dict[str, torch.Tensor] = {}
    subs = dict(module.named_modules())
    hooks = []
    for name in names:
        def hook(_mod, inputs, name=name):
            x = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(dim=0).float()
            maxima[name] = torch.maximum(maxima[name], x) if name in maxima else x
        hooks.append(subs[name].register_forward_pre_hook(hook))
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return maxima


def smooth(module: torch.nn.Module, names: Sequence[str], maxima: Dict[str, torch.Tensor], alpha: float) -> List[str]:
    """Replace each named Linear by a SmoothedLinear (in place); RETURNS the names of the
    Linear modules to quantize (NAME.linear)."""
    out = []
    for name in names:
        linear = module.get_submodule(name)
        w_max = linear.weight.detach().abs().amax(dim=0).float().clamp(min=1e-5)
        a_max = maxima[name].clamp(min=1e-5)
        scale = (a_max.pow(alpha) / w_max.pow(1 - alpha)).clamp(min=1e-5)
        module.set_submodule(name, SmoothedLinear(linear, scale))
        out.append(f"{name}.linear")
    return out


def encoder_shim(nlp: Any) -> Any:
    """The thinc shim that runs the transformer pipe's Hugging Face module."""
    hf = nlp.get_pipe("transformer").model.transformer
    shims = [shim for _, pipe in nlp.pipeline if hasattr(pipe, "model") for node in pipe.model.walk() for shim in node.shims
             if hasattr(getattr(shim, "_model", None), "encoder")]
    if len(shims) != 1 or shims[0]._model is not hf:
        raise SystemExit("expected one encoder, the transformer pipe's (a component with its own copy would not be measured)")
    return shims[0]


def r(x: float) -> float:
    return round(float(x), 4)


def install(shim: Any, module: torch.nn.Module) -> None:
    shim._model = module
    if hasattr(shim, "_hfmodel"):
        shim._hfmodel.transformer = module


def predict(nlp: Any, texts: List[str], n_words: int, batch_size: int) -> Tuple[List[List[CharSpan]], float]:
    """Every sentence's entities and the words/s of nlp.pipe over them (after a warm-up)."""
    list(nlp.pipe(texts[:32], batch_size=batch_size))
    start = time.perf_counter()
    docs = list(nlp.pipe(texts, batch_size=batch_size))
    seconds = time.perf_counter() - start
    return [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in docs], n_words / seconds


def machine() -> Tuple[str, Dict[str, Any]]:
    """A one-line description (model name first, as benchmarks/scripts/tables.py reads it) and the details."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in lscpu.splitlines() if ln.startswith("Flags")), [])
    has = {flag: flag in flags for flag in ("avx512_vnni", "avx512_bf16", "avx2")}
    listed = ", ".join(f"{flag} {'yes' if present else 'no'}" for flag, present in has.items())
    line = f"{model}; {listed}; 1 thread; load {os.getloadavg()[0]:.2f} at start"
    return line, {"lscpu_model_name": model, "flags": has, "quantized_engine": torch.backends.quantized.engine,
                  "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def scales_label(args: argparse.Namespace) -> Tuple[str, str]:
    """What the run rounds: the weights' int8 scales and the activations' (or "not rounded")."""
    if args.rounding == "bf16":
        return "bfloat16 (no int8)", "bfloat16 (no int8)"
    if args.rounding is not None:
        return (("per output channel" if args.rounding in ("weights", "both") else "not rounded"),
                ("per token" if args.rounding in ("activations", "both") else "not rounded"))
    return ("per output channel" if args.per_channel or args.per_token else "per tensor",
            "per token (precision int8)" if args.per_token else "per batch (quantize_dynamic)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", type=Path)
    parser.add_argument("pipeline")
    parser.add_argument("dev", help="CoNLL file whose first --limit sentences are used")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--variants", nargs="+", help="variant names (default: all of them)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    parser.add_argument("--per-token", action="store_true", help="int8 as precision int8 runs it: per-token activation scales")
    parser.add_argument("--outliers", type=float, default=None, help="with --per-token: fp32 for input columns above this |x|")
    parser.add_argument("--rounding", choices=("weights", "activations", "both", "bf16"), default=None,
                        help="fp32 products with one side rounded (see above)")
    parser.add_argument("--smooth", type=float, default=None, help="SmoothQuant migration strength alpha (0..1)")
    parser.add_argument("--calibration", type=int, default=128, help="sentences after the scored ones, for --smooth")
    args = parser.parse_args()
    if args.outliers is not None and (not args.per_token or args.rounding is not None):
        parser.error("--outliers takes --per-token and no --rounding")
    if args.rounding is not None and (args.per_token or args.per_channel or args.smooth is not None):
        parser.error("--rounding stands alone: no --per-token, --per-channel or --smooth")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=r"(?s).*(torch\.ao\.quantization is deprecated|quantize_per_tensor)")

    from spacy_maral.corpora.conll import read_conll
    from spacy_maral.evaluation.raw_text import char_prf, raw_sentences
    from spacy_maral.pipeline.int8 import Int8Linear, int8_matmul, quantize_rows
    from spacy_maral.pipeline.loading import load_pipeline

    class ProbeLinear(Int8Linear):
        """An Int8Linear whose product over the (rows, in) input is `product`: the forward's
        reshaping and bias once, for the probes below."""

        def product(self, x2: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.is_grad_enabled():
                return super().forward(x)
            shape = x.shape
            y = self.product(x.reshape(-1, shape[-1]).float())
            if self.bias is not None:
                y = y + self.bias
            return y.to(x.dtype).reshape(*shape[:-1], self.out_features)

    class OutlierInt8Linear(ProbeLinear):
        """Int8Linear with the batch's outlier input columns (largest |x| above the threshold) in fp32."""
        threshold = 6.0
        columns = [0, 0]  # outlier columns seen, columns seen

        def product(self, x2: torch.Tensor) -> torch.Tensor:
            self._quantize_weight()
            cols = (x2.abs().amax(dim=0) > self.threshold).nonzero().squeeze(1)
            OutlierInt8Linear.columns[0] += int(cols.numel())
            OutlierInt8Linear.columns[1] += int(x2.shape[1])
            if cols.numel():
                kept = x2.index_select(1, cols)
                x2 = x2.index_fill(1, cols, 0.0)
            q, scale = quantize_rows(x2)
            y = int8_matmul(q, self.weight_int8) * scale * self.weight_scale
            if cols.numel():
                y = y + kept @ self.weight.index_select(1, cols).t()
            return y

    class RoundedLinear(ProbeLinear):
        """An fp32 product with the operand(s) named by --rounding rounded to int8 (or bfloat16)."""

        def product(self, x2: torch.Tensor) -> torch.Tensor:
            w = self.weight.float()
            if args.rounding == "bf16":
                x2, w = x2.bfloat16().float(), w.bfloat16().float()
            if args.rounding in ("weights", "both"):
                q, scale = quantize_rows(w)
                w = q.float() * scale
            if args.rounding in ("activations", "both"):
                q, scale = quantize_rows(x2)
                x2 = q.float() * scale
            return x2 @ w.t()

    if args.outliers is not None:
        OutlierInt8Linear.threshold = args.outliers
    int8_linear = OutlierInt8Linear if args.outliers is not None else Int8Linear
    if args.rounding is not None:
        int8_linear = RoundedLinear
    swap = args.per_token or args.rounding is not None  # module swaps instead of quantize_dynamic

    weight_scales, activation_scales = scales_label(args)
    line, details = machine()
    nlp = load_pipeline(args.pipeline, precision="fp32")
    shim = encoder_shim(nlp)
    fp32 = shim._model  # never changed: every variant quantizes a deep copy of it
    names = linear_names(fp32)
    n_layers = int(fp32.config.num_hidden_layers)
    sets = variant_sets(names, n_layers)
    chosen = args.variants or list(sets)
    unknown = [v for v in chosen if v not in sets]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {' '.join(sets)}")

    all_docs = list(itertools.islice(read_conll(args.dev), args.limit + args.calibration))
    gold_docs = all_docs[: args.limit]
    calibration = [s.text for s in raw_sentences(all_docs[args.limit:])]
    sentences = raw_sentences(gold_docs)
    texts = [s.text for s in sentences]
    gold = [s.gold for s in sentences]
    n_words = sum(len(doc) for doc in gold_docs)
    reference, fp32_wps = predict(nlp, texts, n_words, args.batch_size)
    ref_gold = char_prf(gold, reference)
    n_ref = sum(len(set(r)) for r in reference)
    print(f"{len(texts)} sentences, {n_words} words, {n_ref} fp32 entities, {len(names)} Linear modules, {n_layers} layers; "
          f"fp32: gold F1 {r(ref_gold['ents_f'])}, {fp32_wps:.0f} words/s", flush=True)
    out: Dict[str, Any] = {
        "claim": "int8 of the encoder's Linear modules: which ones cost entity agreement with fp32",
        "measured": f"per variant (a set of the encoder's nn.Linear modules rounded as weight_scales and activation_scales "
                    f"say, the rest fp32): entity agreement with the fp32 pipeline, raw-text P/R/F1 against gold by exact "
                    f"character offsets and words/s of nlp.pipe (batch size {args.batch_size}, 1 thread, one pass after a "
                    f"32-sentence warm-up) on the first {len(texts)} sentences of the dev file",
        "command": " ".join(["python benchmarks/scripts/int8_sensitivity.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": line,
        "machine_details": details,
        "torch": torch.__version__,
        "weight_scales": weight_scales,
        "activation_scales": activation_scales,
        "outlier_threshold": args.outliers,
        "rounding_only": args.rounding,
        "smoothquant_alpha": args.smooth, "calibration_sentences": len(calibration) if args.smooth is not None else 0,
        "settings": {"pipeline": args.pipeline, "dev": args.dev, "sentences": len(texts), "words": n_words,
                     "batch_size": args.batch_size, "linear_modules": len(names), "layers": n_layers},
        "fp32": {"entities": n_ref, "words_per_s": round(fp32_wps, 1), "gold_p": r(ref_gold["ents_p"]),
                 "gold_r": r(ref_gold["ents_r"]), "gold_f": r(ref_gold["ents_f"])},
        "variants": [],
    }
    header = f"{'variant':<20}{'int8':>6}{'agree':>8}{'agr F1':>8}{'sents=':>8}{'gold F1':>9}{'words/s':>9}{'x fp32':>8}{'s':>7}"
    print(header, flush=True)
    for name in chosen:
        start = time.perf_counter()
        OutlierInt8Linear.columns[:] = [0, 0]
        module = copy.deepcopy(fp32)
        targets = sorted(sets[name])
        if targets and args.smooth is not None:
            install(shim, module)
            maxima = activation_maxima(module, targets, lambda: list(nlp.pipe(calibration, batch_size=args.batch_size)))
            targets = smooth(module, targets, maxima, args.smooth)
        if targets and swap:
            for target in targets:
                module.set_submodule(target, int8_linear(module.get_submodule(target)))
        elif targets:
            spec: Any = set(targets)
            if args.per_channel:
                spec = {n: torch.ao.quantization.per_channel_dynamic_qconfig for n in targets}
            module = torch.ao.quantization.quantize_dynamic(module, qconfig_spec=spec, dtype=torch.qint8, inplace=True)
        quantized = sum(isinstance(m, (torch.ao.nn.quantized.dynamic.Linear, Int8Linear)) for m in module.modules())
        install(shim, module)
        predicted, wps = predict(nlp, texts, n_words, args.batch_size)
        same = sum(len(set(p) & set(q)) for p, q in zip(reference, predicted))
        agreement = char_prf(reference, predicted)
        scores = char_prf(gold, predicted)
        result = {
            "variant": name, "quantized_linear": quantized, "entities": sum(len(set(p)) for p in predicted),
            "agreement": r(same / n_ref if n_ref else 1.0), "agreement_f1": r(agreement["ents_f"]),
            "sentences_identical": r(sum(set(p) == set(q) for p, q in zip(reference, predicted)) / len(texts)),
            "gold_p": r(scores["ents_p"]), "gold_r": r(scores["ents_r"]), "gold_f": r(scores["ents_f"]),
            "words_per_s": round(wps, 1), "x_fp32": round(wps / fp32_wps, 2),
            "seconds": round(time.perf_counter() - start, 1),
        }
        if args.outliers is not None:
            seen = OutlierInt8Linear.columns
            result["outlier_column_share"] = r(seen[0] / seen[1] if seen[1] else 0.0)
        out["variants"].append(result)
        args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")
        print(f"{name:<20}{quantized:>6}{result['agreement']:>8.3f}{result['agreement_f1']:>8.3f}"
              f"{result['sentences_identical']:>8.3f}{result['gold_f']:>9.3f}{wps:>9.0f}{result['x_fp32']:>8.2f}"
              f"{result['seconds']:>7.1f}", flush=True)
        install(shim, fp32)
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
