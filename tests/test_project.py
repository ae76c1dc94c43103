"""The spaCy project: `spacy project run all` on tiny settings, the packaged wheel in a
fresh virtual environment, and the displaCy page rendered by headless Chromium."""
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy
import pytest
import spacy
import srsly
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from spacy.training import Example

from conftest import REPO
from spacy_maral.evaluation.report import format_table, render_predictions, write_predictions_page
from spacy_maral.pipeline.tokenizer import set_tokenizer_lang

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def make_venv(path: Path) -> Path:
    """A virtual environment that sees the current one's packages (spacy-maral's
    editable install included) through a .pth file, with its own site-packages first."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    own_site = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"], check=True, capture_output=True, text=True
    ).stdout.strip()
    current = site.getsitepackages()[0]
    Path(own_site, "current-env.pth").write_text(f"import site; site.addsitedir({current!r})\n", encoding="utf8")
    return python


def copy_project(root: Path) -> None:
    """project/ (its yml and sample corpus) and configs/ into `root`, side by side."""
    shutil.copytree(REPO / "configs", root / "configs")
    (root / "project").mkdir()
    shutil.copy(REPO / "project" / "project.yml", root / "project" / "project.yml")
    shutil.copytree(REPO / "project" / "sample", root / "project" / "sample")


# project/sample/de/test.conll: 200 sentences, 348 entities (348 B- tags, IOB2)
SAMPLE_DE_TEST_SENTENCES = 200
SAMPLE_DE_TEST_ENTITIES = 348


def gold_examples(nlp: Language, path: Path) -> list:
    """The gold docs of a .spacy corpus as Examples on their own tokens (no tokenizer)."""
    docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    return [Example(Doc(nlp.vocab, words=[t.text for t in d], spaces=[bool(t.whitespace_) for t in d]), d) for d in docs]


def min_angle_deg(directions: numpy.ndarray) -> float:
    """Smallest angle (degrees) between two of the given directions (rows, any norm;
    a zero row has cosine 0 with everything)."""
    norms = numpy.linalg.norm(directions, axis=1)
    unit = directions / numpy.maximum(norms, 1e-12)[:, None]
    cos = unit @ unit.T
    n = cos.shape[0]
    largest = max(float(cos[i, j]) for i in range(n) for j in range(n) if i != j)
    return float(numpy.degrees(numpy.arccos(min(max(largest, -1.0), 1.0))))


def logit_class_means(nlp: Language) -> numpy.ndarray:
    """The class means the logits use, from the saved estimator buffers: the average of
    the previous epoch's mean and the running mean for a class seen this epoch, the
    previous mean alone otherwise (docs/method.md section 2)."""
    from spacy_maral.ml.span_ner import get_span_head
    from spacy_maral.pipeline.maral_ner import find_maral_ner

    head = get_span_head(find_maral_ner(nlp).model)
    prev, total, count = (head.prev_mean.double().numpy(), head.cur_sum.double().numpy(), head.cur_count.double().numpy())
    current = total / numpy.maximum(count, 1.0)[:, None]
    return numpy.where((count > 0)[:, None], 0.5 * (prev + current), prev)


def gold_span_means(nlp: Language, examples: list) -> numpy.ndarray:
    """Per class, the mean span vector z of the gold spans of `examples` (every other
    enumerated span is O; a class without spans gets a zero row)."""
    from spacy_maral.pipeline.maral_ner import find_maral_ner

    ner = find_maral_ner(nlp)
    z_blocks, label_blocks = [], []
    for start in range(0, len(examples), 64):
        batch = examples[start : start + 64]
        docs = list(nlp.pipe([eg.predicted for eg in batch], disable=[ner.name], batch_size=64))
        scores = ner.predict(docs)
        z_blocks.append(numpy.asarray(ner.model.ops.to_numpy(scores.vectors), dtype=numpy.float64))
        gold = [{(e.start, e.end): ner.classes.index(e.label_) for e in eg.reference.ents if len(e) <= ner.max_width} for eg in batch]
        label_blocks.append(numpy.asarray([gold[int(d)].get((int(s), int(e)), 0) for d, s, e in scores.spans]))
    z, labels = numpy.concatenate(z_blocks), numpy.concatenate(label_blocks)
    return numpy.stack([z[labels == c].mean(axis=0) if (labels == c).any() else numpy.zeros(z.shape[1]) for c in range(len(ner.classes))])


def check_evaluate_metrics(project: Path) -> None:
    """metrics/de-test.json (`spacy_maral evaluate` of the teacher and the student) holds
    what nlp.evaluate gives the saved pipelines on corpus/de-test.spacy, and raw-text
    P/R/F1 consistent with its counts over every gold entity."""
    metrics = json.loads((project / "metrics/de-test.json").read_text())
    models = {"zero-shot": "training/teacher/model-best", "maral": "training/student-de/model"}
    # and "shipped", the guard's fallback, where it chose that (the tiny models' verdict varies)
    chosen = json.loads((project / "metrics/de-guard.json").read_text())["chosen"]
    assert set(metrics["results"]) == set(models) | ({"shipped"} if chosen == "fallback" else set())
    for name, model in models.items():
        scores = metrics["results"][name]
        # the gold-token numbers are what nlp.evaluate gives the saved pipeline on the test set
        nlp = spacy.load(project / model)
        examples = gold_examples(nlp, convert_test(project))
        assert len(examples) == SAMPLE_DE_TEST_SENTENCES
        assert sum(len(eg.reference.ents) for eg in examples) == SAMPLE_DE_TEST_ENTITIES
        expected = nlp.evaluate(examples, batch_size=64)
        for key in ("ents_p", "ents_r", "ents_f"):
            assert scores[key] == pytest.approx(expected[key], abs=1e-9), (name, key)
        assert set(scores["ents_per_type"]) == set(expected["ents_per_type"])
        for label, prf in expected["ents_per_type"].items():
            assert scores["ents_per_type"][label] == pytest.approx(prf, abs=1e-9), (name, label)
        # the raw-text numbers: every gold entity counted once, P/R/F1 from the counts
        raw = scores["raw_text"]
        tp, fp, fn = raw["tp"], raw["fp"], raw["fn"]
        assert tp + fn == SAMPLE_DE_TEST_ENTITIES
        p = tp / (tp + fp) if tp + fp else 0.0
        r = tp / (tp + fn)
        assert raw["ents_p"] == pytest.approx(p, abs=1e-9) and raw["ents_r"] == pytest.approx(r, abs=1e-9)
        assert raw["ents_f"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0, abs=1e-9)
        # the per-sentence counts beside it (paired bootstraps) add up to the same totals
        counts = json.loads((project / "metrics/de-test.per_sentence.json").read_text())["raw_text"][name]
        assert len(counts) == SAMPLE_DE_TEST_SENTENCES
        assert [sum(c[i] for c in counts) for i in range(3)] == [tp, tp + fp, tp + fn]


def convert_test(project: Path) -> Path:
    """The German test set the workflow read as CoNLL, converted to .spacy by the converter."""
    from spacy_maral.corpora.conll import read_conll

    path = project / "corpus" / "de-test.spacy"
    if not path.exists():
        nlp = spacy.blank("xx")
        DocBin(docs=list(read_conll(project.parent / "tests" / "de.conll", vocab=nlp.vocab))).to_disk(path)
    return path


def check_soup(project: Path) -> None:
    """The adapt step trained the second student (seed 100) and the student (stage-2 seed
    0, listed last, whose settings the soup keeps) side by side, the cores shared, each
    with its own seed, files and snapshots; the select step scored each one's snapshot and
    model-last on the source dev set and picked the higher (the later on a tie);
    training/student-de/model (the soup step) is the elementwise mean of the picks'
    weights, which differ."""
    from spacy_maral.training.averaging import pipeline_weights

    summary = json.loads((project / "training/adapt-de/students.json").read_text())
    listed = summary["students"]
    assert list(listed) == ["100", "0"]
    assert summary["threads"] == max(1, (os.cpu_count() or 1) // 2)
    selected = json.loads((project / "training/adapt-de/selected.json").read_text())["students"]
    assert list(selected) == ["100", "0"]
    picks = []
    for seed in ("100", "0"):
        assert listed[seed]["model"].endswith(f"student-s{seed}/model-last")
        command = " ".join(json.loads((project / f"training/adapt-de/student-s{seed}/timing.json").read_text())["command"])
        assert f"--system.seed {seed}" in command
        assert f"--paths.diagnostics training/adapt-de/student-s{seed}/diagnostics.jsonl" in command
        candidates = selected[seed]["selection"]["candidates"]
        # snapshot_every 4: after 4 and 8 updates; model-last is after the 9th (spaCy updates at steps 0 to max_steps);
        # select_skip_first 0.5 leaves out step 4, the first half of training
        assert (project / f"training/adapt-de/student-s{seed}/snapshots/step-000004").is_dir()
        assert [c["name"] for c in candidates] == ["step-000008", "model-last"]
        best = max(range(len(candidates)), key=lambda i: (candidates[i]["dev_f"], i))
        assert selected[seed]["model"] == candidates[best]["path"]
        picks.append(selected[seed]["model"])
    students = [pipeline_weights(spacy.load(project / p)) for p in picks]
    soup = pipeline_weights(spacy.load(project / "training/student-de/model"))
    assert set(soup) == set(students[0]) == set(students[1])
    differ = 0
    for name, (read, _) in soup.items():
        first, second = students[0][name][0](), students[1][name][0]()
        numpy.testing.assert_allclose(read(), (first + second) / 2, rtol=1e-5, atol=1e-6, err_msg=name)
        differ += not numpy.allclose(first, second)
    assert differ, "the two students have the same weights: the soup averaged one student with itself"


@pytest.fixture(scope="module")
def project_run_all(tiny_encoder, tmp_path_factory):
    """Run the workflow `all` in a copy of project/ on the tiny encoder and tiny budgets,
    from English labels and German raw text only (a data folder with en/train.conll and
    en/dev.conll; a German test set elsewhere), with a soup of two students, installing
    the package into a temporary virtual environment. Then the same run again with
    Spanish added (raw text, no test set), from a separate process, its output kept."""
    from weasel.cli.run import project_run

    root = tmp_path_factory.mktemp("project")
    copy_project(root)
    for split in ("train", "dev"):
        (root / "data" / "en").mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "project" / "sample" / "en" / f"{split}.conll", root / "data" / "en" / f"{split}.conll")
    (root / "tests").mkdir()
    shutil.copy(root / "project" / "sample" / "de" / "test.conll", root / "tests" / "de.conll")
    venv_python = make_venv(root / "venv")
    overrides = {
        "vars.encoder": str(tiny_encoder), "vars.encoder_source": "existing",
        "vars.stage1_steps": 12, "vars.stage2_steps": 8, "vars.eval_every": 4, "vars.dev_limit": 10,
        "vars.target_docs": 32, "vars.stage2_epochs": 2, "vars.install_python": str(venv_python),
        "vars.soup_seeds": "100", "vars.snapshot_every": 4, "vars.data_dir": str(root / "data"),
        "vars.target_test": str(root / "tests" / "{lang}.conll"),
    }
    project_run(root / "project", "all", overrides=overrides)
    project = root / "project"
    first = {path: (project / path).stat().st_mtime_ns for path in REUSED}
    argv = [sys.executable, "-m", "spacy", "project", "run", "all", str(project)]
    for key, value in {**overrides, "vars.target_langs": "de,es"}.items():
        argv += [f"--{key}", str(value)]
    second = subprocess.run(argv, capture_output=True, text=True, cwd=project)
    return SimpleNamespace(project=project, venv_python=venv_python, first=first, second=second)


# what the run with Spanish added must not train again
REUSED = ("training/teacher/model-best/maral_ner/model", "training/ensemble/teachers.json", "training/student-de/model/maral_ner/model")


@pytest.mark.slow
def test_project_workflow_all_produces_every_output(project_run_all) -> None:
    project = project_run_all.project
    for path in [
        "corpus/en-train.spacy", "corpus/en-dev.spacy", "corpus/de-pseudo/summary.json",
        "training/teacher/model-best", "training/adapt-de/students.json", "training/adapt-de/student-s0/model-last",
        "training/adapt-de/student-s0/diagnostics.jsonl", "training/adapt-de/student-s100/model-last", "training/student-de/model",
        "metrics/de-test.json", "metrics/de-predictions.html", "metrics/de-guard.json",
        "training/teacher/calibration.json", "training/student-de/calibration.json",
    ]:
        assert (project / path).exists(), path
    check_evaluate_metrics(project)
    check_soup(project)
    # the calibrated temperatures are stored in the pipelines
    for run, model in (("teacher", "model-best"), ("student-de", "model")):
        calibration = json.loads((project / f"training/{run}/calibration.json").read_text())
        stored = json.loads((project / f"training/{run}/{model}/maral_ner/cfg").read_text())
        assert stored["score_temperature"] == pytest.approx(calibration["temperature"])
        assert stored.get("score_slope", 1.0) == pytest.approx(calibration["slope"])
    # teacher and student tokenize with the source and target rules
    assert spacy.load(project / "training/teacher/model-best").config["nlp"]["tokenizer"]["lang"] == "en"
    student_config = spacy.load(project / "training/student-de/model").config.interpolate()
    assert student_config["nlp"]["tokenizer"]["lang"] == "de"
    # the student starts from the teacher's weights (the default stage 2: benchmarks/PROTOCOL.md, rule 3)
    assert student_config["initialize"]["after_init"]["init_from"] == "training/teacher/model-best"
    summary = json.loads((project / "corpus/de-pseudo/summary.json").read_text())
    assert summary["sentences"] == 400  # sample/de/train.txt, one sentence a line
    # by default two more teachers (seeds 1 and 2) label the target text with the teacher
    teachers = json.loads((project / "training/ensemble/teachers.json").read_text())["teachers"]
    assert sorted(teachers) == ["1", "2"]
    manifest = json.loads((project / "corpus/de-pseudo/_manifest.json").read_text())
    assert len(manifest["ensemble_head_sha256"]) == 2
    dist = project / "packages" / "de" / "xx_maral_ner-0.1.0" / "dist"
    assert sorted(p.suffix for p in dist.iterdir()) == [".whl"]  # package_build: the wheel alone
    # the exported pipeline carries no training-only adaptation state
    assert not (project / "packages" / "de" / "pipeline" / "maral_ner" / "adaptation").exists()
    assert (project / "training/student-de/model/maral_ner/adaptation").exists()


@pytest.mark.slow
def test_a_language_added_to_a_finished_run_trains_only_itself(project_run_all) -> None:
    """The run again with Spanish added: the teachers and the German student are kept (not
    trained again), German is only packaged again under its name in a run of several
    languages, Spanish (raw text, no test set) is trained, guarded, packaged and loads;
    the run prints each language's outcome and the guard's choice."""
    project, second = project_run_all.project, project_run_all.second
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    for path, mtime in project_run_all.first.items():
        assert (project / path).stat().st_mtime_ns == mtime, f"{path} was written again"
    assert (project / "training/student-es/model/maral_ner/model").exists()
    outcomes = json.loads((project / "metrics/languages.json").read_text())["languages"]
    assert {lang: o["status"] for lang, o in outcomes.items()} == {"de": "shipped", "es": "shipped"}
    assert {lang: o["package"] for lang, o in outcomes.items()} == {"de": "maral_ner_de", "es": "maral_ner_es"}
    assert outcomes["es"]["test_f1"] is None and set(outcomes["de"]["test_f1"]) - {"shipped"} == {"zero-shot", "maral"}
    assert outcomes["es"]["shipped"] in ("student", "fallback", "teacher")
    assert "no test set at" in second.stdout + second.stderr
    assert "finished earlier" not in second.stdout  # German's package name changed: packaged again
    table = second.stdout[second.stdout.index("guard shipped"):]
    assert "xx_maral_ner_es" in table and "not scored (no test set)" in table
    for lang in ("de", "es"):
        assert (project / "packages" / lang / f"xx_maral_ner_{lang}-0.1.0" / "dist").exists()
    python = project_run_all.venv_python
    out = subprocess.run([str(python), "-c", "import spacy; print(spacy.load('xx_maral_ner_es').pipe_names)"],
                         capture_output=True, text=True, cwd=project.parent)
    assert "maral_ner" in out.stdout, out.stderr


@pytest.mark.slow
def test_installed_wheel_loads_from_any_directory(project_run_all, tmp_path) -> None:
    """spacy.load("xx_maral_ner") in the temporary venv, from an unrelated directory, with
    the encoder inside the package, predicts what the trained directory predicts."""
    project, venv_python = project_run_all.project, project_run_all.venv_python
    text = "Die SPD-Fraktion in Baden-Württemberg nahm Laura Schmidt am Freitag fest."
    script = (
        "import json, spacy, xx_maral_ner\n"
        "encoder = {'encoder': {'name': '/nonexistent/encoder'}}\n"
        "nlp = spacy.load('xx_maral_ner', config={'components': {'transformer': {'model': encoder}}})\n"
        f"doc = nlp({text!r})\n"
        "g = doc.spans['maral']\n"
        "print(json.dumps({'file': xx_maral_ner.__file__, 'pipes': nlp.pipe_names, 'tokens': [t.text for t in doc],\n"
        "  'ents': [(e.start, e.end, e.label_) for e in doc.ents], 'scores': [float(s) for s in g.attrs['scores']]}))\n"
    )
    # the encoder name points nowhere: the weights and tokenizer must come from the package
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([str(venv_python), "-c", script], cwd=tmp_path, check=True, capture_output=True, text=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(str(venv_python.parent.parent)), result["file"]
    assert result["pipes"] == ["transformer", "maral_ner"]
    # the package tokenizes with the target language's (German) rules, not spaCy's xx rules
    assert result["tokens"] == ["Die", "SPD-Fraktion", "in", "Baden-Württemberg", "nahm", "Laura", "Schmidt", "am", "Freitag", "fest", "."]
    assert len(result["scores"]) == len(result["ents"])  # one score per predicted entity
    # it is the pipeline the guard chose (the student unless the guard distrusted it)
    verdict = json.loads((project / "metrics/de-guard.json").read_text())
    fallback_trusted = verdict["fallback"] is not None and verdict["fallback"]["trusted"]
    assert verdict["chosen"] == ("student" if verdict["trusted"] else "fallback" if fallback_trusted else "teacher")
    nlp = spacy.load(project / verdict["chosen_path"])
    set_tokenizer_lang(nlp, "de")
    doc = nlp(text)
    assert [list(e) for e in result["ents"]] == [[e.start, e.end, e.label_] for e in doc.ents]
    assert result["scores"] == pytest.approx([float(s) for s in doc.spans["maral"].attrs["scores"]], abs=1e-6)


# ------------------------------------------------------------ displaCy page


def _scored_pipeline() -> Language:
    """A pipeline whose last component writes known entities and scores (no training)."""
    nlp = spacy.blank("xx")

    @Language.component("fake_maral")
    def fake_maral(doc: Doc) -> Doc:
        spans = [Span(doc, 0, 2, label="PER"), Span(doc, 3, 4, label="LOC")] if doc[0].text == "Laura" else []
        group = SpanGroup(doc, name="maral", spans=spans)
        group.attrs["scores"] = [0.93, 0.61][: len(spans)]
        doc.spans["maral"] = group
        doc.ents = spans
        return doc

    nlp.add_pipe("fake_maral")
    return nlp


def test_render_predictions_labels_entities_with_scores() -> None:
    html = render_predictions(_scored_pipeline(), ["Laura Schmidt besuchte Hamburg gestern ."], spans_key="maral")
    assert "<!DOCTYPE html>" in html
    assert "PER 0.93" in html and "LOC 0.61" in html
    assert "Laura Schmidt" in html and "Hamburg" in html


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make setup installs it)")
def test_displacy_page_renders_in_headless_chromium(tmp_path) -> None:
    page = write_predictions_page(
        _scored_pipeline(), ["Laura Schmidt besuchte Hamburg gestern .", "Kein Name hier ."], tmp_path / "page.html",
        spans_key="maral",
    )
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dom = out.stdout
    # displaCy draws each entity as a <mark> holding the text and a label span
    marks = dom.count("<mark")
    assert marks == 2, dom[:2000]
    assert "Laura Schmidt" in dom and "PER 0.93" in dom
    assert "Hamburg" in dom and "LOC 0.61" in dom


def test_format_table_rows_per_system() -> None:
    results = {
        "zero-shot": {"ents_p": 0.5, "ents_r": 0.25, "ents_f": 1 / 3, "ents_per_type": {"PER": {"p": 1, "r": 1, "f": 1.0}}},
        "maral": {"ents_p": 1.0, "ents_r": 1.0, "ents_f": 1.0, "ents_per_type": {}},
    }
    table = format_table(results)
    lines = table.splitlines()
    assert "F1 PER" in lines[0]
    assert any(line.startswith("zero-shot") and "33.33" in line and "100.00" in line for line in lines)
    assert any(line.startswith("maral") and line.rstrip().endswith("-") for line in lines)


def test_parallel_appends_the_shared_arguments_to_every_command(tmp_path) -> None:
    """`spacy_maral.bench parallel --append ARGS` runs each command with ARGS at its end (the
    benchmark workflow writes the trainings' shared overrides once that way)."""
    from spacy_maral.workflow.parallel import run_parallel

    show = "python -c 'import sys; print(sys.argv[1:])'"
    failed = run_parallel([f"{show} a", f"{show} b --x 1"], jobs=2, log_dir=tmp_path, append="--y 'two words'")
    assert failed == []
    logs = sorted(p.read_text().strip() for p in tmp_path.glob("*.log"))
    assert logs == ["['a', '--y', 'two words']", "['b', '--x', '1', '--y', 'two words']"]


def test_parallel_threads_log_files_and_status_lines(tmp_path, capsys) -> None:
    from spacy_maral.workflow.parallel import run_parallel

    show = "python -c 'import os, time; print(os.environ[\"OMP_NUM_THREADS\"], flush=True); time.sleep(2.5)'"
    logs = [tmp_path / "a" / "one.log", tmp_path / "b" / "two.log"]
    assert run_parallel([show, show], jobs=2, threads=3, logs=logs, status_every_s=1) == []
    assert [log.read_text().strip() for log in logs] == ["3", "3"]
    out = capsys.readouterr().out
    assert "[0]" in out and "min: 3" in out  # a status line with the log's last line
    with pytest.raises(ValueError, match="1 log files for 2 commands"):
        run_parallel([show, show], logs=logs[:1])


def test_parallel_shares_the_cores(tmp_path, monkeypatch) -> None:
    """Without threads, jobs side by side share the cores equally (cpu_share, also what
    train-teachers and the local engine use)."""
    from spacy_maral import threads
    from spacy_maral.workflow import parallel

    monkeypatch.setattr(threads.os, "cpu_count", lambda: 16)
    assert threads.cpu_share(2) == 8 and threads.cpu_share(3) == 5 and threads.cpu_share(32) == 1
    show = "python -c 'import os; print(os.environ[\"OMP_NUM_THREADS\"])'"
    assert parallel.run_parallel([show, show, show], jobs=2, log_dir=tmp_path) == []
    assert sorted(p.read_text().strip() for p in tmp_path.glob("*.log")) == ["8", "8", "8"]


def test_project_assets_are_checksummed_public_conll_files() -> None:
    """Every asset has a URL and an md5 checksum, and lands where data_dir=assets expects it."""
    from weasel.util import load_project_config

    config = load_project_config(REPO / "project")
    assets = config["assets"]
    assert assets, "project.yml lists no assets"
    for asset in assets:
        assert asset["url"].startswith("https://"), asset
        checksum = asset.get("checksum", "")
        assert len(checksum) == 32 and all(c in "0123456789abcdef" for c in checksum), asset
        lang_split = Path(asset["dest"]).relative_to("assets")
        assert lang_split.suffix == ".conll" and len(lang_split.parts) == 2, asset
    dests = {a["dest"] for a in assets}
    for split in ("train", "dev"):
        assert f"assets/en/{split}.conll" in dests


@pytest.mark.parametrize("step", ["languages", "evaluate"])
def test_steps_whose_inputs_cannot_be_deps_run_whatever_their_lock_entry_says(step, tmp_path) -> None:
    """weasel skips a step whose lock entry (script, deps, outputs) is unchanged. The
    `languages` step's deps cannot name each language's text ({lang} is filled in by the
    command), and `evaluate`'s cannot name the test set (it may be absent), so a changed
    text or test set would be skipped, its old scores read as new: both always run
    (`languages` keeps what is finished by its own fingerprints)."""
    import srsly
    from weasel.cli.run import check_rerun, get_lock_entry
    from weasel.util import load_project_config

    config = load_project_config(REPO / "project")
    command = next(c for c in config["commands"] if c["name"] == step)
    for output in command.get("outputs", []):
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / output).write_text("{}")
    srsly.write_yaml(tmp_path / "project.lock", {step: get_lock_entry(tmp_path, command)})
    assert check_rerun(tmp_path, command), f"an unchanged lock entry skips the {step} step"


@pytest.mark.parametrize("target", ["de", "es"])
def test_make_conll_defaults_ensemble_and_student_temperature(target, tmp_path) -> None:
    """make conll's defaults: three teachers, no soup, and the student's temperature by the rule
    (0: fitted on the development language es only when that is the target, 2.0
    elsewhere), which the shipped student's calibrate step (soup) applies from its target language."""
    root = Path(__file__).resolve().parents[1]
    data = tmp_path / "data"
    (data / "es").mkdir(parents=True)
    (data / "es" / "dev.conll").write_text("Madrid B-LOC\n", encoding="utf8")
    run = subprocess.run(["make", "-n", "-C", str(root), "conll", f"DATA={data}", f"TARGET={target}"],
                         capture_output=True, text=True, check=True)
    line = " ".join(run.stdout.replace("\\\n", " ").split())
    assert '--vars.ensemble_seeds "1,2"' in line
    assert '--vars.soup_seeds ""' in line
    assert "--vars.student_temperature 0 " in line
    assert f"--vars.target_langs {target} " in line and "--vars.dev_lang es " in line
    soup = next(c for c in srsly.read_yaml(root / "project" / "project.yml")["commands"] if c["name"] == "soup")
    calibrate = " ".join(next(line for line in soup["script"] if "spacy_maral calibrate" in line).split())
    assert "--temperature ${vars.student_temperature} --score-map ${vars.student_score_map} --target-lang ${vars.target_lang}" in calibrate
    # a student of the development language gets Platt's map, in every language's workflow
    project = srsly.read_yaml(root / "project" / "project.yml")
    assert project["vars"]["student_score_map"] == "platt"
    languages = next(c for c in project["commands"] if c["name"] == "languages")
    assert "--vars.student_score_map ${vars.student_score_map}" in " ".join(" ".join(languages["script"]).split())
    assert "--lang ${vars.dev_lang}" in calibrate


def test_make_conll_needs_no_development_language(tmp_path) -> None:
    """Without DATA/es/dev.conll the scores are calibrated on the source dev set; several
    targets go to the workflow as target_langs, with each language's text and test set."""
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(["make", "-n", "-C", str(root), "conll", f"DATA={tmp_path}", "TARGETS=de,fi"],
                         capture_output=True, text=True, check=True)
    line = " ".join(run.stdout.replace("\\\n", " ").split())
    assert "--vars.dev_lang en " in line
    assert "--vars.target_langs de,fi " in line
    assert f'--vars.target_text "{tmp_path}/{{lang}}/train.conll"' in line
    assert f'--vars.target_test "{tmp_path}/{{lang}}/test.conll"' in line


def test_the_seeds_reach_the_teacher_and_the_student(tmp_path) -> None:
    """TEACHER_SEED and STUDENT_SEED (another draw of the whole job) reach stage 1's
    `--system.seed`, the student's stage-2 seed and the languages step that runs it."""
    from weasel.util import load_project_config

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(["make", "-n", "-C", str(root), "conll", f"DATA={tmp_path}", "TEACHER_SEED=3", "STUDENT_SEED=1"],
                         capture_output=True, text=True, check=True)
    line = " ".join(run.stdout.replace("\\\n", " ").split())
    assert "--vars.teacher_seed 3 --vars.student_seed 1 " in line
    config = load_project_config(root / "project", overrides={"vars.teacher_seed": 3, "vars.student_seed": 1})
    scripts = {c["name"]: " ".join(" ".join(c["script"]).split()) for c in config["commands"]}
    teacher = next(line for c in config["commands"] if c["name"] == "teacher" for line in c["script"] if "spacy train" in line)
    assert "spacy train ../configs/source.cfg" in teacher and teacher.split()[-2:] == ["--system.seed", "3"]
    assert '--seeds ",1"' in scripts["adapt"]
    assert "--vars.student_seed 1 " in scripts["languages"]
    assert "--system.seed" not in scripts["ensemble"]  # the ensemble's teachers take their own seeds


@pytest.mark.parametrize("goal", ["conll", "benchmark"])
def test_make_refuses_a_data_path_with_spaces_before_anything_runs(goal, tmp_path) -> None:
    """make split DATA="my data" at its space (abspath: two paths), and the workflow ran
    on a folder that does not exist."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "my data").mkdir()
    run = subprocess.run(["make", "-C", str(root), goal, f"DATA={tmp_path / 'my data'}", f"VENV={tmp_path / 'no-venv'}"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f'DATA="{tmp_path}/my data": make cannot pass a path with spaces' in run.stderr
    assert not (tmp_path / "no-venv").exists()  # refused before the set-up


def test_make_refuses_data_without_the_source_corpora_before_anything_runs(tmp_path) -> None:
    """DATA without en/train.conll: the check passed, the encoder was built, then the
    convert step stopped on weasel's "Missing dependency" (40 s)."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "train.conll").write_text("Berlin B-LOC\n", encoding="utf8")
    run = subprocess.run(["make", "-C", str(root), "conll", f"DATA={tmp_path}", f"VENV={tmp_path / 'no-venv'}"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and f"DATA={tmp_path} has no en/train.conll" in run.stderr, run.stderr
    assert not (tmp_path / "no-venv").exists()
