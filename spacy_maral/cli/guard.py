"""`python -m spacy_maral guard`: should the student be trusted? (no target tags read)"""
from pathlib import Path
from typing import Literal, Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option


def say_verdict(msg, report, trusted: str, distrusted: str) -> None:
    """Print a check's verdict: `trusted` when it passed, else `distrusted` and each
    problem (on stderr).

    msg (Printer): the command's printer.
    report (GuardReport): the check.
    trusted (str): the line for a pipeline that passed.
    distrusted (str): the warning for one that did not.
    """
    if report.trusted:
        msg.good(trusted)
    else:
        msg.warn(distrusted)
        for problem in report.problems:
            msg.text(f"  - {problem}", err=True)


@app.command("guard")
def guard_command(
    teacher_path: Path = typer.Argument(..., help="The teacher pipeline (stage 1)."),
    student_path: Path = typer.Argument(..., help="The student pipeline (stage 2)."),
    dev_path: Path = typer.Argument(..., help="Gold source dev corpus (.spacy or CoNLL)."),
    target_text: Path = typer.Argument(..., help="Raw target text (plain text, CoNLL whose tags are ignored, or .spacy)."),
    output: Path = typer.Option(..., "--output", "-o", help="JSON file with the figures, the verdict and the chosen pipeline."),
    source_lang: Optional[str] = typer.Option(None, "--source-lang", help="Tokenizer rules for the source dev text (default: each pipeline's own)."),
    target_lang: Optional[str] = typer.Option(None, "--target-lang", help="Tokenizer rules for the target text, for both pipelines (default: each pipeline's own)."),
    dev_limit: int = typer.Option(1000, "--dev-limit", help="Source dev sentences used (0 = all)."),
    target_limit: int = typer.Option(500, "--target-limit", help="Target sentences used (0 = all)."),
    max_dev_drop: float = typer.Option(5.0, "--max-dev-drop", help="Largest allowed drop of source dev F1 (points) from teacher to student (15 for a student that does not start from its teacher)."),
    min_agreement: float = typer.Option(60.0, "--min-agreement", help="Smallest allowed student-teacher entity F1 (points) on the target text."),
    max_class_cosine: float = typer.Option(0.99, "--max-class-cosine", help="Largest allowed cosine between two classes' span-vector means."),
    max_label_shift: float = typer.Option(0.2, "--max-label-shift", help="Largest allowed total variation distance (0 to 1) between the label distributions of the student's and the teacher's entities on the target text (1 = never distrusts)."),
    package_choice: Literal["auto", "student", "teacher"] = typer.Option("auto", "--package-choice", help="auto (the student if trusted, else the fallback if trusted, else the teacher), student or teacher."),
    fallback_weight: float = typer.Option(0.0, "--fallback-weight", help="Where the student is not trusted (auto): build the fallback (1 - W) * teacher + W * student, deciding at its RATE inference_tau, check it as the student was, and ship it if trusted, before the teacher. 0 = no fallback."),
    fallback_dir: Optional[Path] = typer.Option(None, "--fallback-dir", help="With --fallback-weight: the folder the fallback pipeline is written to (a new or empty folder, or one guard wrote)."),
    pseudo_labels: Optional[Path] = typer.Option(None, "--pseudo-labels", help="With --fallback-weight: the pseudo-labelled target corpus (the output of pseudo-label) whose entity count RATE matches."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", help="Texts per batch."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    precision: Precision = precision_option(),
) -> None:
    """Say whether the student can be trusted, and which pipeline to package.

    Compares student and teacher without target tags (source dev F1 on raw text,
    agreement on the target text, class-mean collapse), says plainly whether the student
    can be trusted, and records which pipeline to package (`export --guard`). With
    --fallback-weight, a distrusted student is followed by the fallback (the teacher
    interpolated with it), checked the same way, before the teacher is chosen.
    """

    from spacy_maral.corpora.target_path import check_gold_entities, check_gold_path, check_target_path
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.training.fallback import check_fallback_weight
    from spacy_maral.util import Printer

    msg = Printer()
    try:  # the arguments first, before minutes of loading and scoring (and before spaCy and torch are imported)
        check_fallback_weight(fallback_weight)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--fallback-weight") from err
    if not 0.0 <= max_label_shift <= 1.0:
        raise typer.BadParameter(f"{max_label_shift:g} is not a total variation distance (0 to 1)", param_hint="--max-label-shift")
    if fallback_weight > 0 and (fallback_dir is None or pseudo_labels is None):
        raise typer.BadParameter("a fallback needs --fallback-dir and --pseudo-labels", param_hint="--fallback-weight")
    for name, path, check in (("DEV", dev_path, check_gold_path), ("TARGET_TEXT", target_text, check_target_path)):
        try:
            check(path)
        except ValueError as err:
            msg.fail(f"guard: {name}: {err}", exits=1)
    for name, path in (("TEACHER", teacher_path), ("STUDENT", student_path)):
        try:
            check_pipeline_found(path)
        except ValueError as err:
            msg.fail(f"guard: {name}: {err}", exits=1)

    from thinc.api import require_gpu

    from spacy_maral.corpora.docbin import docbin_paths
    from spacy_maral.corpora.target_text import iter_target_docs
    from spacy_maral.evaluation.guard import FallbackCheck, GuardThresholds, check_package_choice, check_student, write_verdict
    from spacy_maral.fileio import check_output_file, check_replaceable
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.tokenizer import set_tokenizer_lang
    from spacy_maral.training.fallback import build_fallback

    try:
        check_package_choice(package_choice)  # the parser took one of them (Literal); a caller of this function may not
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--package-choice") from err
    if fallback_weight > 0:
        try:
            check_replaceable(fallback_dir, "guard --fallback-dir")
            docbin_paths(pseudo_labels)
        except ValueError as err:
            msg.fail(f"guard: {err}", exits=1)
    try:
        check_output_file(output, "--output")
    except ValueError as err:
        msg.fail(f"guard: {err}", exits=1)
    if gpu_id >= 0:
        require_gpu(gpu_id)
    try:
        teacher = load_pipeline(teacher_path, precision=precision)
        student = load_pipeline(student_path, precision=precision)
        if target_lang:
            set_tokenizer_lang(teacher, target_lang)
            set_tokenizer_lang(student, target_lang)
        dev = list(iter_target_docs(dev_path, teacher, gold_tokens=True))
        dev = dev[:dev_limit] if dev_limit > 0 else dev
        texts = [d.text for d in iter_target_docs(target_text, teacher, gold_tokens=True)]
        texts = texts[:target_limit] if target_limit > 0 else texts
        if not dev or not texts:
            raise ValueError(f"no sentences in {dev_path if not dev else target_text}")
        check_gold_entities(dev, dev_path)
        limits = GuardThresholds(max_dev_drop=max_dev_drop, min_agreement=min_agreement, max_class_cosine=max_class_cosine,
                                 max_label_shift=max_label_shift)
        with msg.loading(f"checking the student on {len(dev)} source dev and {len(texts)} target sentences"):
            report = check_student(teacher, student, dev, texts, source_lang=source_lang, thresholds=limits, batch_size=batch_size)
    except (OSError, ValueError) as err:
        msg.fail(f"guard failed: {err}", exits=1)
    msg.info(
        f"source dev F1: teacher {report.teacher_dev_f:.2f}, student {report.student_dev_f:.2f}; "
        f"agreement on the target text {report.agreement_f:.2f}; largest class cosine {report.student_max_class_cosine:.4f}"
    )
    ratio, shift = report.target_entity_ratio, report.target_label_shift
    msg.info(
        "the student finds "
        + (f"{ratio:.2f}x the teacher's entities" if ratio is not None else "entities where the teacher found none")
        + " on the target text (reported, deciding nothing)"
        + (f"; its label distribution is {shift:.3f} from the teacher's (total variation)" if shift is not None else "")
    )
    say_verdict(msg, report, "the student passed every check", "THE STUDENT SHOULD NOT BE TRUSTED:")
    fallback = None
    if fallback_weight > 0 and package_choice == "auto" and not report.trusted:
        try:
            path, rate = build_fallback(teacher_path, student_path, fallback_weight, pseudo_labels, fallback_dir,
                                        batch_size=batch_size, progress=msg.info)
            msg.info(f"RATE: inference_tau {rate.chosen:g} ({rate.entities[rate.chosen]} entities, the pseudo-labels "
                     f"{rate.pseudo_label_entities}); the fallback written to {path}")
            candidate = load_pipeline(path, precision=precision)
            if target_lang:
                set_tokenizer_lang(candidate, target_lang)
            with msg.loading(f"checking the fallback on {len(dev)} source dev and {len(texts)} target sentences"):
                fallback_report = check_student(teacher, candidate, dev, texts, source_lang=source_lang, thresholds=limits,
                                                batch_size=batch_size)
        except (OSError, ValueError) as err:
            msg.fail(f"guard failed: the fallback: {err}", exits=1)
        fallback = FallbackCheck(fallback_weight, path, rate.to_dict(), fallback_report)
        msg.info(f"the fallback: source dev F1 {fallback_report.student_dev_f:.2f}; agreement on the target text "
                 f"{fallback_report.agreement_f:.2f}")
        say_verdict(msg, fallback_report, "the fallback passed every check", "the fallback should not be trusted either:")
    chosen = write_verdict(output, report, teacher_path, student_path, package_choice, fallback)
    msg.info(f"package: the {chosen} ({package_choice})")
    msg.good(f"verdict: {output}")
