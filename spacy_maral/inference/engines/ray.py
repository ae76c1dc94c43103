"""The Ray engine: one Ray actor per worker, on a local Ray instance or a cluster.

The batch-inference pattern of Ray Data's `map_batches` with an actor pool: a callable
class per actor that loads the model once, sized by `num_cpus` / `num_gpus`, with a
bounded number of batches in flight. Here a "batch" is a whole partition of the
corpus, and the partitions are read by the driver and sent to the actors through
Ray's object store (the results come back the same way). So only the driver needs the
input and output files, a partition keeps a stable name (resume skips it), bad input
lines are reported with their file and line, and the order inside a partition is kept.

Ray is optional (`pip install spacy-maral[ray]`); this module imports it lazily and
says how to install it when it is missing.

Every failure ends, with a RuntimeError that says what happened (the partitions already
written stay): a cluster address that does not answer within `connect_timeout`; actors
that no node can hold (more CPUs or GPUs per actor than any node has), refused before
any actor is created; actors that are not ready within `ready_timeout` (e.g. waiting for
an autoscaler that never adds a node); an actor that dies past its restarts.
"""
import os
import socket
from dataclasses import asdict
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from spacy_maral.inference.engines.base import Item, PipelineWorker, Task, WorkerSpec
from spacy_maral.util import logger

RAY_MISSING = (
    "the Ray engine needs the `ray` package: pip install 'spacy-maral[ray]' "
    "(or pip install 'ray>=2.9,<3'), or use --engine local"
)


def import_ray():
    """Import ray, or raise an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(RAY_MISSING) from err
    return ray


class _Actor:
    """The Ray actor class: a PipelineWorker that also reports its node."""

    def __init__(self, spec_dict: Dict[str, Any]) -> None:
        spec = WorkerSpec(**spec_dict)
        self.worker = PipelineWorker(spec)

    def run(self, task: Task, payload: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        return self.worker.run(task, payload, **kwargs)

    def ready(self) -> int:
        return os.getpid()


class RayEngine:
    """Partitions processed by Ray actors.

    spec (WorkerSpec): how each actor loads the pipeline (threads 0 = cpus_per_actor).
    address (Optional[str]): the cluster ("auto": the one `ray start` runs on this
        machine); None starts a local Ray instance
        with `num_cpus` CPUs for this run and stops it at the end. If Ray is already
        initialised in this process, that instance is used.
    num_actors (int): actors (0 = as many as the cluster's free CPUs, or GPUs, allow).
    cpus_per_actor (int): CPUs each actor reserves; its torch threads.
    gpus_per_actor (float): GPUs each actor reserves (0 = none); with GPUs the actors run
        the pipeline on their GPU.
    num_cpus (Optional[int]): CPUs of a local instance (default: num_actors *
        cpus_per_actor, or all of this machine's).
    in_flight_per_actor (int): partitions queued per actor (2: the next one is there
        when the current one ends).
    max_retries (int): restarts of a dead actor (and retries of its partition).
    connect_timeout (float): seconds to reach the cluster at `address` before failing.
    ready_timeout (float): seconds for the actors to start and load the pipeline.
    """

    name = "ray"

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        address: Optional[str] = None,
        num_actors: int = 0,
        cpus_per_actor: int = 1,
        gpus_per_actor: float = 0.0,
        num_cpus: Optional[int] = None,
        in_flight_per_actor: int = 2,
        max_retries: int = 2,
        connect_timeout: float = 60.0,
        ready_timeout: float = 600.0,
    ) -> None:
        if not connect_timeout > 0 or not ready_timeout > 0:
            raise ValueError(f"the Ray timeouts must be > 0 (connect {connect_timeout}, ready {ready_timeout})")
        if cpus_per_actor < 1:
            raise ValueError(f"cpus_per_actor must be at least 1, not {cpus_per_actor}")
        if gpus_per_actor < 0 or num_actors < 0:
            raise ValueError("num_actors and gpus_per_actor cannot be negative")
        self.spec = WorkerSpec(**{**asdict(spec), "threads": spec.threads or cpus_per_actor, "gpu_id": 0 if gpus_per_actor > 0 else -1})
        self.address = address
        self.requested_actors = num_actors
        self.cpus_per_actor = cpus_per_actor
        self.gpus_per_actor = gpus_per_actor
        self.num_cpus = num_cpus
        self.in_flight_per_actor = max(1, in_flight_per_actor)
        self.max_retries = max_retries
        self.connect_timeout = float(connect_timeout)
        self.ready_timeout = float(ready_timeout)
        self.actors: List[Any] = []
        self.started_ray = False
        self.ray = None

    @property
    def n_workers(self) -> int:
        return len(self.actors)

    def __enter__(self) -> "RayEngine":
        ray = self.ray = import_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not ray.is_initialized():
            if self.address:
                check_reachable(ray, self.address, self.connect_timeout)
                # bound Ray's own retries too (about one a second; its default is minutes)
                os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(max(1, int(self.connect_timeout))))
                ray.init(address=self.address, logging_level="WARNING", log_to_driver=True)
            else:
                num_cpus = self.num_cpus or (self.requested_actors * self.cpus_per_actor) or os.cpu_count() or 1
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level="WARNING", log_to_driver=True)
            self.started_ray = True
        try:
            room = self._actors_that_fit_nodes(ray.nodes())
            if room < 1:
                raise RuntimeError(
                    f"no node of the Ray cluster can hold an actor of {self.cpus_per_actor} CPU(s) and "
                    f"{self.gpus_per_actor:g} GPU(s) (the cluster has {ray.cluster_resources()}): lower "
                    f"--cpus-per-actor / --num-gpus-per-actor, or add such a node"
                )
            n = self.requested_actors or self._actors_that_fit(ray.available_resources())
            if n < 1:
                raise RuntimeError(
                    f"the Ray cluster has no room for one actor of {self.cpus_per_actor} CPU(s) and "
                    f"{self.gpus_per_actor} GPU(s) (available: {ray.available_resources()})"
                )
            fit = self._actors_that_fit(ray.cluster_resources())
            if n > fit:
                logger.warning(
                    "%d actors asked for, the cluster has room for %d: the others wait until an autoscaler adds nodes",
                    n, fit,
                )
            actor_class = ray.remote(_Actor).options(
                num_cpus=self.cpus_per_actor, num_gpus=self.gpus_per_actor,
                max_restarts=self.max_retries, max_task_retries=self.max_retries,
            )
            self.actors = [actor_class.remote(asdict(self.spec)) for _ in range(n)]
            try:
                pids = ray.get([a.ready.remote() for a in self.actors], timeout=self.ready_timeout)  # load errors surface here
            except ray.exceptions.GetTimeoutError as err:
                raise RuntimeError(
                    f"the {n} Ray actors were not ready within {self.ready_timeout:g} s (room for {fit} on the "
                    f"cluster's nodes now; available: {ray.available_resources()}): fewer --num-actors, "
                    f"or a cluster with free resources"
                ) from err
            except ray.exceptions.RayError as err:
                raise RuntimeError(f"the Ray actors could not load the pipeline {self.spec.model}: {err}") from err
            logger.info("Ray engine: %d actors (pids %s)", n, pids)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _actors_that_fit_nodes(self, nodes: List[Dict[str, Any]]) -> int:
        """How many actors the alive nodes can hold in all, node by node (an actor runs on one
        node: two nodes of 1 GPU each can't hold an actor of 2)."""
        return sum(self._actors_that_fit(node.get("Resources", {})) for node in nodes if node.get("Alive", True))

    def _actors_that_fit(self, resources: Dict[str, float]) -> int:
        by_cpu = int(resources.get("CPU", 0) // self.cpus_per_actor)
        if self.gpus_per_actor > 0:
            return min(by_cpu, int(resources.get("GPU", 0) // self.gpus_per_actor))
        return by_cpu

    def __exit__(self, *exc) -> None:
        ray = self.ray
        if ray is None:
            return
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # pragma: no cover - already gone
                pass
        self.actors = []
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        self.started_ray = False

    def map(self, task: Task, items: Iterable[Item], **kwargs) -> Iterator[Tuple[Any, Dict[str, Any]]]:
        """Run `task` on every (key, payload) on the actors; yield (key, result) as each
        finishes (not in input order). Each actor has at most in_flight_per_actor
        partitions queued; the driver reads the next partition only when one is free.

        task (Task): the partitions' work (PipelineWorker.run).
        items (Iterable[Item]): (key, payload) pairs, read lazily.
        kwargs: the task's settings.
        """
        if not self.actors:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        ray = self.ray
        load = {i: 0 for i in range(len(self.actors))}
        running: Dict[Any, Tuple[int, Any]] = {}  # ObjectRef -> (actor index, key)

        def collect() -> Iterator[Tuple[Any, Dict[str, Any]]]:
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                actor_index, key = running.pop(ref)
                load[actor_index] -= 1
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as err:  # a worker raised, or died past its restarts
                    what = "died" if isinstance(err, ray.exceptions.RayActorError) else "failed"
                    raise RuntimeError(
                        f"a Ray actor {what} ({type(err).__name__}); finished partitions are kept, "
                        f"run the command again to resume: {err}"
                    ) from err
                yield key, result

        for key, payload in items:
            while min(load.values()) >= self.in_flight_per_actor:
                yield from collect()
            actor_index = min(load, key=load.get)
            ref = self.actors[actor_index].run.remote(task, payload, kwargs)
            running[ref] = (actor_index, key)
            load[actor_index] += 1
        while running:
            yield from collect()


def check_reachable(ray: Any, address: str, timeout: float) -> None:
    """Fail within `timeout` seconds when the cluster at `address` does not answer (Ray
    itself retries for many minutes): a TCP connection to its GCS port.

    ray: the ray module.
    address (str): "host:port", "auto" (the cluster `ray start` runs here) or
        "ray://host:port" (Ray Client).
    timeout (float): seconds.
    RAISES (RuntimeError): nothing answers there.
    """
    target = address
    if address == "auto":
        try:
            target = ray._private.services.canonicalize_bootstrap_address_or_die("auto")
        except Exception as err:  # no cluster runs here: Ray's own message says so
            raise RuntimeError(f"--address auto: no running Ray cluster found on this machine ({err})") from err
    target = target.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise RuntimeError(f"the Ray address {address!r} is not HOST:PORT, 'auto' or ray://HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise RuntimeError(
            f"the Ray cluster at {address} does not answer ({type(err).__name__}: {err}; waited at most {timeout:g} s): "
            f"check the address (`ray status` on the head node), or leave --address out to start a local instance"
        ) from err
