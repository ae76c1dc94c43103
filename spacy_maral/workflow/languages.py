"""Many target languages in one run: the spaCy project's per-language workflow, once for
each language, on the teachers that the run trained once.

For each language the project's `language` workflow runs as a child `spacy project run`
with that language's variables (its code, its raw text, its optional test set, its
package name). A language that fails is recorded and the next one runs; the run ends
with every language's outcome in `metrics/languages.json`. A language finished earlier
with the same inputs (its text, the teachers, the settings) is kept, not trained again,
so adding a language to a finished run trains only the new one.
"""
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from spacy_maral.fileio import atomic_write_text

SUMMARY = Path("metrics") / "languages.json"
# what the per-language workflow is trained from, beside the language's text: the teacher
# and the ensemble's teachers (their summary), as files of the project folder
TEACHER_FILES = ("training/teacher/model-best/maral_ner/model", "training/ensemble/teachers.json")


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


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, or of a folder's files (names and bytes, in order);
    "absent" for a path that does not exist."""
    path = Path(path)
    if not path.exists():
        return "absent"
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def language_fingerprint(project: Path, text: Path, test: Path, settings: Sequence[str]) -> str:
    """What a language's outputs are made from: its raw text and test set, the run's
    teachers and the workflow settings.

    project (Path): the project folder (the teachers' files are read there).
    text (Path): the language's raw text.
    test (Path): its test set (absent: no test).
    settings (Sequence[str]): the variables the workflow gets (the package name left out).
    """
    parts = [file_digest(text), file_digest(test), *(file_digest(project / f) for f in TEACHER_FILES), *settings]
    return hashlib.sha256("\n".join(parts).encode("utf8")).hexdigest()


def read_summary(project: Path) -> Dict[str, Dict]:
    """The outcomes recorded in PROJECT/metrics/languages.json ({} when there is none)."""
    path = project / SUMMARY
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf8"))["languages"]
    except (ValueError, KeyError) as err:
        raise ValueError(f"{path} is damaged ({err}): delete it to run every language again") from err


def _outcome_figures(project: Path, lang: str, outcome: LanguageOutcome) -> None:
    """Read what the guard shipped and the test F1s from the language's metrics files."""
    from spacy_maral.evaluation.guard import read_verdict

    guard = project / "metrics" / f"{lang}-guard.json"
    if guard.exists():
        outcome.shipped = read_verdict(guard)[0]
    test = project / "metrics" / f"{lang}-test.json"
    if test.exists():
        results = json.loads(test.read_text(encoding="utf8")).get("results") or {}
        outcome.test_f1 = {name: r["raw_text"]["ents_f"] for name, r in results.items()} or None


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
    text (str): each language's raw text, `{lang}` where the code goes.
    test (str): each language's test set, `{lang}` where the code goes (where none
        exists, the workflow says so and scores nothing).
    name (str): the run's package name (package_name gives each language's).
    settings (Sequence[str]): more `--vars.KEY VALUE` arguments for the workflow.
    workflow (str): the project workflow of one language.
    run (Callable): runs a command line, returns its exit status.
    echo (Callable): prints a progress line.
    RETURNS (Dict[str, LanguageOutcome]): each language's outcome, also written to
        PROJECT/metrics/languages.json after each language.
    """
    project = Path(project)
    recorded = read_summary(project)
    outcomes: Dict[str, LanguageOutcome] = {}
    for i, lang in enumerate(langs, start=1):
        text_path, test_path = lang_path(text, lang), lang_path(test, lang)
        package = package_name(name, lang, len(langs))
        fingerprint = language_fingerprint(project, text_path, test_path, [lang, *settings])
        earlier = recorded.get(lang)
        target = workflow
        if earlier and earlier.get("status") == "shipped" and earlier.get("fingerprint") == fingerprint:
            if earlier.get("package") == package:
                echo(f"[{i}/{len(langs)}] {lang}: finished earlier from the same text, teachers and settings: kept")
                outcomes[lang] = LanguageOutcome(**earlier)
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
            _outcome_figures(project, lang, outcome)
        else:
            echo(f"[{i}/{len(langs)}] {lang}: FAILED (exit status {code}); the other languages go on")
        recorded[lang] = asdict(outcome)
        atomic_write_text(project / SUMMARY, json.dumps({"languages": recorded}, indent=2))
    return outcomes
