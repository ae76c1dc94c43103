"""Many target languages in one run (spacy_maral.workflow.languages) and the raw-text check before
anything trains (spacy_maral.corpora.text_check, `check-text`)."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_maral.__main__ import app
from spacy_maral.corpora.text_check import check_target_text, script_share, source_share
from spacy_maral.workflow.languages import SUMMARY, package_name, run_languages, split_langs

GERMAN = "Die Regierung in Berlin hat am Montag den neuen Haushalt vorgestellt, der auch für die Länder gilt."
ENGLISH = "The government in Berlin presented the new budget on Monday, which also applies to the states."
FINNISH = "Hallitus esitteli maanantaina uuden talousarvion, joka koskee myös kuntia ja niiden asukkaita."
RUSSIAN = "Правительство в Берлине представило в понедельник новый бюджет."


def write(path: Path, lines) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf8")
    return path


# ------------------------------------------------------------- the raw-text check


def test_the_text_check_counts_sentences_and_passes_a_text_in_its_language(tmp_path) -> None:
    report = check_target_text(write(tmp_path / "de.txt", [GERMAN, "", "  ", GERMAN]), "de", source_lang="en", min_sentences=2)
    assert report.sentences == 2
    assert report.source_share == 0.0 and report.script_share == 1.0
    assert report.warnings == []


@pytest.mark.parametrize("content,message", [
    ("", "is empty"),
    ("  \n\t\n \n", "no sentence"),
])
def test_an_empty_or_whitespace_text_is_an_error(tmp_path, content, message) -> None:
    path = tmp_path / "fi.txt"
    path.write_text(content, encoding="utf8")
    with pytest.raises(ValueError, match=message) as err:
        check_target_text(path, "fi")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("name,lines,line", [
    ("eng.testb", ["-DOCSTART- -X- -X- O", "", "EU NNP B-NP B-ORG", "rejects VBZ B-VP O"], 1),
    ("test", ["", "Angela B-PER", "Merkel I-PER", "besucht O", "", "Berlin B-LOC"], 2),
])
def test_a_conll_file_without_a_conll_suffix_is_refused_naming_a_line(tmp_path, name, lines, line) -> None:
    """Read as plain text it would be one sentence per token line, its tags lost (an
    evaluation on it scores 0 against no gold entity): refused, naming the line."""
    path = write(tmp_path / name, lines)
    with pytest.raises(ValueError, match=f"{name}, line {line}: .* is a CoNLL-style token line"):
        check_target_text(path, "de")
    plain = write(tmp_path / "de.txt", [GERMAN, "Er sagte nur: O", "Am Ende stand es 2:0 für Bayern", GERMAN])
    assert check_target_text(plain, "de").sentences == 4
    # the commands that read it refuse it before their model loads (here there is none)
    from helpers import run_cli

    for args in (["evaluate", path, "m=no-such-model"], ["calibrate", "no-such-model", path, "-t", "2"],
                 ["predict", "no-such-model", "--from-file", path]):
        result = run_cli(*args)
        assert result.returncode == 1 and "is a CoNLL-style token line" in result.stderr, (args[0], result.stderr)


def test_fewer_sentences_than_the_budget_needs_is_an_error(tmp_path) -> None:
    path = write(tmp_path / "fi.txt", [FINNISH] * 3)
    with pytest.raises(ValueError, match="3 sentences, fewer than the 4"):
        check_target_text(path, "fi", min_sentences=4)
    assert check_target_text(path, "fi", min_sentences=3).sentences == 3


def test_an_unknown_language_code_is_an_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown language code 'xy'"):
        check_target_text(write(tmp_path / "t.txt", [FINNISH]), "xy")


@pytest.mark.parametrize("lang", ["ja", "th", "zh"])
def test_a_language_without_a_rule_based_tokenizer_is_named_as_such(tmp_path, lang) -> None:
    """spaCy knows ja and th but their tokenizers are segmenters that need packages (not
    installed here), zh's a segmenter without one: not rule-based, and never called an
    unknown code."""
    with pytest.raises(ValueError, match=f"language '{lang}': spaCy's tokenizer for it is .*not rule-based") as err:
        check_target_text(write(tmp_path / "t.txt", [FINNISH]), lang)
    assert "unknown language code" not in str(err.value)


def test_a_text_in_the_source_language_is_a_warning_with_its_share(tmp_path) -> None:
    path = write(tmp_path / "de.txt", [ENGLISH] * 3 + [GERMAN])
    report = check_target_text(path, "de", source_lang="en")
    assert report.source_share == pytest.approx(0.75)
    assert len(report.warnings) == 1 and "75% of the sentences" in report.warnings[0] and str(path) in report.warnings[0]


def test_a_text_in_another_script_is_a_warning_with_its_share(tmp_path) -> None:
    report = check_target_text(write(tmp_path / "ru.txt", [FINNISH]), "ru")
    assert report.script_share == 0.0
    assert any("0% of the letters" in w and "cyrillic" in w for w in report.warnings)
    assert script_share([RUSSIAN], "ru") == 1.0
    # letters of both scripts, counted one by one: "Ab" + "Бв" is half Cyrillic
    assert script_share(["Ab Бв"], "ru") == 0.5


def test_source_share_votes_by_the_stopwords_one_language_has_and_the_other_not() -> None:
    # "the", "which", "also" are English-only; "die", "der", "auch", "für" German-only
    assert source_share([ENGLISH], "de", "en") == 1.0
    assert source_share([GERMAN], "de", "en") == 0.0
    assert source_share(["Berlin 2024"], "de", "en") is None  # no stopword of either


def test_check_text_checks_every_language_then_fails_naming_each(tmp_path) -> None:
    write(tmp_path / "de.txt", [GERMAN] * 5)
    (tmp_path / "fi.txt").write_text("\n \n", encoding="utf8")
    result = CliRunner().invoke(app, ["check-text", "de,fi,es", "--text", str(tmp_path / "{lang}.txt"), "--min-sentences", "2"])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "de: " in out and "5 sentences" in out
    assert "fi: " in out and "no sentence" in out
    assert "es: " in out and "does not exist" in out
    assert "the text of fi, es can't be used" in out


# ------------------------------------------------------------------- languages


def test_split_langs_and_package_names() -> None:
    assert split_langs(" de, es,,fi,de ") == ["de", "es", "fi"]
    with pytest.raises(ValueError):
        split_langs(" , ")
    assert package_name("maral_ner", "de", 1) == "maral_ner"
    assert package_name("maral_ner", "de", 3) == "maral_ner_de"


class FakeProject:
    """Runs the per-language workflow by writing what it would: a guard verdict and, where
    a test set exists, a metrics file; fails for the languages in `fail`."""

    def __init__(self, root: Path, fail=()) -> None:
        self.root, self.fail, self.calls = root, set(fail), []
        for name in ("training/teacher/model-best/maral_ner/model", "training/ensemble/teachers.json"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("weights", encoding="utf8")
        (root / "project.yml").write_text("vars:\n  source_lang: en\n", encoding="utf8")

    def __call__(self, argv) -> int:
        target, lang = argv[5], argv[argv.index("--vars.target_lang") + 1]
        self.calls.append((target, lang))
        if lang in self.fail:
            return 2
        metrics = self.root / "metrics"
        metrics.mkdir(exist_ok=True)
        (metrics / f"{lang}-guard.json").write_text(json.dumps({"chosen": "student", "chosen_path": "s"}), encoding="utf8")
        if Path(argv[argv.index("--vars.target_test") + 1]).exists():
            f1 = {"zero-shot": {"raw_text": {"ents_f": 0.5}}, "maral": {"raw_text": {"ents_f": 0.6}}}
            (metrics / f"{lang}-test.json").write_text(json.dumps({"results": f1}), encoding="utf8")
        return 0


def run(project: FakeProject, tmp_path: Path, langs, settings=("--vars.stage2_steps", "800")):
    return run_languages(project.root, langs, str(tmp_path / "{lang}.txt"), str(tmp_path / "{lang}.test"),
                         "maral_ner", settings=list(settings), run=project, echo=lambda line: None)


def test_a_failed_language_does_not_lose_the_others(tmp_path) -> None:
    for lang in ("de", "es", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
    write(tmp_path / "de.test", ["Berlin B-LOC"])
    project = FakeProject(tmp_path / "project", fail={"es"})
    outcomes = run(project, tmp_path, ["de", "es", "fi"])
    assert [lang for _, lang in project.calls] == ["de", "es", "fi"]
    assert {lang: o.status for lang, o in outcomes.items()} == {"de": "shipped", "es": "failed", "fi": "shipped"}
    assert outcomes["es"].returncode == 2 and outcomes["es"].shipped is None
    assert outcomes["de"].test_f1 == {"zero-shot": 0.5, "maral": 0.6} and outcomes["fi"].test_f1 is None
    assert outcomes["fi"].package == "maral_ner_fi" and outcomes["fi"].shipped == "student"
    recorded = json.loads((project.root / SUMMARY).read_text())["languages"]
    assert {lang: o["status"] for lang, o in recorded.items()} == {"de": "shipped", "es": "failed", "fi": "shipped"}


def test_a_folder_without_project_yml_is_refused_before_anything_runs(tmp_path) -> None:
    """Run outside the project (the default --project is the current folder), every
    language failed on spaCy's "Can't find project.yml" and metrics/languages.json was
    written there."""
    write(tmp_path / "fi.txt", [GERMAN])
    project = FakeProject(tmp_path / "project")
    (project.root / "project.yml").unlink()
    with pytest.raises(ValueError, match="is not a spaCy project \\(no project.yml\\): give --project"):
        run(project, tmp_path, ["fi"])
    assert project.calls == [] and not (project.root / "metrics").exists()
    result = CliRunner().invoke(app, ["languages", "fi", "--project", str(project.root), "--text", str(tmp_path / "fi.txt")])
    assert result.exit_code == 1 and "no project.yml" in result.output and not (project.root / "metrics").exists()


def test_several_languages_reading_one_text_are_refused(tmp_path) -> None:
    """target_langs de,fi with the README's target_text ../data/fi.txt (no {lang}) trained
    both students on the Finnish text; check-text passed it."""
    write(tmp_path / "fi.txt", [FINNISH])
    result = CliRunner().invoke(app, ["check-text", "de,fi", "--text", str(tmp_path / "fi.txt")])
    assert result.exit_code == 2 and "has no {lang}: de, fi would all read this one text" in " ".join(result.output.split())
    project = FakeProject(tmp_path / "project")
    with pytest.raises(ValueError, match="has no {lang}"):
        run_languages(project.root, ["de", "fi"], str(tmp_path / "fi.txt"), "none", "maral_ner", run=project, echo=lambda line: None)
    assert project.calls == []
    result = CliRunner().invoke(app, ["check-text", "fi", "--text", str(tmp_path / "fi.txt")])  # one language: its file
    assert result.exit_code == 0, result.output


def test_each_language_records_the_wall_time_of_its_workflow(tmp_path, monkeypatch) -> None:
    for lang in ("de", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
    project = FakeProject(tmp_path / "project")
    clock = iter([100.0, 160.0, 200.0, 290.5])  # de from 100 to 160 s, fi from 200 to 290.5 s
    monkeypatch.setattr("spacy_maral.workflow.languages.time.monotonic", lambda: next(clock))
    outcomes = run(project, tmp_path, ["de", "fi"])
    assert outcomes["de"].seconds == 60.0 and outcomes["fi"].seconds == 90.5
    recorded = json.loads((project.root / SUMMARY).read_text())["languages"]
    assert recorded["fi"]["seconds"] == 90.5


def test_a_run_again_trains_only_what_is_new_or_changed(tmp_path) -> None:
    for lang in ("de", "es", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
    project = FakeProject(tmp_path / "project", fail={"es"})
    run(project, tmp_path, ["de", "es"])
    project.fail, project.calls = set(), []
    run(project, tmp_path, ["de", "es"])
    assert project.calls == [("language", "es")]  # de is kept; es failed before: run again
    project.calls = []
    run(project, tmp_path, ["de", "es", "fi"])  # one language more
    assert project.calls == [("language", "fi")]
    project.calls = []
    write(tmp_path / "es.txt", [GERMAN, GERMAN])  # its text changed
    run(project, tmp_path, ["de", "es", "fi"])
    assert project.calls == [("language", "es")]
    project.calls = []
    (project.root / "training/teacher/model-best/maral_ner/model").write_text("other", encoding="utf8")  # new teachers
    run(project, tmp_path, ["de", "fi"])
    assert project.calls == [("language", "de"), ("language", "fi")]
    project.calls = []
    run(project, tmp_path, ["de", "fi"], settings=("--vars.stage2_steps", "400"))  # other settings
    assert project.calls == [("language", "de"), ("language", "fi")]


def test_a_relative_text_is_the_one_in_the_project_folder(tmp_path, monkeypatch) -> None:
    """The workflow runs in the project folder, so a relative --text is read there: its
    change there trains the language again, whatever the same path holds elsewhere."""
    project = FakeProject(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    for root in (project.root, elsewhere):
        (root / "data").mkdir(parents=True)
        write(root / "data" / "de.txt", [GERMAN])
    monkeypatch.chdir(elsewhere)
    for _ in range(2):
        run_languages(project.root, ["de"], "data/{lang}.txt", "data/{lang}.test", "maral_ner", run=project, echo=lambda line: None)
    assert project.calls == [("language", "de")]  # the second run kept it
    write(project.root / "data" / "de.txt", [GERMAN, GERMAN])
    run_languages(project.root, ["de"], "data/{lang}.txt", "data/{lang}.test", "maral_ner", run=project, echo=lambda line: None)
    assert project.calls == [("language", "de")] * 2


def test_a_changed_stage2_config_or_source_corpus_trains_every_language_again(tmp_path) -> None:
    for lang in ("de", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
    project = FakeProject(tmp_path / "project")
    config, corpus = tmp_path / "configs" / "adapt.cfg", project.root / "corpus" / "en-train.spacy"
    for path in (config, corpus):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("one", encoding="utf8")
    settings = ("--vars.source_lang", "en", "--vars.dev_lang", "es")
    run(project, tmp_path, ["de", "fi"], settings)
    project.calls = []
    corpus.write_text("one", encoding="utf8")  # the same bytes written again: kept
    run(project, tmp_path, ["de", "fi"], settings)
    assert project.calls == []
    config.write_text("two", encoding="utf8")  # ../configs/adapt.cfg, beside the project
    run(project, tmp_path, ["de", "fi"], settings)
    assert project.calls == [("language", "de"), ("language", "fi")]
    project.calls = []
    corpus.write_text("two", encoding="utf8")  # corpus/{source_lang}-train.spacy
    run(project, tmp_path, ["de", "fi"], settings)
    assert project.calls == [("language", "de"), ("language", "fi")]
    project.calls = []
    (project.root / "corpus" / "es-dev.spacy").write_text("new", encoding="utf8")  # corpus/{dev_lang}-dev.spacy
    run(project, tmp_path, ["de", "fi"], settings)
    assert project.calls == [("language", "de"), ("language", "fi")]


def test_the_ensemble_counts_by_its_teachers_weights_not_by_its_summary(tmp_path) -> None:
    write(tmp_path / "de.txt", [GERMAN])
    project = FakeProject(tmp_path / "project")
    weights = project.root / "training/ensemble/teacher-s1/model-best/maral_ner/model"
    weights.parent.mkdir(parents=True)
    weights.write_text("one", encoding="utf8")
    summary = project.root / "training/ensemble/teachers.json"

    def summarize(kept: bool) -> None:
        entry = {"model": "training/ensemble/teacher-s1/model-best", "wall_s": 1.0, "peak_rss_gb": 1.0, "kept": kept}
        summary.write_text(json.dumps({"teachers": {"1": entry}}), encoding="utf8")

    summarize(kept=False)
    run(project, tmp_path, ["de"])
    project.calls = []
    summarize(kept=True)  # train-teachers ran again and kept its teacher
    run(project, tmp_path, ["de"])
    assert project.calls == []
    weights.write_text("two", encoding="utf8")  # that teacher was trained again
    run(project, tmp_path, ["de"])
    assert project.calls == [("language", "de")]


def test_a_variable_is_its_last_setting_else_project_yml(tmp_path) -> None:
    from spacy_maral.workflow.languages import setting

    (tmp_path / "project.yml").write_text("vars:\n  source_lang: en\n  dev_lang: es\n", encoding="utf8")
    assert setting(tmp_path, ["--vars.dev_lang", "fi", "--vars.dev_lang=de"], "dev_lang") == "de"
    assert setting(tmp_path, ["--vars.dev_lang", "fi"], "source_lang") == "en"
    assert setting(tmp_path, [], "target_langs") is None


def test_a_bad_metrics_file_is_named_and_the_other_languages_go_on(tmp_path) -> None:
    for lang in ("de", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
        write(tmp_path / f"{lang}.test", ["Berlin B-LOC"])

    class BadMetrics(FakeProject):
        def __call__(self, argv) -> int:
            code = super().__call__(argv)
            if argv[argv.index("--vars.target_lang") + 1] == "de":
                (self.root / "metrics" / "de-test.json").write_text('{"results": {"maral": {}}}', encoding="utf8")
            return code

    project, lines = BadMetrics(tmp_path / "project"), []
    outcomes = run_languages(project.root, ["de", "fi"], str(tmp_path / "{lang}.txt"), str(tmp_path / "{lang}.test"),
                             "maral_ner", run=project, echo=lines.append)
    assert [lang for _, lang in project.calls] == ["de", "fi"]
    assert outcomes["de"].status == "shipped" and outcomes["de"].test_f1 is None and outcomes["fi"].test_f1
    assert any("de: shipped, but its figures could not be read" in line and "de-test.json" in line for line in lines)
    recorded = json.loads((project.root / SUMMARY).read_text())["languages"]
    assert sorted(recorded) == ["de", "fi"]
    recorded["fi"]["from_a_newer_version"] = 1  # a field this version does not know: the record is still read
    (project.root / SUMMARY).write_text(json.dumps({"languages": recorded}), encoding="utf8")
    project.calls = []
    run_languages(project.root, ["de", "fi"], str(tmp_path / "{lang}.txt"), str(tmp_path / "{lang}.test"),
                  "maral_ner", run=project, echo=lines.append)
    assert project.calls == []
    (project.root / SUMMARY).write_text('{"languages": [1]}', encoding="utf8")
    with pytest.raises(ValueError, match="languages.json is damaged"):
        run_languages(project.root, ["de"], str(tmp_path / "{lang}.txt"), str(tmp_path / "{lang}.test"),
                      "maral_ner", run=project, echo=lines.append)


def test_a_language_whose_package_name_changes_is_only_packaged_again(tmp_path) -> None:
    for lang in ("de", "fi"):
        write(tmp_path / f"{lang}.txt", [GERMAN])
    project = FakeProject(tmp_path / "project")
    outcomes = run(project, tmp_path, ["de"])
    assert outcomes["de"].package == "maral_ner"
    project.calls = []
    outcomes = run(project, tmp_path, ["de", "fi"])
    assert project.calls == [("package", "de"), ("language", "fi")]
    assert outcomes["de"].package == "maral_ner_de"


@pytest.mark.parametrize("content,lang,message", [
    ("  \n\t\n", "fi", "no sentence"),
    ("", "fi", "is empty"),
    (FINNISH + "\n", "xy", "unknown language code 'xy'"),
])
def test_pseudo_label_refuses_bad_input_before_the_teacher_loads(tmp_path, content, lang, message) -> None:
    """The teacher is an empty folder, which would not load: the message is about the
    input, and the output folder (no _lock, no _manifest.json) is never made."""
    text = tmp_path / "fi.txt"
    text.write_text(content, encoding="utf8")
    out = tmp_path / "pseudo"
    (tmp_path / "empty-teacher").mkdir()  # found (its config.cfg), but would not load
    (tmp_path / "empty-teacher" / "config.cfg").write_text("[nlp]\n", encoding="utf8")
    result = CliRunner().invoke(app, ["pseudo-label", str(tmp_path / "empty-teacher"), str(text), str(out), "--lang", lang])
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert "empty-teacher" not in result.output
    assert not out.exists()


def test_pseudo_label_refuses_its_input_folder_as_output_before_the_teacher_loads(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "fi.spacy").write_bytes(b"read after the check")  # stage 2 would read it with the shards
    (corpus / "fi.txt").write_text(FINNISH + "\n", encoding="utf8")
    (tmp_path / "empty-teacher").mkdir()  # found (its config.cfg), but would not load
    (tmp_path / "empty-teacher" / "config.cfg").write_text("[nlp]\n", encoding="utf8")
    result = CliRunner().invoke(app, ["pseudo-label", str(tmp_path / "empty-teacher"), str(corpus / "fi.spacy"), str(corpus)])
    assert result.exit_code == 1
    assert "holds the input" in " ".join(result.output.split()) and "empty-teacher" not in result.output
    assert sorted(p.name for p in corpus.iterdir()) == ["fi.spacy", "fi.txt"]  # no _lock, no _manifest.json
    # a text file beside the shards is never read as one: allowed (here the missing teacher stops it)
    result = CliRunner().invoke(app, ["pseudo-label", str(tmp_path / "no-teacher"), str(corpus / "fi.txt"), str(corpus)])
    assert result.exit_code == 1 and "holds the input" not in result.output and "no-teacher" in result.output
    (corpus / "notes.md").write_text("mine", encoding="utf8")  # a file where the output folder would go
    result = CliRunner().invoke(app, ["pseudo-label", str(tmp_path / "empty-teacher"), str(corpus / "fi.txt"), str(corpus / "notes.md")])
    assert result.exit_code == 1 and "empty-teacher" not in result.output
    assert "notes.md is a file, not a folder" in " ".join(result.output.split())


def test_a_text_missing_where_the_workflow_reads_it_is_refused_naming_the_path(tmp_path, monkeypatch) -> None:
    """A relative --text given from the current folder, not the project's, failed inside
    spaCy's project runner ("Missing dependency") for each language in turn."""
    project = FakeProject(tmp_path / "project")
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "de.txt", [GERMAN])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="nothing was run: de: target corpus .*project/data/de.txt does not exist "
                                         r"\(data/de.txt is there from the current folder: give its absolute path\); "
                                         "fi: target corpus .*project/data/fi.txt does not exist$"):
        run_languages(project.root, ["de", "fi"], "data/{lang}.txt", "none", "maral_ner", run=project, echo=lambda line: None)
    assert project.calls == [] and not (project.root / "metrics").exists()
    (project.root / "data").mkdir()
    write(project.root / "data" / "de.txt", [GERMAN])
    (project.root / "data" / "fi.txt").write_text("Paris B-LOC\nis O\nbig O\n", encoding="utf8")
    with pytest.raises(ValueError, match="nothing was run: fi: .*fi.txt, line 1: 'Paris B-LOC' is a CoNLL-style token line"):
        run_languages(project.root, ["de", "fi"], "data/{lang}.txt", "none", "maral_ner", run=project, echo=lambda line: None)
    assert project.calls == []


def test_the_closing_table_says_what_failed_and_what_shipped(tmp_path, monkeypatch) -> None:
    """A failed language was listed "not scored (no test set)" though its test set was
    scored before the failure, and a run of one language ended "the others were shipped"."""
    from spacy_maral.workflow.languages import LanguageOutcome

    outcomes = {"de": LanguageOutcome(status="shipped", fingerprint="x", package="maral_ner_de"),
                "fi": LanguageOutcome(status="failed", fingerprint="y", package="maral_ner_fi", returncode=1)}
    monkeypatch.setattr("spacy_maral.workflow.languages.run_languages", lambda *args, **kwargs: dict(outcomes))
    result = CliRunner().invoke(app, ["languages", "de,fi", "--project", str(tmp_path), "--text", "{lang}.txt"])
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.split()[:1] in (["de"], ["fi"])}
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "not scored (no test set)" in rows["de"] and "not scored" not in rows["fi"], result.output
    assert "languages: fi failed (the logs are above); de shipped" in said
    del outcomes["de"]
    result = CliRunner().invoke(app, ["languages", "fi", "--project", str(tmp_path), "--text", "{lang}.txt"])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and said.endswith("languages: fi failed (the logs are above)"), said
