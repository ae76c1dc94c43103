"""Shared fixtures: a tiny random transformer encoder built offline, and pipelines on it.

The helpers and constants the tests import live in helpers.py; the `slow` marker and the
rest of the pytest configuration are in pyproject.toml.
"""
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Dict

import pytest
import torch
from spacy.language import Language
from thinc.api import Adam, fix_random_seed

# REPO stays importable from here for tests that still do `from conftest import REPO`.
from helpers import LEARN_RATE, N_STEPS, REPO, STEPS_PER_EPOCH, build_nlp, encoder_parameters, make_examples, make_tiny_encoder

__all__ = ["REPO"]

# `make test` runs the suite in pytest-xdist workers, one per core: each worker's torch
# then takes its share of the cores, not all of them
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    return make_tiny_encoder(tmp_path_factory.mktemp("encoder") / "tiny-bert")


@pytest.fixture
def tiny_nlp(tiny_encoder) -> Language:
    return build_nlp(tiny_encoder)


# ------------------------------------------- a trained tiny pipeline, shared
@pytest.fixture(scope="session")
def trained(tiny_encoder):
    """The source pipeline overfitted on the six training sentences."""
    nlp = build_nlp(tiny_encoder)
    fix_random_seed(0)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    ner = nlp.get_pipe("maral_ner")
    encoder_before = {k: v.detach().clone() for k, v in encoder_parameters(nlp).items()}
    optimizer = Adam(LEARN_RATE)
    history = []
    for step in range(N_STEPS):
        losses: Dict[str, float] = {}
        nlp.update(examples, sgd=optimizer, drop=0.0, losses=losses)
        history.append(losses["maral_ner"])
        if (step + 1) % STEPS_PER_EPOCH == 0:
            ner.end_epoch()
    return SimpleNamespace(nlp=nlp, examples=examples, losses=history, encoder_before=encoder_before)


@pytest.fixture(scope="session")
def trained_dir(trained, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trained") / "pipeline"
    trained.nlp.to_disk(path)
    return path


@pytest.fixture(scope="session")
def undertrained_dir(tiny_encoder, tmp_path_factory) -> Path:
    """A pipeline of the trained one's architecture, initialized on the same data and never
    updated: the guard distrusts it, and it scores below the trained one on any dev set."""
    nlp = build_nlp(tiny_encoder)
    examples = make_examples(nlp)
    nlp.initialize(lambda: examples)
    path = tmp_path_factory.mktemp("undertrained") / "student"
    nlp.to_disk(path)
    return path
