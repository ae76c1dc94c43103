"""CPU threads of processes side by side: each one's share of the cores, torch's threads
in a worker, and the guard for forked children.

Commands run side by side (`cpu_share`: run_parallel, train-teachers and
train-students, the local engine's worker processes) share the machine's cores. The
engines give each worker its threads (`set_torch_threads`). spaCy's own
`nlp.pipe(n_process=N)` forks the process instead: a child that inherits torch's OpenMP
pool from a parent that already ran torch ops in parallel can hang in its first op. One
thread per child avoids it (the children already run side by side); `install_fork_guard`
sets that up, once, when a maral_ner component is created, so that importing the package
changes nothing and a process without a maral_ner pipeline keeps its own fork behaviour.
"""
import os

import torch

_fork_guard_installed = False


def cpu_share(workers: int) -> int:
    """The CPU threads each of `workers` processes side by side gets: the machine's cores
    divided among them, at least 1 (what run_parallel, train-teachers/train-students and
    the local engine's worker processes use).

    workers (int): how many processes run at once.
    RETURNS (int): threads per process.
    """
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def set_torch_threads(threads: int) -> None:
    """Use `threads` torch CPU threads in this process (0 or less: leave torch's default).

    threads (int): the number of intra-op threads.
    """
    if threads > 0:
        torch.set_num_threads(threads)


def install_fork_guard() -> None:
    """In every child forked from now on, run torch on one thread (see the module's doc).
    Idempotent."""
    global _fork_guard_installed
    if _fork_guard_installed or not hasattr(os, "register_at_fork"):
        return
    os.register_at_fork(after_in_child=lambda: torch.set_num_threads(1))
    _fork_guard_installed = True
