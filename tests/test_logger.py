"""The configs' training logger: spaCy's console logger, whose log a new training
replaces (spaCy's own writes nothing where its file exists)."""
import json
from io import StringIO

import spacy
from spacy.util import registry

from spacy_maral.training.logger import console_logger


def one_evaluation(setup, nlp) -> None:
    log_step, finalize = setup(nlp, stdout=StringIO(), stderr=StringIO())
    log_step({"epoch": 1, "step": 10, "score": 0.5, "other_scores": {}, "losses": {}, "checkpoints": [], "seconds": 3, "words": 7})
    finalize()


def test_a_new_training_replaces_the_log_of_the_one_before(tmp_path) -> None:
    log = tmp_path / "run" / "log.jsonl"
    log.parent.mkdir()
    log.write_text('{"step": 800, "from": "the training before"}\n', encoding="utf8")
    nlp = spacy.blank("en")
    setup = console_logger(output_file=str(log))
    assert log.read_text(encoding="utf8").startswith('{"step": 800')  # made, not started: nothing removed yet
    one_evaluation(setup, nlp)
    lines = [json.loads(line) for line in log.read_text(encoding="utf8").splitlines()]
    assert [line["step"] for line in lines] == [10]
    one_evaluation(console_logger(output_file=log), nlp)  # again: replaced again, never appended
    assert len(log.read_text(encoding="utf8").splitlines()) == 1


def test_the_configs_name_it_and_spacy_finds_it(tmp_path) -> None:
    """Found through the package's entry point, as `spacy train` resolves the config."""
    from pathlib import Path

    assert registry.loggers.get("spacy_maral.ConsoleLogger.v1") is console_logger
    configs = Path(__file__).resolve().parent.parent / "configs"
    for name in ("source.cfg", "adapt.cfg", "ner_baseline.cfg"):
        text = (configs / name).read_text(encoding="utf8")
        assert '@loggers = "spacy_maral.ConsoleLogger.v1"' in text, name
