"""The benchmark project (benchmarks/project.yml) in quick mode: the sample corpus, the tiny
encoder and budgets, in a copy of project/, benchmarks/ and configs/ side by side."""
import json
import shutil

import pytest
import spacy

from conftest import REPO
from test_project import SAMPLE_DE_TEST_ENTITIES, copy_project, gold_examples, gold_span_means, logit_class_means, min_angle_deg

pytestmark = pytest.mark.slow  # trainings and subprocess runs: make test-fast leaves them out

# ------------------------------------------------------ benchmark quick mode


@pytest.fixture(scope="module")
def benchmark_run(tiny_encoder, tmp_path_factory):
    """The `benchmark` workflow in quick mode: the sample corpus, tiny encoder and budgets."""
    from weasel.cli.run import project_run

    root = tmp_path_factory.mktemp("bench")
    copy_project(root)
    (root / "benchmarks").mkdir()
    shutil.copy(REPO / "benchmarks" / "project.yml", root / "benchmarks" / "project.yml")
    overrides = {
        "vars.encoder": str(tiny_encoder), "vars.encoder_source": "existing",
        "vars.stage1_steps": 8, "vars.stage2_steps": 6, "vars.eval_every": 3, "vars.dev_limit": 10,
        "vars.target_docs": 24, "vars.stage2_epochs": 2, "vars.pseudo_limit": 60, "vars.speed_limit": 40,
        "vars.target_text": "../project/sample/de/test.conll",  # tagged, so the pseudo-label diagnostics exist
    }
    project_run(root / "benchmarks", "benchmark", overrides=overrides)
    return root / "benchmarks" / "metrics" / "benchmark"


def test_benchmark_quick_mode_writes_report_json_and_plots(benchmark_run) -> None:
    result = json.loads((benchmark_run / "benchmark.json").read_text())
    names = ["ner", "zero-shot", "maral", "no-reweight", "no-anchors", "self-training"]
    assert list(result["systems"]) == names
    project = benchmark_run.parent.parent
    for name in names:
        entry = result["systems"][name]
        # P/R/F1 (percent, 2 decimals) are what nlp.evaluate gives the saved pipeline on the test set
        nlp = spacy.load(project / entry["model"])
        examples = gold_examples(nlp, project / result["test"])
        assert sum(len(eg.reference.ents) for eg in examples) == SAMPLE_DE_TEST_ENTITIES
        expected = nlp.evaluate(examples, batch_size=64)
        for key in ("p", "r", "f"):
            assert entry[key] == pytest.approx(100 * float(expected[f"ents_{key}"] or 0.0), abs=0.0051), (name, key)
        # time and memory are the ones `spacy_maral.bench measure` wrote beside the run, and the
        # training rate follows from them (steps x the batch of its config / wall time):
        # stage 1 (ner, the teacher) 8 sentences a batch, stage 2 8 source + 8 target
        timing = json.loads(((project / entry["model"]).parent / "timing.json").read_text())
        assert timing["wall_s"] > 0
        assert entry["training"]["wall_s"] == timing["wall_s"] and entry["training"]["peak_rss_gb"] == timing["peak_rss_gb"]
        batch = 8 if name in ("ner", "zero-shot") else 16
        assert entry["training"]["sentences_per_s"] == round(entry["training"]["steps"] * batch / timing["wall_s"], 2)
        assert entry["training"]["steps"] in (8, 6)
    assert result["speed"]["sentences"] == 40
    assert {"ner", "maral", "transformer alone"} <= set(result["speed"])
    speed = result["speed"]
    # both pipelines timed on the same words: the first 40 test sentences' tokens, counted here
    words = sum(len(eg.reference) for eg in gold_examples(spacy.blank("xx"), project / result["test"])[:40])
    assert speed["ner"]["words"] == speed["maral"]["words"] == words
    assert speed["maral_over_ner"] == round(speed["maral"]["words_per_second"] / speed["ner"]["words_per_second"], 3)
    assert "pseudo-label" in result["other_steps"]
    for name in names[1:]:  # every maral system: both geometries, recomputed from the saved model
        margins = result["systems"][name]["margins"]
        nlp = spacy.load(project / result["systems"][name]["model"])
        assert margins["min_angle_deg"] == pytest.approx(min_angle_deg(logit_class_means(nlp)), abs=0.011)
        # the span vectors of the source dev set's first n_projection sentences
        dev = gold_examples(nlp, project.parent / "project" / "corpus" / "en-dev.spacy")[: result["n_projection"]]
        assert margins["spans"]["min_angle_deg"] == pytest.approx(min_angle_deg(gold_span_means(nlp, dev)), abs=0.011)
    assert "margins" not in result["systems"]["ner"]
    # each ablation got its own overrides and everything the runs share (`parallel --append`)
    ablations = {
        "maral": {}, "no-reweight": {("loss", "tau"): 0, ("adaptation", "tau_u"): 0},
        "no-anchors": {("adaptation", "use_anchors"): False},
        "self-training": {("adaptation", "use_anchors"): False, ("adaptation", "refine"): False},
    }
    default = {("loss", "tau"): 1.0, ("adaptation", "tau_u"): 0.1, ("adaptation", "use_anchors"): True,
               ("adaptation", "refine"): True}
    for name, overrides in ablations.items():
        config = spacy.load(project / result["systems"][name]["model"]).config.interpolate()
        component = config["components"]["maral_ner"]
        for (block, key), value in {**default, **overrides}.items():
            assert component[block][key] == value, (name, block, key)
        assert config["initialize"]["after_init"]["init_from"] == "training/teacher/model-best", name
        assert config["nlp"]["tokenizer"]["lang"] == "de" and config["training"]["max_steps"] == 6, name
    page = (benchmark_run / "BENCHMARKS.md").read_text()
    for name in names:
        assert f"| {name} |" in page
    assert set(result["plots"]) == {
        "training curves", "class-mean cosines", "span-vector projection", "pseudo-label F1 per epoch",
    }
    for file in result["plots"].values():
        data = (benchmark_run / file).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert f"]({file})" in page


def test_benchmark_report_can_reuse_an_earlier_speed_block(benchmark_run, tmp_path) -> None:
    """A report regenerated on a busy machine copies the idle run's speed, and says so."""
    from spacy_maral.bench.summary import System, run_benchmark_report

    project = benchmark_run.parent.parent
    earlier = json.loads((benchmark_run / "benchmark.json").read_text())
    result = run_benchmark_report(
        [System("zero-shot", project / "training" / "teacher")], project.parent / "project" / "corpus" / "de-test.spacy",
        project.parent / "project" / "corpus" / "en-dev.spacy", tmp_path, before="zero-shot", speed_from=benchmark_run / "benchmark.json",
        n_projection=20,
    )
    assert result["speed"]["maral_over_ner"] == earlier["speed"]["maral_over_ner"]
    assert str(benchmark_run / "benchmark.json") in result["speed"]["measured_in"]
    assert "Measured in an earlier run" in (tmp_path / "BENCHMARKS.md").read_text()
