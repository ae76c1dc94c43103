"""`annotate`: any spaCy pipeline over a corpus of text, JSONL or Parquet files, into
Parquet entity rows, partition by partition, resumable, with bad lines reported.

- `inputs`: the input files, their partitions and the parsing of each line;
- `plan`: the partitions planned from the files' line counts (what a worker reads);
- `worker`: the pipeline over a partition's records (records -> entity rows);
- `task`: the whole of one partition on a worker (read, keep or annotate, write);
- `output`: the partition files, their bad lines and the merged errors file;
- `driver`: `annotate()`, which plans the partitions and runs them on an engine.
"""
from spacy_maral.inference.annotate.driver import EXIT_BAD_LINES, AnnotateStats, annotate, check_model_scores_key
from spacy_maral.inference.annotate.inputs import BadLine, input_files, parse_partition
from spacy_maral.inference.annotate.output import ERRORS, SUMMARY
from spacy_maral.inference.annotate.worker import OUTPUT_SCHEMA, annotate_records, entity_rows
from spacy_maral.pipeline.entity_scores import ScoresKeyError

__all__ = [
    "ERRORS", "EXIT_BAD_LINES", "OUTPUT_SCHEMA", "SUMMARY", "AnnotateStats", "BadLine", "ScoresKeyError", "annotate",
    "annotate_records", "check_model_scores_key", "entity_rows", "input_files", "parse_partition",
]
