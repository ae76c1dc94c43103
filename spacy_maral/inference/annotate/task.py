"""The whole of one annotate partition on a worker: read its lines from the input files,
keep it if the output folder already holds it (same input, same run), else annotate it
and write its Parquet file and its bad lines. Every engine runs this task, so the
driver only plans partitions and adds up the small summaries that come back.
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from spacy.language import Language

from spacy_maral.inference.annotate.inputs import BadLine, parse_partition, partition_digest
from spacy_maral.inference.annotate.output import errors_path, finished_partition, write_partition
from spacy_maral.inference.annotate.plan import PartitionPlan, load_partition
from spacy_maral.inference.annotate.worker import OUTPUT_SCHEMA, annotate_records

FIRST_BAD_LINES = 20  # bad lines a partition's summary names (all are in its errors file)


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
) -> Dict[str, Any]:
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
    RETURNS (Dict[str, Any]): "meta" (the partition's metadata: lines, documents,
        entities, bad_lines, truncated...), "kept" (it was on disk already),
        "words_without_subwords" and "first_bad" (the first bad lines, as text).
    """
    out = Path(output_dir)
    part = load_partition(plan, text_field, id_field)
    identity = {"manifest_sha256": run_digest, "input_sha256": partition_digest(part)}
    meta = finished_partition(out, part.index, part.n_lines, identity)
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
        result = {"table": OUTPUT_SCHEMA.empty_table(), "documents": 0, "entities": 0, "bad_lines": [], "truncated": []}
    order = {s.file.name: i for i, s in enumerate(plan.segments)}
    bad = sorted(bad_input + result["bad_lines"] + result["truncated"], key=lambda b: (order.get(b.file, 0), b.line))
    meta = {"partition": part.index, "lines": part.n_lines, "documents": result["documents"],
            "entities": result["entities"], "bad_lines": sum(not b.truncated for b in bad),
            "truncated": sum(b.truncated for b in bad), **identity}
    write_partition(out, part.index, result["table"], meta, bad)
    return _summary(meta, bad, kept=False)


def _summary(meta: Dict[str, Any], bad: List[BadLine], *, kept: bool) -> Dict[str, Any]:
    return {"meta": meta, "kept": kept, "words_without_subwords": sum(b.words for b in bad),
            "first_bad": [str(b) for b in bad[:FIRST_BAD_LINES]]}
