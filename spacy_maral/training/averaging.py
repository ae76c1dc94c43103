"""Weight averaging of trained pipelines: checkpoint averaging and model soups.

The uniform mean of the weights of several pipelines of one architecture: the
checkpoints of one run (checkpoint averaging, Schmidt, Vulic and Glavas 2023, "Free
lunch: robust cross-lingual transfer via model checkpoint averaging") or runs that
started from the same weights (a "model soup"). Every trainable weight is averaged: the
torch parameters of each pipe (the transformer's, the span head's) and thinc's own
parameters. So are maral_ner's class means, its classifier: they are estimated from
the span vectors of the weights they were saved with, and the averaged weights need
the averaged means (with the last checkpoint's means, the averages of one stage-2 run
lost 2 to 11 F1 on es/dev; with the averaged means they did not: BENCHMARKS.md).
Everything else (the configuration, the vocabulary, the labels, the adaptation state)
is the last input's.
"""
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy
from spacy.language import Language
from thinc.api import Model, PyTorchShim

from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.maral_ner import MaralNER
from spacy_maral.training.mixing import mean_factors

WeightRef = Tuple[Callable[[], numpy.ndarray], Callable[[numpy.ndarray], None]]


def pipeline_weights(nlp: Language) -> Dict[str, WeightRef]:
    """The trainable weights of every pipe, by a name stable across saves and loads.

    nlp (Language): the pipeline.
    RETURNS (Dict[str, WeightRef]): for each weight, a (read, write) pair of functions:
        read() gives a float array copy, write(array) sets the weight from an array.
    """
    refs: Dict[str, WeightRef] = {}
    seen = set()
    for pipe_name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if not isinstance(model, Model):
            continue
        for i, node in enumerate(model.walk()):
            prefix = f"{pipe_name}/{i}:{node.name}"
            for name in node.param_names:
                if node.has_param(name):
                    refs[f"{prefix}/{name}"] = _thinc_ref(node, name)
            for j, shim in enumerate(node.shims):
                if not isinstance(shim, PyTorchShim) or id(shim) in seen:
                    continue
                seen.add(id(shim))
                for pname, param in shim._model.named_parameters():
                    refs[f"{prefix}/shim{j}/{pname}"] = _torch_ref(param)
    return refs


def _thinc_ref(node: Model, name: str) -> WeightRef:
    def read() -> numpy.ndarray:
        return numpy.array(node.ops.to_numpy(node.get_param(name)), copy=True)

    def write(value: numpy.ndarray) -> None:
        old = node.get_param(name)
        node.set_param(name, node.ops.asarray(value.astype(old.dtype)))

    return read, write


def _torch_ref(param) -> WeightRef:
    import torch

    def read() -> numpy.ndarray:
        return param.detach().to("cpu", copy=True).numpy()

    def write(value: numpy.ndarray) -> None:
        with torch.no_grad():
            param.copy_(torch.from_numpy(value).to(dtype=param.dtype, device=param.device))

    return read, write


def average_pipelines(
    paths: Sequence[Path],
    load: Optional[Callable[[Path], Language]] = None,
    progress: Optional[Callable[[int, int, Path], None]] = None,
    weights: Optional[Sequence[float]] = None,
) -> Language:
    """Load the pipelines at `paths` and return the last one with the mean of all their
    weights and of maral_ner's class means (or their weighted mean: e.g. a teacher and
    its student with weights 1 - a and a, the interpolation of WiSE-FT).

    The sums are kept in float64 and rounded once, so weights that are equal in every
    input (frozen ones) come out unchanged, bit for bit. The class means are left as a
    finished epoch leaves them (the running means of the next epoch empty).

    paths (Sequence[Path]): pipeline directories of the same architecture and labels
        (one alone: its weights and predictions stay as they are).
    load (Optional[Callable[[Path], Language]]): how to load one (default spacy.load, naming
        a damaged file: pipeline.folder.load_naming_the_damaged_file).
    progress (Optional[Callable[[int, int, Path], None]]): called as (i, n, path) before
        each pipeline is loaded.
    weights (Optional[Sequence[float]]): one non-negative weight per path, in order
        (normalized to sum to 1); None: the uniform mean.
    RETURNS (Language): the last pipeline of `paths`, its weights replaced by the mean.
    RAISES (ValueError): no paths, weights that mean_factors refuses, or a pipeline
        whose pipes, labels or weight shapes differ from the last one's (named in the
        message).
    """
    from spacy_maral.pipeline.folder import load_naming_the_damaged_file

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("average: no pipelines given")
    factors = mean_factors(weights, len(paths))
    load = load or load_naming_the_damaged_file
    n = len(paths)
    if progress:
        progress(1, n, paths[-1])
    base = load(paths[-1])
    base_refs = pipeline_weights(base)
    if not base_refs:
        raise ValueError(f"average: {paths[-1]} has no trainable weights")
    sums = {key: factors[-1] * read().astype(numpy.float64) for key, (read, _) in base_refs.items()}
    mean_sums = {name: factors[-1] * means for name, means in class_means_of(base).items()}
    base_labels = _labels(base)
    for i, path in enumerate(paths[:-1], start=2):
        if progress:
            progress(i, n, path)
        other = load(path)
        if other.pipe_names != base.pipe_names:
            raise ValueError(f"average: {path} has the pipes {other.pipe_names}, {paths[-1]} has {base.pipe_names}")
        if _labels(other) != base_labels:
            raise ValueError(f"average: the labels of {path} ({_labels(other)}) differ from those of {paths[-1]} ({base_labels})")
        refs = pipeline_weights(other)
        if set(refs) != set(base_refs):
            missing = sorted(set(base_refs) ^ set(refs))[:3]
            raise ValueError(f"average: {path} has other weights than {paths[-1]} (e.g. {missing}): another architecture")
        for key, (read, _) in refs.items():
            value = read()
            if value.shape != sums[key].shape:
                raise ValueError(
                    f"average: the weight {key} of {path} has the shape {value.shape}, "
                    f"{sums[key].shape} in {paths[-1]}: another architecture"
                )
            sums[key] += factors[i - 2] * value
        for name, means in class_means_of(other).items():
            mean_sums[name] += factors[i - 2] * means
        del other
    total = sum(factors)
    for key, (_, write) in base_refs.items():
        write(sums[key] / total)
    set_class_means(base, {name: value / total for name, value in mean_sums.items()})
    return base


def class_means_of(nlp: Language) -> Dict[str, numpy.ndarray]:
    """The class means (C, d, float64) each maral_ner of `nlp` classifies with, by pipe name."""
    out = {}
    for name, pipe in nlp.pipeline:
        if isinstance(pipe, MaralNER) and pipe.model.has_ref("head"):
            out[name] = get_span_head(pipe.model).class_means().detach().cpu().numpy().astype(numpy.float64)
    return out


def set_class_means(nlp: Language, means: Dict[str, numpy.ndarray]) -> None:
    """Make `means` the class means of the maral_ner pipes they are named by."""
    import torch

    for name, value in means.items():
        get_span_head(nlp.get_pipe(name).model).set_class_means(torch.from_numpy(value))


def _labels(nlp: Language) -> List[Tuple[str, Tuple[str, ...]]]:
    """Each pipe's labels, in their order (the order of the class-indexed weights)."""
    out = []
    for name, pipe in nlp.pipeline:
        labels = getattr(pipe, "classes", None)
        if labels is None:
            labels = getattr(pipe, "labels", None)
        if labels is not None:
            out.append((name, tuple(labels)))
    return out
