"""The guard's fallback: what ships where the student is not trusted, before the teacher.

Where the guard distrusts a student, the workflow used to ship the teacher. The fallback
is the interpolation of the two, `(1 - weight) * teacher + weight * student` (WiSE-FT,
Wortsman et al. 2022: `training.averaging.average_pipelines`), deciding at its RATE value
(`training.decision_rule`): it keeps some of what the student learned of the target
language, decided at the entity rate of the teachers' pseudo-labels. The guard then checks
it against the teacher as it checks a student, and the teacher ships only when the
fallback is distrusted too. BENCHMARKS.md ("Finnish") has what it measured.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Tuple

if TYPE_CHECKING:  # annotations only: check_fallback_weight is imported without spaCy (the guard's option check)
    from spacy.language import Language

    from spacy_maral.training.decision_rule import DecisionRate


def check_fallback_weight(weight: float) -> None:
    """Refuse a weight outside [0, 1) (0: no fallback; 1 would be the student itself)."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"the fallback's weight of the student must be >= 0 and < 1, not {weight!r}")


def build_fallback(
    teacher: Path,
    student: Path,
    weight: float,
    pseudo_labels: Path,
    output: Path,
    batch_size: int = 64,
    progress: Optional[Callable[[str], None]] = None,
) -> Tuple[Path, DecisionRate]:
    """Write the fallback pipeline to `output`: the teacher's and the student's weights
    interpolated, with the student's configuration (its tokenizer, its score map: for a
    student of the development language, Platt's map fitted on the student, not refitted)
    and inference_tau set by RATE on the pseudo-labelled target sentences.

    teacher (Path): the teacher's pipeline directory.
    student (Path): the student's (the same architecture and labels).
    weight (float): the student's weight, in (0, 1); the teacher's is 1 - weight.
    pseudo_labels (Path): the pseudo-labelled target corpus (the shards of
        `pseudo-label`) RATE counts entities on.
    output (Path): a new or empty folder, or one this function wrote (a user's files in
        it are kept: fileio.replace_owned_dir).
    batch_size (int): sentences per batch for RATE.
    progress (Optional[Callable[[str], None]]): called with a line before each stage.
    RETURNS (Tuple[Path, DecisionRate]): the folder written, and what RATE counted and chose.
    """
    from thinc.api import Config
    from tqdm import tqdm

    from spacy_maral.corpora.docbin import read_docs
    from spacy_maral.fileio import check_replaceable, replace_owned_dir
    from spacy_maral.pipeline.maral_ner import find_maral_ner
    from spacy_maral.training.averaging import average_pipelines
    from spacy_maral.training.decision_rule import rate_inference_tau

    check_fallback_weight(weight)
    if weight == 0.0:
        raise ValueError("a fallback needs a weight of the student above 0")
    check_replaceable(output, "guard --fallback-dir")
    say = progress or (lambda line: None)
    say(f"the fallback: {1 - weight:g} * teacher + {weight:g} * student")
    nlp: Language = average_pipelines([teacher, student], weights=[1.0 - weight, weight])
    docs = list(read_docs(pseudo_labels, nlp))
    say(f"RATE: its entities at each inference_tau on {len(docs)} pseudo-labelled sentences of {pseudo_labels}")
    with tqdm(total=len(docs), desc="RATE", unit="sent", disable=None) as bar:  # a bar on a terminal only
        rate = rate_inference_tau(nlp, docs, batch_size=batch_size, progress=bar.update)
    ner = find_maral_ner(nlp)
    ner.inference_tau = rate.chosen
    with replace_owned_dir(output, "guard --fallback-dir") as tmp:
        nlp.to_disk(tmp)
        # inference_tau is a setting of the component's config: stored there, as spacy.load reads it
        config = Config().from_disk(tmp / "config.cfg", interpolate=False)
        config["components"][ner.name]["inference_tau"] = rate.chosen
        config.to_disk(tmp / "config.cfg")
    return output, rate
