"""benchmarks/scripts/ensemble_dev.py: a teacher ensemble scored as a predictor."""
import json

from spacy.tokens import DocBin

from helpers import make_examples
from spacy_maral.evaluation.raw_text import evaluate_raw_text
from spacy_maral.pipeline.loading import load_pipeline


def test_each_teacher_scores_as_nlp_pipe_does(ensemble_dev, trained_dir, tmp_path) -> None:
    nlp = load_pipeline(trained_dir, precision="fp32")
    docs = [eg.reference for eg in make_examples(nlp)]
    dev = tmp_path / "dev.spacy"
    DocBin(docs=docs).to_disk(dev)
    expected = evaluate_raw_text(nlp, docs, count_unreachable=False)["ents_f"]
    assert expected > 0.5, "the tiny teacher finds too little: the comparison is vacuous"
    out = tmp_path / "out.json"
    assert ensemble_dev.main([str(dev), str(trained_dir), str(trained_dir), "--lang", "en", "--precision", "fp32", "-o", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf8"))
    assert result["sentences"] == len(docs)
    assert abs(result["teachers"][str(trained_dir)]["ents_f"] - expected) < 1e-9
    assert abs(result["ensemble"]["ents_f"] - expected) < 1e-9  # a teacher averaged with itself
