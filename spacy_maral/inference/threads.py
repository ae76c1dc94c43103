"""torch's CPU threads: the number a worker uses, and the guard for forked children.

The engines give each worker its threads (`set_torch_threads`). spaCy's own
`nlp.pipe(n_process=N)` forks the process instead: a child that inherits torch's OpenMP
pool from a parent that already ran torch ops in parallel can hang in its first op. One
thread per child avoids it (the children already run side by side); `install_fork_guard`
sets that up, once, when a maral_ner component is created, so that importing the package
changes nothing and a process without a maral_ner pipeline keeps its own fork behaviour.
"""
import os

import torch

_fork_guard_installed = False


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
