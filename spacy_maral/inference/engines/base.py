"""What every engine runs: `PipelineWorker` loads a pipeline once and runs a task
function on whole partitions; `WorkerSpec` says how it loads the pipeline; `Done` is a
partition's result with the worker's measurements; `Engine` is what every engine offers
(local.InProcessEngine, local.ProcessEngine, ray.RayEngine), used as a context manager.
"""
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, Iterable, Iterator, Optional, Protocol, Sequence, Tuple, TypeVar, Union

from spacy.language import Language

from spacy_maral.pipeline.loading import load_pipeline
from spacy_maral.pipeline.maral_ner import find_maral_ner
from spacy_maral.threads import set_torch_threads

K = TypeVar("K")  # what the driver keeps of a partition while a worker runs it (the partition itself)
P = TypeVar("P")  # a partition's payload, sent to a worker
R = TypeVar("R")  # a task's result
# a partition's work, a module-level function (it pickles by name): task(nlp, payload, **settings) -> result
Task = Callable[..., R]


def model_id(model: Union[str, Path]) -> str:
    """A model's identity: the resolved path of a pipeline directory (so that workers
    started elsewhere, and a manifest, see the same one), else the name as given (an
    installed package)."""
    path = Path(str(model))
    return str(path.resolve()) if path.exists() else str(model)


@dataclass
class WorkerSpec:
    """How a worker loads its pipeline.

    model (str): a pipeline directory or an installed package name (spacy.load); on a
        cluster it must load on every node (the same path on shared storage, or the
        package installed everywhere).
    threads (int): torch CPU threads of the worker (0 = leave torch's default).
    gpu_id (int): GPU to run on (-1 = CPU).
    inference_tau (Optional[float]): override maral_ner's inference_tau (pseudo-label).
    precision (str): the encoder's precision, "auto", "fp32", "bf16" or "int8"
        (spacy_maral.EncoderRuntime.v1, set by load_pipeline).
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


@dataclass
class WorkerStats:
    """What a worker measured while it processed one partition.

    pid (int): the worker's process id.
    peak_rss_mb (float): its peak memory so far (model loading included), in MB.
    rss_mb (float): its memory after the partition, in MB.
    seconds (float): the partition's wall time.
    cpu_seconds (float): the partition's CPU time.
    """

    pid: int
    peak_rss_mb: float
    rss_mb: float
    seconds: float
    cpu_seconds: float


@dataclass
class Done(Generic[R]):
    """A partition processed by a worker: the task's result and the worker's measurements."""

    result: R
    worker: WorkerStats


class Engine(Protocol):
    """What runs a task on the partitions of a corpus, on one or more workers that each
    load the pipeline once. Enter it (`with make_engine(...) as engine:`) to start its
    workers; leaving the block stops them.

    name (str): "local" or "ray".
    spec (WorkerSpec): how its workers load the pipeline.
    """

    name: str
    spec: WorkerSpec

    @property
    def n_workers(self) -> int:
        """How many workers run side by side."""
        ...

    def __enter__(self) -> "Engine":
        ...

    def __exit__(self, *exc: object) -> None:
        ...

    def map(self, task: Task[R], items: Iterable[Tuple[K, P]], **settings: object) -> Iterator[Tuple[K, Done[R]]]:
        """Run `task` on every (key, payload), read lazily; yield (key, Done) as each
        finishes (not necessarily in input order).

        task (Task[R]): the partitions' work (PipelineWorker.run).
        items (Iterable[Tuple[K, P]]): (key, payload) pairs; the key stays here.
        settings: the task's settings (batch_size, ...).
        """
        ...


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

    def __init__(self, spec: WorkerSpec, nlp: Optional[Language] = None, ensemble: Optional[Sequence[Language]] = None) -> None:
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

    def run(self, task: Task[R], payload: object, **settings: object) -> Done[R]:
        """Process one partition.

        task (Task[R]): a module-level function task(nlp, payload, **settings) (it
            pickles by name, for worker processes and Ray actors), e.g.
            `spacy_maral.inference.annotate.task.annotate_partition` (payload: a
            partition's plan) or `spacy_maral.inference.pseudo_label.task.label_shard_bytes`
            (payload: DocBin bytes).
        payload (object): the partition.
        settings: the task's settings (batch_size, ...); a worker with an ensemble adds
            `ensemble`.
        RETURNS (Done[R]): the task's result, and this worker's process id, peak memory
            (model loading included) and memory now, the partition's wall and CPU time.
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        if self.ensemble:
            settings = {**settings, "ensemble": self.ensemble}
        result = task(self.nlp, payload, **settings)
        stats = WorkerStats(pid=os.getpid(), peak_rss_mb=peak_rss_mb(), rss_mb=current_rss_mb(),
                            seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu_start)
        return Done(result, stats)
