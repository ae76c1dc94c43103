"""Engines on this machine: one worker in this process, or N worker processes."""
import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import replace
from typing import Dict, Iterable, Iterator, Optional, Sequence, Tuple

from spacy.language import Language

from spacy_maral.inference.engines.base import Done, K, P, PipelineWorker, R, Task, WorkerSpec
from spacy_maral.threads import cpu_share


class InProcessEngine:
    """One worker in this process: partitions are processed one after the other.

    spec (WorkerSpec): how to load the pipeline.
    nlp (Optional[Language]): a pipeline already loaded in this process (then `spec`
        only names it).
    ensemble (Optional[Sequence[Language]]): with `nlp`: the spec's ensemble, already loaded.
    """

    name = "local"

    def __init__(self, spec: WorkerSpec, nlp: Optional[Language] = None, ensemble: Optional[Sequence[Language]] = None) -> None:
        self.spec = spec
        self._nlp = nlp
        self._ensemble = ensemble
        self.worker: Optional[PipelineWorker] = None

    def __enter__(self) -> "InProcessEngine":
        self.worker = PipelineWorker(self.spec, nlp=self._nlp, ensemble=self._ensemble)
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker = None

    @property
    def n_workers(self) -> int:
        return 1

    def map(self, task: Task[R], items: Iterable[Tuple[K, P]], **settings: object) -> Iterator[Tuple[K, Done[R]]]:
        """Run `task` on every (key, payload), one after the other (Engine.map)."""
        if self.worker is None:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        for key, payload in items:
            yield key, self.worker.run(task, payload, **settings)


_PROCESS_WORKER: Optional[PipelineWorker] = None
_PROCESS_WORKER_ERROR: Optional[Exception] = None


def _init_process_worker(spec: WorkerSpec) -> None:
    """Load the worker's pipeline; an error is kept and raised by the first call, so that
    the driver gets it (e.g. the damaged file named) instead of a broken pool."""
    global _PROCESS_WORKER, _PROCESS_WORKER_ERROR
    try:
        _PROCESS_WORKER = PipelineWorker(spec)
    except Exception as err:
        _PROCESS_WORKER_ERROR = err


def _process_worker_ready(wait_s: float) -> int:
    if _PROCESS_WORKER_ERROR is not None:
        raise _PROCESS_WORKER_ERROR
    time.sleep(wait_s)  # long enough for the other workers to take the other calls
    return os.getpid()


def _run_in_process_worker(task: Task[R], payload: object, settings: Dict[str, object]) -> Done[R]:
    if _PROCESS_WORKER_ERROR is not None:
        raise _PROCESS_WORKER_ERROR
    assert _PROCESS_WORKER is not None
    return _PROCESS_WORKER.run(task, payload, **settings)


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
        threads = spec.threads or cpu_share(n_process)
        self.spec = replace(spec, threads=threads)
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
            initializer=_init_process_worker, initargs=(self.spec,),
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

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def map(self, task: Task[R], items: Iterable[Tuple[K, P]], **settings: object) -> Iterator[Tuple[K, Done[R]]]:
        """Run `task` on every (key, payload) in the worker processes, as each finishes
        (not in input order; Engine.map)."""
        if self.pool is None:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        running: Dict["Future[Done[R]]", K] = {}
        for key, payload in items:
            while len(running) >= self.in_flight:
                yield from self._collect(running)
            running[self.pool.submit(_run_in_process_worker, task, payload, settings)] = key
        while running:
            yield from self._collect(running)

    @staticmethod
    def _collect(running: Dict["Future[Done[R]]", K]) -> Iterator[Tuple[K, Done[R]]]:
        done, _ = wait(list(running), return_when=FIRST_COMPLETED)
        for future in done:
            key = running.pop(future)
            yield key, future.result()
