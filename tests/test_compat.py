"""A pipeline saved by an earlier layout of the package (every module side by side in
`spacy_maral/`, before the subpackages) still loads and predicts identically: the
registered names and the saved format did not change with the layout. So does one saved
before spacy_maral.EncoderRuntime.v1 (its after_pipeline_creation callback
spacy_maral.encoder_runtime.v1 and a bare TransformerModel).

The earlier code is taken from git (`git archive` of the last commit of the flat
layout), trains a tiny pipeline in a subprocess and writes its predictions; this
process loads the pipeline with today's code and must give the same entities and
scores, bit for bit.
"""
import json
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
import spacy

from helpers import REPO, assert_nothing_patched, assert_same_predictions, predictions

FLAT_LAYOUT_COMMIT = "a449168"  # the last commit of the flat layout
CALLBACK_RUNTIME_COMMIT = "25e0ea4"  # the last commit whose configs chose the runtime by the callback
TEXTS = [
    "John Smith works for Google in London .",
    "Maria Garcia met the Red Cross team in Paris .",
    "Nothing to see here .",
    "",
]
TRAIN_AND_PREDICT = """
import importlib.metadata, json, sys
from pathlib import Path
# only the old code: no editable-install finder, no entry points of today's package
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower() and "editable" not in getattr(f, "__name__", "")]
_entry_points = importlib.metadata.entry_points
def entry_points(**kwargs):
    found = _entry_points(**kwargs)
    keep = lambda eps: [ep for ep in eps if not ep.value.startswith("spacy_maral")]
    if hasattr(found, "select") and not isinstance(found, dict):
        return type(found)(keep(found))
    return {group: keep(eps) for group, eps in found.items()}
importlib.metadata.entry_points = entry_points
sys.path.insert(0, sys.argv[1] + "/tests")
import spacy_maral  # the old package registers its functions on import
old = __import__(sys.argv[4])
from thinc.api import Adam, fix_random_seed
out = Path(sys.argv[2])
encoder = old.make_tiny_encoder(out / "encoder")
nlp = old.build_nlp(encoder)
fix_random_seed(0)
examples = old.make_examples(nlp)
nlp.initialize(lambda: examples)
optimizer = Adam(old.LEARN_RATE)
for step in range(20):
    nlp.update(examples, sgd=optimizer, drop=0.0, losses={})
    if (step + 1) % old.STEPS_PER_EPOCH == 0:
        nlp.get_pipe("maral_ner").end_epoch()
nlp.to_disk(out / "pipeline")
import spacy_maral
saved = {"module": spacy_maral.__file__, "predictions": old.predictions(nlp, json.loads(sys.argv[3]))}
if hasattr(spacy_maral, "pipeline"):  # the callback's code: its own fp32 predictions, as load_pipeline gives them
    from spacy_maral.pipeline.encoder_runtime import load_pipeline  # where the old code had it
    saved["fp32"] = old.predictions(load_pipeline(out / "pipeline", precision="fp32"), json.loads(sys.argv[3]))
(out / "predictions.json").write_text(json.dumps(saved))
"""


def _old_code(dest: Path, commit: str = FLAT_LAYOUT_COMMIT, files: tuple = ("tests/conftest.py",)) -> Path:
    try:
        data = subprocess.run(
            ["git", "archive", "--format=tar", commit, "spacy_maral", "configs", *files],
            cwd=REPO, capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs the git history with commit {commit} (a full clone)")
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest)
    return dest


@pytest.mark.slow
def test_pipeline_saved_by_the_flat_layout_loads_and_predicts_identically(tmp_path) -> None:
    old = _old_code(tmp_path / "old")
    out = tmp_path / "out"
    env_path = str(old)
    subprocess.run(
        [sys.executable, "-c", TRAIN_AND_PREDICT, env_path, str(out), json.dumps(TEXTS), "conftest"],
        cwd=old, check=True, env={**__import__("os").environ, "PYTHONPATH": env_path},
    )
    saved = json.loads((out / "predictions.json").read_text())
    assert Path(saved["module"]).resolve().is_relative_to(old.resolve())  # it ran the old code
    assert (old / "spacy_maral" / "component.py").exists()  # the flat layout
    nlp = spacy.load(out / "pipeline")
    assert type(nlp.get_pipe("maral_ner")).__module__ == "spacy_maral.pipeline.maral_ner"
    now = json.loads(json.dumps(predictions(nlp, TEXTS)))  # tuples as lists, as saved
    assert [p[:2] for p in now] == [p[:2] for p in saved["predictions"]]  # entities and spans
    assert_same_predictions(now, saved["predictions"])  # and their scores


@pytest.mark.slow
def test_pipeline_saved_with_the_runtime_callback_loads_and_predicts_identically(tmp_path) -> None:
    """Trained and saved by the code whose config chose the runtime by the
    after_pipeline_creation callback; loaded through the callback kept for it, with
    nothing patched, and with --precision's route (load_pipeline) predicting what that
    code predicted, bit for bit in fp32."""
    from spacy_maral.pipeline.loading import encoder_runtime_of, load_pipeline

    old = _old_code(tmp_path / "old", CALLBACK_RUNTIME_COMMIT, ("tests/helpers.py", "tests/conftest.py"))
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-c", TRAIN_AND_PREDICT, str(old), str(out), json.dumps(TEXTS), "helpers"],
        cwd=old, check=True, env={**__import__("os").environ, "PYTHONPATH": str(old)},
    )
    saved = json.loads((out / "predictions.json").read_text())
    assert Path(saved["module"]).resolve().is_relative_to(old.resolve())  # it ran the old code
    assert "spacy_maral.encoder_runtime.v1" in (out / "pipeline" / "config.cfg").read_text()
    nlp = spacy.load(out / "pipeline")
    assert encoder_runtime_of(nlp) == {"precision": "auto", "sort_by_length": True, "bucket_rows": 16,
                                       "train_bucket_rows": 0, "running": encoder_runtime_of(nlp)["running"]}
    assert_nothing_patched(nlp)
    fp32 = load_pipeline(out / "pipeline", precision="fp32")
    assert encoder_runtime_of(fp32)["running"] == "fp32"
    now = json.loads(json.dumps(predictions(fp32, TEXTS)))
    assert [p[:2] for p in now] == [p[:2] for p in saved["fp32"]]
    assert_same_predictions(now, saved["fp32"])
