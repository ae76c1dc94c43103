"""Engines that run a spaCy pipeline over partitions of a corpus.

A *worker* (`base.PipelineWorker`) loads the pipeline once and processes whole
partitions with a task function (`annotate` partitions: texts -> entity rows;
`pseudo-label` shards: target Docs -> soft labels). An *engine* sends partitions to
workers and yields their results as they finish, with at most a few partitions in
flight per worker, so the driver's memory does not grow with the corpus:

- `local.InProcessEngine`: one worker in this process (`--engine local`, the default);
- `local.ProcessEngine`: N worker processes on this machine (`--n-process N`);
- `ray.RayEngine`: Ray Data's `map_batches` with an actor pool, on a local Ray
  instance or a cluster (`--engine ray`).

Every engine runs the same worker code on the same partitions (a partition's batches
depend on that partition alone), so their outputs are identical.
"""
from pathlib import Path
from typing import Optional, Sequence, Union

from spacy_maral.inference.engines.base import Done, Engine, PipelineWorker, WorkerSpec, WorkerStats, model_id
from spacy_maral.inference.engines.local import InProcessEngine, ProcessEngine
from spacy_maral.inference.engines.ray import RayEngine
from spacy_maral.util import logger

__all__ = ["Done", "Engine", "InProcessEngine", "PipelineWorker", "ProcessEngine", "RayEngine", "WorkerSpec", "WorkerStats", "make_engine"]


def make_engine(
    engine: str,
    model: Union[str, Path],
    *,
    n_process: int = 1,
    threads: int = 0,
    gpu_id: int = -1,
    inference_tau: Optional[float] = None,
    precision: str = "auto",
    address: Optional[str] = None,
    num_actors: int = 0,
    cpus_per_actor: int = 1,
    gpus_per_actor: float = 0.0,
    connect_timeout: float = 60.0,
    ensemble: Sequence[Union[str, Path]] = (),
) -> Engine:
    """The engine for a command line's --engine and its options.

    engine (str): "local" or "ray".
    model (Union[str, Path]): the pipeline (directory or package name).
    n_process (int): local engine: worker processes (1 = in this process).
    threads (int): torch threads per worker (0 = default: torch's for one local process,
        cpu_count // n_process for several, cpus_per_actor for Ray actors).
    gpu_id (int): local engine: GPU to use (-1 = CPU).
    inference_tau (Optional[float]): override maral_ner's inference_tau.
    precision (str): the encoder's precision in the workers ("auto", "fp32", "bf16", "int8").
    address (Optional[str]): ray: cluster address ("auto" = the running cluster); None
        starts a local Ray instance for this run.
    num_actors (int): ray: actors (0 = as many as the cluster's CPUs, or GPUs, allow).
    cpus_per_actor (int): ray: CPUs reserved by each actor (and its torch threads).
    gpus_per_actor (float): ray: GPUs reserved by each actor (0 = CPU actors).
    connect_timeout (float): ray: seconds to reach the cluster at `address` before failing.
    ensemble (Sequence[Union[str, Path]]): more pipelines each worker loads beside
        `model` (WorkerSpec.ensemble: pseudo-label's teacher ensemble).
    RETURNS (Engine): the engine, to be entered: `with make_engine(...) as engine:`.
    """
    model = model_id(model)  # actors may start elsewhere: a directory's absolute path
    members = tuple(model_id(m) for m in ensemble)
    if engine == "local":
        spec = WorkerSpec(model=model, threads=threads, gpu_id=gpu_id, inference_tau=inference_tau, precision=precision, ensemble=members)
        if n_process > 1:
            return ProcessEngine(spec, n_process)
        return InProcessEngine(spec)
    if engine == "ray":
        if n_process > 1:
            logger.warning("--n-process is for the local engine; the Ray engine runs --num-actors actors")
        spec = WorkerSpec(model=model, threads=threads, gpu_id=-1, inference_tau=inference_tau, precision=precision, ensemble=members)
        return RayEngine(spec, address=address, num_actors=num_actors, cpus_per_actor=cpus_per_actor, gpus_per_actor=gpus_per_actor,
                         connect_timeout=connect_timeout)
    raise ValueError(f"unknown engine {engine!r}: use 'local' or 'ray'")
