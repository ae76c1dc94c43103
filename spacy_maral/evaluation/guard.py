"""Should the student be trusted? A check of stage 2's result without target tags.

Stage 2 can make a model worse than the teacher it started from: a budget too short for
the student to separate its classes, a collapse of the class means, or refinement that
drifts away from anything the teacher knew. None of that needs target tags to be seen:

- **source dev F1** (raw text, exact character offsets) of student and teacher: a
  student far below the teacher on the language both were trained on is undertrained,
  broken, or has drifted from what its teacher knew (a student warm-started from its
  teacher is a few points below it; more than 5 points below, the students measured did
  not gain on their target language; the paper's student, which starts from the
  pretrained encoder, needs a `max_dev_drop` of 15);
- **agreement with the teacher on the target text**: the entity-level F1 between the
  student's and the teacher's predictions on raw target sentences. The student learns
  from the teacher's labels; a student that agrees with little of them has not learned
  them (or has collapsed);
- **class-mean collapse**: the largest cosine between two classes' span-vector means on
  the source dev set (`margins.span_class_geometry`); above 0.99 the classes have merged.

Two more figures on the same target sentences, the signs of a student that drifted from
its teacher (more, or other, entities): the student's entity count over the teacher's
(`target_entity_ratio`, reported, deciding nothing) and the total variation distance
between their label distributions (`target_label_shift`, which distrusts the student
above `max_label_shift`, 0.2 by default).
BENCHMARKS.md says how well each figure predicted, across the runs made, a student that
did not beat its teacher.

`check_student` returns the verdict with every figure; the workflow writes it as JSON,
says plainly when the student should not be trusted, and `choose` picks the pipeline to
package: the student, else the fallback where one was built and passed the same check
(`training.fallback`, recorded as a `FallbackCheck`), else the teacher. The thresholds
are settings (`GuardThresholds`), fixed before any target test set was read;
BENCHMARKS.md says where they come from.
"""
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.evaluation.margins import span_class_geometry
from spacy_maral.evaluation.raw_text import char_prf, evaluate_raw_text
from spacy_maral.evaluation.verdict import where
from spacy_maral.fileio import atomic_write_text
from spacy_maral.pipeline.tokenizer import tokenizer_rules


@dataclass
class GuardThresholds:
    """When a student is not trusted.

    max_dev_drop (float): largest allowed drop of the source dev F1 (raw text, points)
        from the teacher's to the student's.
    min_agreement (float): smallest allowed F1 (points) between the student's and the
        teacher's entities on the target sentences.
    max_class_cosine (float): largest allowed cosine between two classes' span-vector
        means on the source dev set.
    max_label_shift (float): largest allowed total variation distance (0 to 1) between
        the label distributions of the student's and the teacher's entities on the target
        sentences; 1.0 never distrusts.

    The defaults are the workflow's (BENCHMARKS.md, "The guard").
    """

    max_dev_drop: float = 5.0
    min_agreement: float = 60.0
    max_class_cosine: float = 0.99
    max_label_shift: float = 0.2


@dataclass
class GuardReport:
    """The figures of the check and its verdict."""

    teacher_dev_f: float
    student_dev_f: float
    agreement_f: float
    student_max_class_cosine: float
    thresholds: GuardThresholds
    problems: List[str] = field(default_factory=list)
    target_entity_ratio: Optional[float] = None
    target_label_shift: Optional[float] = None

    @property
    def trusted(self) -> bool:
        return not self.problems

    def to_dict(self) -> Dict[str, object]:
        out = asdict(self)
        out["trusted"] = self.trusted
        return out


Entities = List[List[Tuple[int, int, str]]]


def target_entities(nlp: Language, texts: Sequence[str], batch_size: int = 64) -> Entities:
    """The (start_char, end_char, label) entities of each raw text."""
    return [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts, batch_size=batch_size)]


def target_agreement(teacher: Language, student: Language, texts: Sequence[str], batch_size: int = 64) -> float:
    """Entity-level F1 (points) of the student's entities against the teacher's on raw text.

    teacher (Language): the teacher, with the tokenizer it labelled the target text with.
    student (Language): the student.
    texts (Sequence[str]): raw target sentences.
    batch_size (int): texts per nlp.pipe batch.
    """
    return agreement_f(target_entities(teacher, texts, batch_size), target_entities(student, texts, batch_size))


def agreement_f(teacher_ents: Entities, student_ents: Entities) -> float:
    """Entity-level F1 (points) of the student's entities against the teacher's; 100
    where neither found an entity (they agree on every sentence)."""
    if not any(teacher_ents) and not any(student_ents):
        return 100.0
    return 100.0 * float(char_prf(teacher_ents, student_ents)["ents_f"])


def drift_figures(teacher_ents: Entities, student_ents: Entities) -> Dict[str, Optional[float]]:
    """How the student's entities on the target text differ from the teacher's, in bulk.

    teacher_ents (Entities): the teacher's entities of each sentence.
    student_ents (Entities): the student's, of the same sentences.
    RETURNS (Dict[str, Optional[float]]): "target_entity_ratio", the student's entity
        count over the teacher's (1 when neither found one, None when only the student did), and
        "target_label_shift", the total variation distance (0 to 1) between the label
        distributions of their entities (None when either found none).
    """
    teacher_labels = Counter(label for ents in teacher_ents for _, _, label in ents)
    student_labels = Counter(label for ents in student_ents for _, _, label in ents)
    n_teacher, n_student = sum(teacher_labels.values()), sum(student_labels.values())
    ratio = n_student / n_teacher if n_teacher else (1.0 if not n_student else None)  # none and none: the same count
    shift = None
    if n_teacher and n_student:
        labels = set(teacher_labels) | set(student_labels)
        shift = 0.5 * sum(abs(teacher_labels[x] / n_teacher - student_labels[x] / n_student) for x in labels)
    return {"target_entity_ratio": ratio, "target_label_shift": shift}


def dev_f1(nlp: Language, dev_docs: Sequence[Doc], lang: Optional[str] = None, batch_size: int = 64) -> float:
    """A pipeline's entity F1 (points) on the raw text of gold dev docs, exact character
    offsets: the guard's source dev figure, and what `select-checkpoint` ranks (English
    dev, or the development language's own dev set).

    nlp (Language): the pipeline.
    dev_docs (Sequence[Doc]): gold dev docs.
    lang (Optional[str]): tokenizer rules for the text; None = the pipeline's own.
    batch_size (int): texts per batch.
    """
    with tokenizer_rules(nlp, lang):
        return 100.0 * float(evaluate_raw_text(nlp, dev_docs, batch_size=batch_size, count_unreachable=False)["ents_f"])


def check_student(
    teacher: Language,
    student: Language,
    dev_docs: Sequence[Doc],
    target_texts: Sequence[str],
    source_lang: Optional[str] = None,
    thresholds: Optional[GuardThresholds] = None,
    batch_size: int = 64,
) -> GuardReport:
    """Compare student and teacher without target tags.

    teacher (Language): the stage-1 pipeline.
    student (Language): the stage-2 pipeline.
    dev_docs (Sequence[Doc]): gold source dev docs.
    target_texts (Sequence[str]): raw target sentences (a sample of the training text).
    source_lang (Optional[str]): tokenizer rules for the source dev text (both pipelines
        are scored with them); None = each pipeline's own.
    thresholds (Optional[GuardThresholds]): when not to trust the student.
    batch_size (int): texts per batch.
    RETURNS (GuardReport): the figures and the problems found (none: trusted).
    """
    limits = thresholds or GuardThresholds()
    dev_f = {name: dev_f1(nlp, dev_docs, source_lang, batch_size) for name, nlp in (("teacher", teacher), ("student", student))}
    with tokenizer_rules(student, source_lang):
        cosine = float(span_class_geometry(student, dev_docs, batch_size=batch_size)["max_cosine"])
    teacher_ents = target_entities(teacher, target_texts, batch_size=batch_size)
    student_ents = target_entities(student, target_texts, batch_size=batch_size)
    agreement = agreement_f(teacher_ents, student_ents)
    report = GuardReport(dev_f["teacher"], dev_f["student"], agreement, cosine, limits, **drift_figures(teacher_ents, student_ents))
    drop = report.teacher_dev_f - report.student_dev_f
    if drop > limits.max_dev_drop:
        report.problems.append(
            f"source dev F1 {report.student_dev_f:.2f} is {drop:.2f} points below the teacher's "
            f"{report.teacher_dev_f:.2f} (allowed: {limits.max_dev_drop:g}): the student looks undertrained or drifted from its teacher"
        )
    if agreement < limits.min_agreement:
        report.problems.append(
            f"the student agrees with the teacher on only {agreement:.2f} F1 of the target text "
            f"(allowed: >= {limits.min_agreement:g}): it has not learned the pseudo-labels"
        )
    shift = report.target_label_shift
    if shift is not None and shift > limits.max_label_shift:
        report.problems.append(
            f"the labels of the student's entities on the target text are {shift:.3f} (total variation) "
            f"from the teacher's (allowed: <= {limits.max_label_shift:g}): it drifted from what the teacher knew"
        )
    if not math.isfinite(cosine):
        report.problems.append("the span vectors of the source dev set are not finite numbers: the student diverged")
    elif cosine > limits.max_class_cosine:
        report.problems.append(
            f"two classes' span vectors have merged (cosine {cosine:.4f} > {limits.max_class_cosine:g}): "
            "the class means collapsed"
        )
    return report


PACKAGE_CHOICES = ("auto", "student", "teacher")


def check_package_choice(policy: str) -> None:
    """Raise a ValueError for a package choice that is none of PACKAGE_CHOICES (before
    any pipeline is loaded)."""
    if policy not in PACKAGE_CHOICES:
        raise ValueError(f"unknown package choice {policy!r}: use auto, student or teacher")


@dataclass
class FallbackCheck:
    """The guard's fallback (training.fallback) and its own check against the teacher.

    weight (float): the student's weight in the interpolation.
    path (Path): the fallback pipeline's folder.
    rate (Dict[str, object]): what RATE counted and chose (DecisionRate.to_dict).
    report (GuardReport): the fallback checked against the teacher, as a student is.
    """

    weight: float
    path: Path
    rate: Dict[str, object]
    report: GuardReport

    def to_dict(self) -> Dict[str, object]:
        return {"weight": self.weight, "path": str(self.path), "rate": self.rate, **self.report.to_dict()}


def choose(report: GuardReport, policy: str = "auto", fallback: Optional[FallbackCheck] = None) -> str:
    """Which pipeline to ship: "student", "fallback" or "teacher".

    report (GuardReport): the student's check.
    policy (str): "auto" (the student if trusted, else the fallback if there is one and it
        is trusted, else the teacher), "student" or "teacher".
    fallback (Optional[FallbackCheck]): the fallback, built where the student is distrusted.
    """
    check_package_choice(policy)
    if policy != "auto":
        return policy
    if report.trusted:
        return "student"
    return "fallback" if fallback is not None and fallback.report.trusted else "teacher"


def write_verdict(
    path: Path, report: GuardReport, teacher: Path, student: Path, package_choice: str,
    fallback: Optional[FallbackCheck] = None,
) -> str:
    """Write the guard's verdict file (what `export --guard` reads): the report's figures,
    both pipelines, the fallback's check where one was built, the package choice and the
    pipeline it picks.

    path (Path): the JSON file, written atomically.
    report (GuardReport): the check.
    teacher (Path): the teacher's pipeline (directory or package name).
    student (Path): the student's.
    package_choice (str): "auto", "student" or "teacher" (choose).
    fallback (Optional[FallbackCheck]): the fallback and its check, or None.
    RETURNS (str): the chosen pipeline, "student", "fallback" or "teacher"; the file's
        chosen_path is where it is (`where`).
    """
    chosen = choose(report, package_choice, fallback)
    paths = {"student": student, "teacher": teacher, "fallback": fallback.path if fallback is not None else None}
    result = {**report.to_dict(), "teacher": str(teacher), "student": str(student),
              "fallback": fallback.to_dict() if fallback is not None else None,
              "package_choice": package_choice, "chosen": chosen, "chosen_path": where(paths[chosen])}
    atomic_write_text(Path(path), json.dumps(result, indent=2))
    return chosen
