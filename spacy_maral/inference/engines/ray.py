"""The Ray engine: a task run on every partition by Ray Data's `map_batches` with an
actor pool, on a local Ray instance or a cluster.

Each actor (a callable class) loads the pipeline once, sized by `num_cpus` /
`num_gpus`; the partitions' payloads are small plans (annotate: which lines of which
files; the worker reads and writes them itself) or, for pseudo-label, the shard's
DocBin bytes. The results come back to the driver as they finish; the pool starts
with as many actors as the cluster's nodes can hold (up to `num_actors`), waits at most
`ready_timeout` for them, and grows to `num_actors` as nodes join.

Ray is optional (spacy-maral's [ray] extra: `pip install '.[ray]'` in its clone); this module imports it lazily and
says how to install it when it is missing.

Every failure ends, with a RuntimeError that says what happened (the partitions already
written stay): a cluster address that does not answer within `connect_timeout`; actors
that no node can hold (more CPUs or GPUs per actor than any node has), refused before
any actor is created; actors not ready within `ready_timeout`; an actor that can't
load the pipeline, or dies past its restarts.
"""
import logging
import os
import pickle
import socket
import warnings
from dataclasses import replace
from types import ModuleType
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

import numpy

from spacy_maral.inference.engines.base import Done, K, P, PipelineWorker, R, Task, WorkerSpec
from spacy_maral.util import logger

IN_FLIGHT_PER_ACTOR = 2
RAY_MISSING = (
    "the Ray engine needs the `ray` package: spacy-maral's [ray] extra (pip install '.[ray]' in its clone, "
    "or pip install 'ray[data]>=2.10,<2.64'), or use --engine local"
)


def import_ray() -> ModuleType:
    """Import ray, or raise an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(RAY_MISSING) from err
    return ray


class _TaskActor:
    """Ray Data's callable class: a PipelineWorker that runs one task on each row's
    payload (rows: "index", "payload" pickled; out: "index", "result" pickled)."""

    def __init__(self, spec: WorkerSpec, task: Task[R], settings: Dict[str, object]) -> None:
        self.worker = PipelineWorker(spec)
        self.task = task
        self.settings = settings

    def __call__(self, batch: Dict[str, numpy.ndarray]) -> Dict[str, numpy.ndarray]:
        results = [pickle.dumps(self.worker.run(self.task, pickle.loads(payload), **self.settings))
                   for payload in batch["payload"]]
        return {"index": numpy.asarray(batch["index"]), "result": numpy.array(results, dtype=object)}


class RayEngine:
    """Partitions processed by a pool of Ray actors through Ray Data.

    spec (WorkerSpec): how each actor loads the pipeline (threads 0 = cpus_per_actor).
    address (Optional[str]): the cluster ("auto": the one `ray start` runs on this
        machine); None starts a local Ray instance with `num_cpus` CPUs for this run and
        stops it at the end. If Ray is already initialised in this process, that
        instance is used.
    num_actors (int): actors (0 = as many as the cluster's free CPUs, or GPUs, allow).
    cpus_per_actor (int): CPUs each actor reserves; its torch threads.
    gpus_per_actor (float): GPUs each actor reserves (0 = none); with GPUs the actors run
        the pipeline on their GPU.
    num_cpus (Optional[int]): CPUs of a local instance (default: num_actors *
        cpus_per_actor, or all of this machine's).
    max_retries (int): restarts of a dead actor (and retries of its partition).
    connect_timeout (float): seconds to reach the cluster at `address` before failing.
    ready_timeout (float): seconds for the pool's first actors (as many as the nodes can
        hold, up to num_actors) to start and load the pipeline before failing.
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
        self.spec = replace(spec, threads=spec.threads or cpus_per_actor, gpu_id=0 if gpus_per_actor > 0 else -1)
        self.address = address
        self.requested_actors = num_actors
        self.cpus_per_actor = cpus_per_actor
        self.gpus_per_actor = gpus_per_actor
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.connect_timeout = float(connect_timeout)
        self.ready_timeout = float(ready_timeout)
        self.n_actors = 0
        self.room = 0
        self.started_ray = False
        self.ray: Optional[ModuleType] = None
        self.env_set: List[str] = []  # the environment variables this engine set (removed on exit)
        self.restore_data_context: Callable[[], None] = _unchanged  # puts back Ray Data's settings (on exit)

    @property
    def n_workers(self) -> int:
        return self.n_actors

    def _set_env(self, name: str, value: str) -> None:
        """Set an environment variable Ray reads at start-up, unless the user set it; it
        is removed again when the engine exits."""
        if name not in os.environ:
            os.environ[name] = value
            self.env_set.append(name)

    def __enter__(self) -> "RayEngine":
        ray = self.ray = import_ray()
        try:  # a failure anywhere here leaves nothing set (__exit__)
            self._set_env("RAY_USAGE_STATS_ENABLED", "0")
            if not ray.is_initialized():
                if self.address:
                    check_reachable(ray, self.address, self.connect_timeout)
                    # bound Ray's own retries too (about one a second; its default is minutes)
                    self._set_env("RAY_gcs_server_port_wait_time_s", str(max(1, int(self.connect_timeout))))
                    ray.init(address=self.address, logging_level="WARNING", log_to_driver=True)
                else:
                    num_cpus = self.num_cpus or (self.requested_actors * self.cpus_per_actor) or os.cpu_count() or 1
                    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level="WARNING",
                             log_to_driver=True)
                self.started_ray = True
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
            if n > room:
                logger.warning(
                    "%d actors asked for, the cluster's nodes have room for %d: the pool starts with those and "
                    "grows if an autoscaler adds nodes", n, room,
                )
            self.n_actors = n
            self.room = room
            self.restore_data_context = _quiet_ray_data(ray, self.ready_timeout)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _actors_that_fit_nodes(self, nodes: List[Dict[str, object]]) -> int:
        """How many actors the alive nodes can hold in all, node by node (an actor runs on one
        node: two nodes of 1 GPU each can't hold an actor of 2).

        nodes (List[Dict[str, object]]): ray.nodes(): "Alive" and "Resources" of each.
        """
        held = [node.get("Resources") for node in nodes if node.get("Alive", True)]
        return sum(self._actors_that_fit(resources if isinstance(resources, Mapping) else {}) for resources in held)

    def _actors_that_fit(self, resources: Mapping[str, float]) -> int:
        by_cpu = int(resources.get("CPU", 0) // self.cpus_per_actor)
        if self.gpus_per_actor > 0:
            return min(by_cpu, int(resources.get("GPU", 0) // self.gpus_per_actor))
        return by_cpu

    def __exit__(self, *exc: object) -> None:
        ray = self.ray
        for name in self.env_set:
            os.environ.pop(name, None)
        self.env_set = []
        self.restore_data_context()
        self.restore_data_context = _unchanged
        if ray is None:
            return
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        self.started_ray = False

    def map(self, task: Task[R], items: Iterable[Tuple[K, P]], **settings: object) -> Iterator[Tuple[K, Done[R]]]:
        """Run `task` on every (key, payload) on the actor pool, as each finishes (not in
        input order; Engine.map). The payloads go to Ray's object store at the start
        (annotate's are small plans: its workers read their own lines)."""
        if self.ray is None or not self.n_actors:
            raise RuntimeError("use the engine as a context manager: with engine: ...")
        import ray.data

        keys: Dict[int, K] = {}
        rows = []
        for i, (key, payload) in enumerate(items):
            keys[i] = key
            rows.append({"index": i, "payload": pickle.dumps(payload)})
        if not rows:
            return
        # two partitions queued per actor (the next one is there when the current one ends;
        # Ray Data's default of 4 lets the first actor ready take most of a short run)
        pool = ray.data.ActorPoolStrategy(min_size=max(1, min(self.n_actors, self.room)), max_size=self.n_actors,
                                          max_tasks_in_flight_per_actor=IN_FLIGHT_PER_ACTOR)
        with warnings.catch_warnings():
            # the actors' restarts have no named parameter in Ray Data (2.60 warns that its
            # **ray_remote_args go in 2.64; the extra's range stops below 2.64)
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated", category=DeprecationWarning)
            ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
                _TaskActor, fn_constructor_kwargs={"spec": self.spec, "task": task, "settings": settings},
                batch_size=1, compute=pool, num_cpus=self.cpus_per_actor, num_gpus=self.gpus_per_actor or None,
                max_restarts=self.max_retries, max_task_retries=self.max_retries,
            )
        try:
            for row in ds.iter_rows():
                yield keys.pop(int(row["index"])), pickle.loads(row["result"])
        except Exception as err:  # Ray's errors, and Ray Data's UserCodeException around a task's own
            raise RuntimeError(
                f"a Ray actor died or its task failed ({type(err).__name__}); finished partitions are kept, "
                f"run the command again to resume: {_first_line(err)}"
            ) from err


def _unchanged() -> None:
    """Nothing to put back."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def _quiet_ray_data(ray: ModuleType, ready_timeout: float) -> Callable[[], None]:
    """Ray Data's own progress bars and execution logs off (the command shows its own),
    and a bound on its wait for the actor pool's first actors (its default: forever), in
    this process's current DataContext.

    RETURNS (Callable[[], None]): puts back what was changed (the engine calls it on
        exit, so that a user's own Ray Data work afterwards keeps its settings).
    """
    log = logging.getLogger("ray.data")
    level = log.level
    before: Dict[str, object] = {}  # each setting changed so far, with its value before
    context: object = None

    def restore() -> None:
        for name, value in before.items():
            setattr(context, name, value)
        log.setLevel(level)

    settings = {"wait_for_min_actors_s": ready_timeout, "enable_progress_bars": False, "print_on_execution_start": False}
    try:
        import ray.data

        context = ray.data.DataContext.get_current()
        for name, value in settings.items():
            if hasattr(context, name):
                previous = getattr(context, name)
                setattr(context, name, value)
                before[name] = previous
        log.setLevel(logging.WARNING)
    except Exception:  # an older Ray: its defaults stay (what was changed is put back on exit)
        pass
    return restore


def check_reachable(ray: ModuleType, address: str, timeout: float) -> None:
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
