"""Many target languages in one run: the spaCy project's per-language workflow, once for
each language, on the teachers that the run trained once.

For each language the project's `language` workflow runs as a child `spacy project run`
with that language's variables (its code, its raw text, its optional test set, its
package name). A language that fails is recorded and the next one runs; the run ends
with every language's outcome in `metrics/languages.json`. A language finished earlier
with the same inputs (its text and test set, the teachers, the stage-2 config, the
source and development corpora, the settings) is kept, not trained again, so adding a
language to a finished run trains only the new one.
"""
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from spacy_maral.corpora.target_path import check_target_path
from spacy_maral.fileio import atomic_write_text
from spacy_maral.fingerprint import path_digest
from spacy_maral.workflow.overrides import override_value

SUMMARY = Path("metrics") / "languages.json"
# what every language's workflow is trained from, beside its own text, as files of the
# project folder: the teacher's weights, the ensemble's summary (each of its teachers'
# weights are read from it: shared_inputs) and the stage-2 config
TEACHER_WEIGHTS = "maral_ner/model"  # in a teacher's model folder
ENSEMBLE = "training/ensemble/teachers.json"
SHARED_FILES = ("training/teacher/model-best/" + TEACHER_WEIGHTS, "../configs/adapt.cfg")
# and the corpora it reads, by the language variables of the settings that name them
SHARED_CORPORA = (("source_lang", "corpus/{}-train.spacy"), ("source_lang", "corpus/{}-dev.spacy"), ("dev_lang", "corpus/{}-dev.spacy"))


@dataclass
class LanguageOutcome:
    """How one language of a run ended.

    status (str): "shipped" (its workflow ran to the end) or "failed".
    fingerprint (str): the digest of what it was trained from (language_fingerprint).
    package (str): the name of its package (LANG_NAME, e.g. xx_maral_ner).
    returncode (int): the exit status of its workflow.
    shipped (Optional[str]): what the guard chose to ship, "student", "fallback" or "teacher".
    test_f1 (Optional[Dict[str, float]]): raw-text F1 of teacher and student on its test
        set; None when it has none.
    seconds (Optional[float]): the wall time of its workflow, when it ran (a language
        kept from an earlier run keeps that run's time).
    """

    status: str
    fingerprint: str
    package: str
    returncode: int = 0
    shipped: Optional[str] = None
    test_f1: Optional[Dict[str, float]] = None
    seconds: Optional[float] = None


def lang_path(template: str, lang: str) -> Path:
    """A per-language path from a template: every `{lang}` is the language code
    ("data/{lang}.txt" -> "data/fi.txt"); a template without it is one path.

    template (str): the path, with `{lang}` where the code goes.
    lang (str): the language code.
    """
    return Path(template.replace("{lang}", lang))


def check_text_template(template: str, langs: Sequence[str]) -> None:
    """Raise ValueError where several languages would read one raw text: `template` has
    no `{lang}` (each student would be trained on the same sentences).

    template (str): the raw texts' path (--text, the workflow's target_text).
    langs (Sequence[str]): the target languages.
    """
    if len(langs) > 1 and "{lang}" not in template:
        raise ValueError(f"{template} has no {{lang}}: {', '.join(langs)} would all read this one text; give each "
                         "language its own, e.g. data/{lang}.txt")


def check_texts_found(project: Path, template: str, langs: Sequence[str]) -> None:
    """Raise ValueError naming every language whose raw text is not where its workflow
    will read it: a relative path is read from the project folder (with a hint where the
    same path exists from the current folder instead).

    project (Path): the project folder, where each language's workflow runs.
    template (str): the raw texts' path, `{lang}` where the code goes.
    langs (Sequence[str]): the target languages.
    """
    missing = []
    for lang in langs:
        path = lang_path(template, lang)
        try:
            check_target_path((project / path).resolve())
        except ValueError as err:
            here = not path.is_absolute() and path.exists() and not (project / path).exists()
            missing.append(f"{lang}: {err}" + (f" ({path} is there from the current folder: give its absolute path)" if here else ""))
    if missing:
        raise ValueError("a language's raw text can't be read where its workflow runs (a relative --text is read "
                         "from the project folder); nothing was run: " + "; ".join(missing))


def split_langs(langs: str) -> List[str]:
    """The language codes of a comma-separated list ("de, es,fi" -> ["de", "es", "fi"]),
    each once, in order.

    langs (str): the list.
    RAISES (ValueError): an empty list.
    """
    codes: List[str] = []
    for code in (part.strip() for part in langs.split(",")):
        if code and code not in codes:
            codes.append(code)
    if not codes:
        raise ValueError(f"no language code in {langs!r}: give e.g. de or de,es,fi")
    return codes


def package_name(name: str, lang: str, n_langs: int) -> str:
    """The package name of a language: `name` when the run has one language (the
    package is xx_NAME), else NAME_LANG (xx_NAME_de, xx_NAME_fi, ...).

    name (str): the run's name (the workflow's `name`).
    lang (str): the language code.
    n_langs (int): how many languages the run has.
    """
    return name if n_langs == 1 else f"{name}_{lang}"


def setting(project: Path, settings: Sequence[str], key: str) -> Optional[str]:
    """The value of a workflow variable: the last `--vars.KEY VALUE` (or
    `--vars.KEY=VALUE`) of the settings, as spaCy takes it, else the project's
    project.yml; None where neither sets it.

    project (Path): the project folder.
    settings (Sequence[str]): the workflow's `--vars` arguments.
    key (str): the variable's name.
    """
    value = override_value(settings, f"vars.{key}")
    if value is None and (project / "project.yml").is_file():
        import srsly

        try:
            value = (srsly.read_yaml(project / "project.yml").get("vars") or {}).get(key)
        except (OSError, ValueError, AttributeError):  # weasel's own reading of it reports what is wrong
            value = None
    return None if value is None else str(value)


def shared_inputs(project: Path, settings: Sequence[str]) -> List[Path]:
    """The files every language's workflow is trained from: SHARED_FILES, the weights of
    each teacher of the ensemble (from its summary; the summary itself where it can't be
    read), and the source and development corpora of the variables `source_lang` and
    `dev_lang`.

    project (Path): the project folder.
    settings (Sequence[str]): the workflow's `--vars` arguments.
    """
    from spacy_maral.training.run_summary import summary_models

    try:  # the teachers' weights, not the summary: a rerun that keeps them rewrites it
        ensemble = [str(Path(model) / TEACHER_WEIGHTS) for model in summary_models(project / ENSEMBLE)]
    except ValueError:
        ensemble = [ENSEMBLE]
    corpora = [template.format(value) for key, template in SHARED_CORPORA if (value := setting(project, settings, key))]
    return [project / name for name in dict.fromkeys((*SHARED_FILES, *ensemble, *corpora))]


def language_fingerprint(project: Path, text: Path, test: Path, settings: Sequence[str]) -> str:
    """What a language's outputs are made from: the bytes of its raw text and test set,
    of the run's teachers, the stage-2 config and the source corpora (shared_inputs),
    and the workflow settings.

    project (Path): the project folder (the shared files are read there).
    text (Path): the language's raw text.
    test (Path): its test set (absent: no test).
    settings (Sequence[str]): the variables the workflow gets (the package name left out).
    """
    files = [text, test, *shared_inputs(project, settings)]
    parts = [path_digest(f, content=True) for f in files] + list(settings)
    return hashlib.sha256("\n".join(parts).encode("utf8")).hexdigest()


def read_summary(project: Path) -> Dict[str, Dict]:
    """The outcomes recorded in PROJECT/metrics/languages.json ({} when there is none)."""
    path = project / SUMMARY
    if not path.exists():
        return {}
    try:
        recorded = json.loads(path.read_text(encoding="utf8"))["languages"]
        if not isinstance(recorded, dict):
            raise TypeError(f"'languages' is a {type(recorded).__name__}, not an object")
        return recorded
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is damaged ({type(err).__name__}: {err}): delete it to run every language again") from err


def _outcome_figures(project: Path, lang: str, outcome: LanguageOutcome) -> None:
    """Read what the guard shipped and the test F1s from the language's metrics files.

    RAISES (ValueError): a metrics file that is not what its command writes, named.
    """
    from spacy_maral.evaluation.verdict import read_verdict

    guard = project / "metrics" / f"{lang}-guard.json"
    if guard.exists():
        outcome.shipped = read_verdict(guard)[0]
    test = project / "metrics" / f"{lang}-test.json"
    if test.exists():
        try:
            results = json.loads(test.read_text(encoding="utf8")).get("results") or {}
            outcome.test_f1 = {name: float(r["raw_text"]["ents_f"]) for name, r in results.items()} or None
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{test} is not a result of `spacy_maral evaluate` ({type(err).__name__}: {err})") from err


def recorded_outcome(record: Dict) -> Optional[LanguageOutcome]:
    """A language's outcome as languages.json recorded it; None for a record that isn't
    one (damaged, or of another version): that language runs again."""
    names = {f.name for f in fields(LanguageOutcome)}
    try:
        return LanguageOutcome(**{k: v for k, v in record.items() if k in names})
    except (TypeError, AttributeError):
        return None


def run_languages(
    project: Path,
    langs: Sequence[str],
    text: str,
    test: str,
    name: str,
    settings: Sequence[str] = (),
    workflow: str = "language",
    run: Callable[[List[str]], int] = lambda argv: subprocess.run(argv).returncode,
    echo: Callable[[str], None] = print,
) -> Dict[str, LanguageOutcome]:
    """Run the project's per-language workflow for each language, one after the other.

    project (Path): the spaCy project folder (its teachers already trained).
    langs (Sequence[str]): the target language codes.
    text (str): each language's raw text, `{lang}` where the code goes; a relative path
        is read from the project folder, where the workflow runs.
    test (str): each language's test set, `{lang}` where the code goes (where none
        exists, the workflow says so and scores nothing); relative: as `text`.
    name (str): the run's package name (package_name gives each language's).
    settings (Sequence[str]): more `--vars.KEY VALUE` arguments for the workflow.
    workflow (str): the project workflow of one language.
    run (Callable): runs a command line, returns its exit status.
    echo (Callable): prints a progress line.
    RETURNS (Dict[str, LanguageOutcome]): each language's outcome, also written to
        PROJECT/metrics/languages.json after each language.
    RAISES (ValueError): `project` holds no project.yml, several languages would read
        one text (check_text_template), or a language's text is missing or not plain
        text (check_texts_found); nothing is run or written.
    """
    project = Path(project)
    check_text_template(text, langs)
    if not (project / "project.yml").is_file():
        raise ValueError(f"{project.resolve()} is not a spaCy project (no project.yml): give --project, the folder "
                         "of the spacy-maral project whose teachers are trained")
    check_texts_found(project, text, langs)
    recorded = read_summary(project)
    outcomes: Dict[str, LanguageOutcome] = {}
    for i, lang in enumerate(langs, start=1):
        text_path, test_path = lang_path(text, lang), lang_path(test, lang)
        package = package_name(name, lang, len(langs))
        # the workflow runs in the project folder: a relative path is read there
        fingerprint = language_fingerprint(project, project / text_path, project / test_path, [lang, *settings])
        earlier = recorded_outcome(recorded[lang]) if lang in recorded else None
        target = workflow
        if earlier and earlier.status == "shipped" and earlier.fingerprint == fingerprint:
            if earlier.package == package:
                echo(f"[{i}/{len(langs)}] {lang}: finished earlier from the same inputs and settings: kept")
                outcomes[lang] = earlier
                continue
            target = "package"  # only its package name changed (the run gained languages)
        argv = [sys.executable, "-m", "spacy", "project", "run", target, str(project),
                "--vars.target_lang", lang, "--vars.target_text", str(text_path),
                "--vars.target_test", str(test_path), "--vars.name", package, *settings]
        echo(f"[{i}/{len(langs)}] {lang}: {' '.join(argv[2:])}")
        started = time.monotonic()
        code = run(argv)
        outcome = LanguageOutcome(status="shipped" if code == 0 else "failed", fingerprint=fingerprint,
                                  package=package, returncode=code, seconds=round(time.monotonic() - started, 1))
        outcomes[lang] = outcome
        if code == 0:
            try:
                _outcome_figures(project, lang, outcome)
            except ValueError as err:  # shipped all the same: recorded, and the others go on
                echo(f"[{i}/{len(langs)}] {lang}: shipped, but its figures could not be read: {err}")
        else:
            echo(f"[{i}/{len(langs)}] {lang}: FAILED (exit status {code}); the other languages go on")
        recorded[lang] = asdict(outcome)
        atomic_write_text(project / SUMMARY, json.dumps({"languages": recorded}, indent=2))
    return outcomes
