"""The whole of one annotate partition on a worker: read its lines from the input files,
keep it if the output folder already holds it (same input, same run), else annotate it
and write its Parquet file and its bad lines. Every engine runs this task, so the
driver only plans partitions and adds up the small summaries that come back.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from spacy.language import Language

from spacy_maral.inference.annotate.inputs import BadLine, parse_partition, partition_digest
from spacy_maral.inference.annotate.output import errors_path, finished_partition, write_partition
from spacy_maral.inference.annotate.plan import PartitionPlan, load_partition
from spacy_maral.inference.annotate.worker import OUTPUT_SCHEMA, AnnotatedRecords, annotate_records
from spacy_maral.pipeline.loading import encoder_runtime_of

FIRST_BAD_LINES = 20  # bad lines a partition's summary names (all are in its errors file)


@dataclass
class AnnotatedPartition:
    """The summary of one partition that a worker sends back to the driver.

    kept (bool): the output folder held it already (same input, same run).
    lines (int): its input lines.
    documents (int): the documents annotated.
    entities (int): the entity rows written.
    bad_lines (int): the bad lines (in its errors file).
    truncated (int): the documents with words the encoder gave no subword.
    words_without_subwords (int): those words.
    first_bad (List[str]): the first FIRST_BAD_LINES of its bad lines, as text.
    precision (Optional[str]): the precision its encoder ran ("fp32", "bf16", "int8"; None
        for a pipeline without spacy_maral's encoder runtime).
    """

    kept: bool
    lines: int
    documents: int
    entities: int
    bad_lines: int
    truncated: int
    words_without_subwords: int
    first_bad: List[str]
    precision: Optional[str] = None


def annotate_partition(
    nlp: Language,
    plan: PartitionPlan,
    *,
    output_dir: str,
    run_digest: str,
    text_field: str = "text",
    id_field: str = "id",
    batch_size: int = 64,
    scores_key: Optional[str] = None,
    sort_buffer: int = 0,
) -> AnnotatedPartition:
    """Process one planned partition (a worker's task: PipelineWorker.run).

    nlp (Language): the pipeline.
    plan (PartitionPlan): the partition's segments of the input files.
    output_dir (str): the output folder (every worker writes there: on a cluster, a
        folder all nodes see).
    run_digest (str): the digest of the run's manifest (stored in the partition's
        metadata; a partition of another run is written again).
    text_field, id_field (str): the JSONL keys / Parquet columns.
    batch_size (int): documents per nlp.pipe batch.
    scores_key (Optional[str]): doc.spans key with the scores.
    sort_buffer (int): documents sorted by length together (0: the partition).
    RETURNS (AnnotatedPartition): its summary.
    """
    out = Path(output_dir)
    part = load_partition(plan, text_field, id_field)
    # "auto" runs bf16 on one CPU and fp32 on another: a run resumed on another machine
    # writes again the partitions the other precision made (on a Ray cluster of mixed
    # nodes, each partition has the precision of the node that last made it)
    running = (encoder_runtime_of(nlp) or {}).get("running")
    identity = {"manifest_sha256": run_digest, "input_sha256": partition_digest(part)}
    meta = finished_partition(out, part.index, part.n_lines, identity)
    if meta is not None and meta.get("precision", running) != running:  # none recorded: an older version's, kept
        meta = None
    if meta is not None:
        bad: List[BadLine] = []
        if meta.get("bad_lines") or meta.get("truncated"):
            lines = errors_path(out, part.index).read_text(encoding="utf8").splitlines()
            bad = [BadLine(**json.loads(line)) for line in lines]
        return _summary(meta, bad, kept=True)
    records, bad_input = parse_partition(part, text_field, id_field)
    if records:
        result = annotate_records(nlp, records, batch_size=batch_size, scores_key=scores_key, sort_buffer=sort_buffer)
    else:
        result = AnnotatedRecords(OUTPUT_SCHEMA.empty_table(), documents=0, entities=0, bad_lines=[], truncated=[])
    order = {s.file.name: i for i, s in enumerate(plan.segments)}
    bad = sorted(bad_input + result.bad_lines + result.truncated, key=lambda b: (order.get(b.file, 0), b.line))
    meta = {"partition": part.index, "lines": part.n_lines, "documents": result.documents,
            "entities": result.entities, "bad_lines": sum(not b.truncated for b in bad),
            "truncated": sum(b.truncated for b in bad), **identity, "precision": running}
    write_partition(out, part.index, result.table, meta, bad)
    return _summary(meta, bad, kept=False)


def _summary(meta: Dict[str, object], bad: List[BadLine], *, kept: bool) -> AnnotatedPartition:
    """A partition's summary from the metadata it has on disk (an older partition's may
    lack "bad_lines" or "truncated": 0) and its bad lines."""
    counts = {key: int(meta.get(key) or 0) for key in ("lines", "documents", "entities", "bad_lines", "truncated")}
    return AnnotatedPartition(kept=kept, **counts, words_without_subwords=sum(b.words for b in bad),
                              first_bad=[str(b) for b in bad[:FIRST_BAD_LINES]], precision=meta.get("precision"))
