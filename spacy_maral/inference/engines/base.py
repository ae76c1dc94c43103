"""What every engine runs: `PipelineWorker` loads a pipeline once and runs a task
function on whole partitions; `WorkerSpec` says how it loads the pipeline.
"""
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from spacy_maral.pipeline.encoder_runtime import load_pipeline
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.threads import set_torch_threads


def model_id(model: Any) -> str:
    """A model's identity: the resolved path of a pipeline directory (so that workers
    started elsewhere, and a manifest, see the same one), else the name as given (an
    installed package)."""
    path = Path(str(model))
    return str(path.resolve()) if path.exists() else str(model)


# a partition's work: task(nlp, payload, **settings) -> result dict
Task = Callable[..., Dict[str, Any]]
Item = Tuple[Any, Any]  # (key kept on the driver, payload sent to a worker)


@dataclass
class WorkerSpec:
    """How a worker loads its pipeline.

    model (str): a pipeline directory or an installed package name (spacy.load); on a
        cluster it must load on every node (the same path on shared storage, or the
        package installed everywhere).
    threads (int): torch CPU threads of the worker (0 = leave torch's default).
    gpu_id (int): GPU to run on (-1 = CPU).
    inference_tau (Optional[float]): override maral_ner's inference_tau (pseudo-label).
    precision (str): the encoder's precision, "auto", "fp32" or "bf16"
        (spacy_maral.encoder_runtime.v1).
    ensemble (Tuple[str, ...]): more pipelines (paths or package names, loaded like
        `model`, with the same inference_tau and precision) that each task gets as its
        `ensemble` argument: pseudo-label averages their span probabilities with the
        first pipeline's.
    """

    model: str
    threads: int = 0
    gpu_id: int = -1
    inference_tau: Optional[float] = None
    precision: str = "auto"
    ensemble: Tuple[str, ...] = ()


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (ru_maxrss)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024, 1)


def current_rss_mb() -> float:
    """Resident memory of this process now, in MB (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024), 1)


class PipelineWorker:
    """A loaded pipeline that processes partitions; the body of every engine's workers.

    spec (WorkerSpec): how to load the pipeline (ignored when `nlp` is given).
    nlp (Optional[Language]): an already loaded pipeline (the in-process engine).
    ensemble (Optional[Sequence[Language]]): the spec's ensemble, already loaded (with `nlp`).
    """

    def __init__(self, spec: WorkerSpec, nlp=None, ensemble: Optional[Sequence[Any]] = None) -> None:
        self.spec = spec
        set_torch_threads(spec.threads)
        if spec.gpu_id >= 0:
            from thinc.api import require_gpu

            require_gpu(spec.gpu_id)
        self.nlp = nlp if nlp is not None else load_pipeline(spec.model, precision=spec.precision)
        if ensemble is None:
            ensemble = [load_pipeline(model, precision=spec.precision) for model in spec.ensemble]
        if len(ensemble) != len(spec.ensemble):
            raise ValueError(f"the worker was given {len(ensemble)} ensemble pipelines for the {len(spec.ensemble)} of its spec")
        self.ensemble = list(ensemble)
        if spec.inference_tau is not None:
            for pipeline in [self.nlp, *self.ensemble]:
                find_maral_ner(pipeline).inference_tau = spec.inference_tau

    def run(self, task: Task, payload: Any, **kwargs) -> Dict[str, Any]:
        """Process one partition.

        task (Task): a module-level function task(nlp, payload, **kwargs) -> dict (it
            pickles by name, for worker processes and Ray actors), e.g.
            `spacy_maral.inference.annotate.worker.annotate_records` (payload: a list of
            (id, text, file, line) records) or
            `spacy_maral.inference.pseudo_label.label_shard_bytes` (payload: DocBin bytes).
        payload (Any): the partition.
        kwargs: the task's settings (batch_size, ...).
        RETURNS (Dict[str, Any]): the task's result, plus "pid", "peak_rss_mb", "rss_mb"
            "seconds" and "cpu_seconds" (this worker's process id, its peak memory (model
            loading included) and its memory now, the partition's wall and CPU time).
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        if self.ensemble:
            kwargs = {**kwargs, "ensemble": self.ensemble}
        result = task(self.nlp, payload, **kwargs)
        result.update(pid=os.getpid(), peak_rss_mb=peak_rss_mb(), rss_mb=current_rss_mb(),
                      seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu_start)
        return result
