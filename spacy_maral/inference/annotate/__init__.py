"""`annotate`: any spaCy pipeline over a corpus of text, JSONL or Parquet files, into
Parquet entity rows, partition by partition, resumable, with bad lines reported.

- `inputs`: the input files, their partitions and the parsing of each line;
- `plan`: the partitions planned from the files' line counts (what a worker reads);
- `worker`: the pipeline over a partition's records (records -> entity rows);
- `task`: the whole of one partition on a worker (read, keep or annotate, write);
- `output`: the partition files, their bad lines and the merged errors file;
- `driver`: `annotate()`, which plans the partitions and runs them on an engine.

The names below are imported from their modules on first use, so that `inputs` (the
checks of the input and output paths) can be imported without spaCy or torch.
"""
from importlib import import_module
from typing import Any

# name -> the module that defines it
_EXPORTS = {
    "EXIT_BAD_LINES": "driver", "AnnotateStats": "driver", "annotate": "driver", "check_model_scores_key": "driver",
    "BadLine": "inputs", "input_files": "inputs", "parse_partition": "inputs",
    "ERRORS": "output", "SUMMARY": "output",
    "OUTPUT_SCHEMA": "worker", "annotate_records": "worker", "entity_rows": "worker",
}

__all__ = sorted([*_EXPORTS, "ScoresKeyError"])


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module on first use."""
    if name == "ScoresKeyError":
        from spacy_maral.pipeline.entity_scores import ScoresKeyError

        return ScoresKeyError
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
