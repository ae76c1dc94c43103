"""The summary of a set of per-seed training runs, OUTPUT_DIR/teachers.json or
OUTPUT_DIR/students.json: the roles a run can have and the model each one uses, the
summary's file name, and reading it.

`spacy_maral.workflow.per_seed.train_per_seed` writes it, `select-checkpoint`
(spacy_maral.training.selection.select_runs) writes it again with each student's picked
checkpoint, and `average --runs`, `pseudo-label --ensemble-from` and `languages` read the
models it lists. Its shape: {"config": ..., "overrides": [...], "threads": N,
"teachers" (or "students"): {SEED: {"model": PATH, "wall_s": ..., ...}}}.
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

# the roles, and the model of each run that is used: a teacher is selected on the source
# dev set (model-best); a student is taken at its last step (benchmarks/PROTOCOL.md, rule 2)
ROLES: Dict[str, str] = {"teacher": "model-best", "student": "model-last"}


def check_role(role: str) -> str:
    """`role` if it is one of ROLES, else ValueError."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: give one of {', '.join(ROLES)}")
    return role


def runs_key(role: str) -> str:
    """The summary's key of its runs: "teachers" or "students"."""
    return f"{check_role(role)}s"


def summary_name(role: str) -> str:
    """The file name of the summary of `role`'s runs: teachers.json, students.json."""
    return f"{runs_key(role)}.json"


def read_summary(summary_path: Path, role: Optional[str] = None) -> Tuple[Dict[str, Any], str, Dict[str, Dict[str, Any]]]:
    """Read a summary of per-seed runs.

    summary_path (Path): OUTPUT_DIR/teachers.json or OUTPUT_DIR/students.json.
    role (Optional[str]): the role its runs must have ("teacher" or "student"); None: either.
    RETURNS (Tuple[Dict[str, Any], str, Dict[str, Dict[str, Any]]]): the whole summary,
        its role, and its runs by seed (each a dict with at least "model").
    RAISES (ValueError): naming the file, when it cannot be read or is not such a summary.
    """
    summary_path = Path(summary_path)
    roles = list(ROLES) if role is None else [check_role(role)]
    expected = " or ".join(f"train-{runs_key(r)}" for r in roles)
    try:
        summary = json.loads(summary_path.read_text(encoding="utf8"))
        found = [r for r in roles if runs_key(r) in summary]
        if len(found) != 1:
            raise ValueError(f"it lists no {' or '.join(runs_key(r) for r in roles)}")
        runs = summary[runs_key(found[0])]
        for seed, entry in runs.items():
            if not isinstance(entry.get("model"), str):
                raise ValueError(f"its run of seed {seed} names no model")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{summary_path} is not the summary of {expected} ({err})") from err
    return summary, found[0], runs


def summary_models(summary_path: Path) -> List[str]:
    """The models listed in a summary of per-seed runs (teachers.json or students.json).

    summary_path (Path): OUTPUT_DIR/teachers.json or OUTPUT_DIR/students.json.
    RETURNS (List[str]): the models (model-best of teachers, model-last of students, or
        the picks of select-checkpoint), in the summary's order; empty for an ensemble or
        a soup that is off.
    RAISES (ValueError): as read_summary.
    """
    return [entry["model"] for entry in read_summary(summary_path)[2].values()]


def check_summary_models(summary_path: Path) -> List[str]:
    """summary_models, each of them checked to be there from the current folder, where a
    summary's relative paths are read.

    summary_path (Path): OUTPUT_DIR/teachers.json, students.json or selected.json.
    RAISES (ValueError): as read_summary, or a listed model that is not there (with, for
        a relative path, the folder it is read from: the one its run was made in).
    """
    models = summary_models(summary_path)
    for model in models:
        if not Path(model).exists():
            where = "" if Path(model).is_absolute() else (
                f" from the current folder ({Path.cwd()}): a summary's relative paths are read from the folder its "
                "run was made in (the project folder for the workflow's runs); run from there")
            raise ValueError(f"{summary_path} lists {model}, which is not there{where}")
    return models
