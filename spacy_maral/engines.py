"""Engines that run a spaCy pipeline over partitions of a corpus.

A *worker* (PipelineWorker) loads the pipeline once and processes whole partitions:
`annotate` partitions (texts -> entity rows) and `pseudo_label` shards (target Docs ->
soft labels). An *engine* sends partitions to workers and yields their results as they
finish, with at most a few partitions in flight per worker, so the driver's memory does
not grow with the corpus:

- InProcessEngine: one worker in this process (`--engine local`, the default);
- ProcessEngine: N worker processes on this machine (`--engine local --n-process N`);
- RayEngine (spacy_maral.ray_engine): one Ray actor per worker, on a local Ray
  instance or a cluster (`--engine ray`).

Every engine runs the same worker code on the same partitions (a partition's batches
depend on that partition alone), so their outputs are identical.
"""
import os
import resource
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, Union

from .util import logger


@dataclass
class WorkerSpec:
    """How a worker loads its pipeline.

    model (str): a pipeline directory or an installed package name (spacy.load); on a
        cluster it must load on every node (the same path on shared storage, or the
        package installed everywhere).
    threads (int): torch CPU threads of the worker (0 = leave torch's default).
    gpu_id (int): GPU to run on (-1 = CPU).
    inference_tau (Optional[float]): override maral_ner's inference_tau (pseudo-label).
    """

    model: str
    threads: int = 0
    gpu_id: int = -1
    inference_tau: Optional[float] = None


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
    """

    def __init__(self, spec: WorkerSpec, nlp=None) -> None:
        import spacy

        self.spec = spec
        if spec.threads > 0:
            import torch

            torch.set_num_threads(spec.threads)
        if spec.gpu_id >= 0:
            from thinc.api import require_gpu

            require_gpu(spec.gpu_id)
        self.nlp = nlp if nlp is not None else spacy.load(spec.model)
        if spec.inference_tau is not None:
            from .component import find_maral_ner

            find_maral_ner(self.nlp).inference_tau = spec.inference_tau

    def run(self, task: str, payload: Any, **kwargs) -> Dict[str, Any]:
        """Process one partition.

        task (str): "annotate" (payload: a list of (id, text, file, line) records; see
            annotate.annotate_records) or "pseudo_label" (payload: DocBin bytes; see
            pseudo_label.label_shard_bytes).
        payload (Any): the partition.
        kwargs: the task's settings (batch_size, ...).
        RETURNS (Dict[str, Any]): the task's result, plus "pid", "peak_rss_mb", "rss_mb"
            "seconds" and "cpu_seconds" (this worker's process id, its peak memory (model
            loading included) and its memory now, the partition's wall and CPU time).
        """
        start, cpu_start = time.perf_counter(), time.process_time()
        if task == "annotate":
            from .annotate import annotate_records

            result = annotate_records(self.nlp, payload, **kwargs)
        elif task == "pseudo_label":
            from .pseudo_label import label_shard_bytes

            result = label_shard_bytes(self.nlp, payload, **kwargs)
        else:
            raise ValueError(f"unknown task {task!r}")
        result.update(pid=os.getpid(), peak_rss_mb=peak_rss_mb(), rss_mb=current_rss_mb(),
                      seconds=time.perf_counter() - start, cpu_seconds=time.process_time() - cpu_start)
        return result


Item = Tuple[Any, Any]  # (key kept on the driver, payload sent to a worker)


class InProcessEngine:
    """One worker in this process: partitions are processed one after the other.

    spec (WorkerSpec): how to load the pipeline.
    nlp (Optional[Language]): a pipeline already loaded in this process (then `spec`
        only names it).
    """

    name = "local"

    def __init__(self, spec: WorkerSpec, nlp=None) -> None:
        self.spec = spec
        self._nlp = nlp
        self.worker: Optional[PipelineWorker] = None

    def __enter__(self) -> "InProcessEngine":
        self.worker = PipelineWorker(self.spec, nlp=self._nlp)
        return self

    def __exit__(self, *exc) -> None:
        self.worker = None

    @property
    def n_workers(self) -> int:
        return 1

    def map(self, task: str, items: Iterable[Item], **kwargs) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        """Run `task` on every (key, payload); yield (key, result) as each finishes.

        task (str): "annotate" or "pseudo_label" (PipelineWorker.run).
        items (Iterable[Item]): (key, payload) pairs, read lazily.
        kwargs: the task's settings.
        """
        if self.worker is None:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        for key, payload in items:
            yield key, self.worker.run(task, payload, **kwargs)


_PROCESS_WORKER: Optional[PipelineWorker] = None


def _init_process_worker(spec_dict: Dict[str, Any]) -> None:
    global _PROCESS_WORKER
    _PROCESS_WORKER = PipelineWorker(WorkerSpec(**spec_dict))


def _process_worker_ready(wait_s: float) -> int:
    time.sleep(wait_s)  # long enough for the other workers to take the other calls
    return os.getpid()


def _run_in_process_worker(task: str, payload: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    assert _PROCESS_WORKER is not None
    return _PROCESS_WORKER.run(task, payload, **kwargs)


class ProcessEngine:
    """N worker processes on this machine (spawned), each loading the pipeline once.

    spec (WorkerSpec): how each worker loads the pipeline; threads 0 gives each worker
        cpu_count // n_process torch threads.
    n_process (int): worker processes.
    in_flight_per_worker (int): partitions queued per worker, so none waits idle
        while the driver reads the next partition.
    """

    name = "local"

    def __init__(self, spec: WorkerSpec, n_process: int, in_flight_per_worker: int = 2) -> None:
        if n_process < 2:
            raise ValueError("ProcessEngine needs n_process >= 2 (use InProcessEngine for one)")
        threads = spec.threads or max(1, (os.cpu_count() or 1) // n_process)
        self.spec = WorkerSpec(**{**asdict(spec), "threads": threads})
        self.n_process = n_process
        self.in_flight = max(1, in_flight_per_worker) * n_process
        self.pool: Optional[ProcessPoolExecutor] = None

    @property
    def n_workers(self) -> int:
        return self.n_process

    def __enter__(self) -> "ProcessEngine":
        import multiprocessing

        self.pool = ProcessPoolExecutor(
            max_workers=self.n_process, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_process_worker, initargs=(asdict(self.spec),),
        )
        try:  # start every worker (each loads the pipeline) before the first partition
            pids: set = set()
            for _ in range(5):
                pids.update(f.result() for f in [self.pool.submit(_process_worker_ready, 0.2) for _ in range(self.n_process)])
                if len(pids) >= self.n_process:
                    break
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def map(self, task: str, items: Iterable[Item], **kwargs) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        """Run `task` on every (key, payload) in the worker processes; yield (key, result)
        as each finishes (not in input order). See InProcessEngine.map."""
        if self.pool is None:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        running: Dict[Future, Any] = {}
        for key, payload in items:
            while len(running) >= self.in_flight:
                yield from self._collect(running)
            running[self.pool.submit(_run_in_process_worker, task, payload, kwargs)] = key
        while running:
            yield from self._collect(running)

    @staticmethod
    def _collect(running: Dict[Future, Any]) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in done:
            key = running.pop(future)
            yield key, future.result()


def make_engine(
    engine: str,
    model: Union[str, Path],
    *,
    n_process: int = 1,
    threads: int = 0,
    gpu_id: int = -1,
    inference_tau: Optional[float] = None,
    nlp=None,
    address: Optional[str] = None,
    num_actors: int = 0,
    cpus_per_actor: int = 1,
    gpus_per_actor: float = 0.0,
):
    """The engine for a command line's --engine and its options.

    engine (str): "local" or "ray".
    model (Union[str, Path]): the pipeline (directory or package name).
    n_process (int): local engine: worker processes (1 = in this process).
    threads (int): torch threads per worker (0 = default: torch's for one local process,
        cpu_count // n_process for several, cpus_per_actor for Ray actors).
    gpu_id (int): local engine: GPU to use (-1 = CPU).
    inference_tau (Optional[float]): override maral_ner's inference_tau.
    nlp (Optional[Language]): local engine, one process: the pipeline already loaded.
    address (Optional[str]): ray: cluster address ("auto" = the running cluster); None
        starts a local Ray instance for this run.
    num_actors (int): ray: actors (0 = as many as the cluster's CPUs, or GPUs, allow).
    cpus_per_actor (int): ray: CPUs reserved by each actor (and its torch threads).
    gpus_per_actor (float): ray: GPUs reserved by each actor (0 = CPU actors).
    RETURNS: an engine, to be used as a context manager.
    """
    model = str(Path(model).resolve()) if Path(model).exists() else str(model)  # actors may start elsewhere
    if engine == "local":
        spec = WorkerSpec(model=model, threads=threads, gpu_id=gpu_id, inference_tau=inference_tau)
        if n_process > 1:
            return ProcessEngine(spec, n_process)
        return InProcessEngine(spec, nlp=nlp)
    if engine == "ray":
        if n_process > 1:
            logger.warning("--n-process is for the local engine; the Ray engine runs --num-actors actors")
        from .ray_engine import RayEngine

        spec = WorkerSpec(model=model, threads=threads, gpu_id=-1, inference_tau=inference_tau)
        return RayEngine(spec, address=address, num_actors=num_actors, cpus_per_actor=cpus_per_actor, gpus_per_actor=gpus_per_actor)
    raise ValueError(f"unknown engine {engine!r}: use 'local' or 'ray'")
