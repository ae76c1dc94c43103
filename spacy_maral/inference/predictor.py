"""`EntityPredictor`: a spaCy pipeline as a callable class for Ray Data's
`Dataset.map_batches` (or any engine that hands batches of columns to a callable).

    import ray
    from spacy_maral.inference.predictor import EntityPredictor

    ds = ray.data.read_parquet("s3://bucket/corpus/")          # columns "id" and "text"
    ds = ds.map_batches(EntityPredictor, fn_constructor_kwargs={"model": "xx_maral_ner"},
                        concurrency=4, batch_size=256, num_cpus=1)
    ds.write_parquet("s3://bucket/entities/")

Each actor loads the pipeline once (a directory on storage every node reads, or an
installed package name), with the encoder precision of `spacy_maral.EncoderRuntime.v1`.
A batch's documents are run length-sorted (spacy_maral.inference.batching); the output
is one row per entity, in the batch's document order: id, start and end (character
offsets in the text), text, label, score (the entity's probability, null when the
pipeline stores none) and error (null). A document that can't be annotated (a null or
non-string text, or one the pipeline fails on) gives one row with its id and the reason
in `error` (the entity columns null), and the other documents of the batch go on; a
document with words the encoder gave no subword (its text passes the encoder's length
limit) keeps its entities and gets one more such row saying how many words.
"""
from typing import Any, Dict, List, Optional, Sequence, Set

import pyarrow

from spacy_maral.inference.annotate.inputs import Record
from spacy_maral.inference.annotate.worker import OUTPUT_SCHEMA, annotate_records
from spacy_maral.inference.engines.base import PipelineWorker, WorkerSpec
from spacy_maral.pipeline.entity_scores import check_scores_key

PREDICTION_SCHEMA = OUTPUT_SCHEMA.append(pyarrow.field("error", pyarrow.string()))


class EntityPredictor:
    """A spaCy pipeline that turns a batch of documents into a table of entity rows.

    model (str): a pipeline directory or an installed package name (spacy.load); on a
        cluster it must load on every node.
    text_column (str): the batch's column of document texts.
    id_column (str): the batch's column of document ids (any values; written as strings).
    precision (str): the encoder's precision: "auto" (bfloat16 where the CPU has it),
        "fp32", "bf16" or "int8".
    batch_size (int): documents per nlp.pipe batch inside a Ray batch.
    scores_key (Optional[str]): doc.spans key with the entity scores (None: the spans_key
        of the pipeline's maral_ner, if any); one no component writes is refused
        (ScoresKeyError).
    threads (int): torch CPU threads (0: as many as the actor's num_cpus, else torch's
        default).
    gpu_id (int): the GPU to run on (-1: CPU; with num_gpus=1 Ray shows the actor its GPU
        as device 0).
    """

    def __init__(
        self,
        model: str,
        *,
        text_column: str = "text",
        id_column: str = "id",
        precision: str = "auto",
        batch_size: int = 64,
        scores_key: Optional[str] = None,
        threads: int = 0,
        gpu_id: int = -1,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer of at least 1, not {batch_size!r}")
        self.text_column = text_column
        self.id_column = id_column
        self.batch_size = batch_size
        self.scores_key = scores_key
        self.worker = PipelineWorker(WorkerSpec(str(model), threads=threads or _ray_cpus(), gpu_id=gpu_id,
                                                precision=precision))
        check_scores_key(self.worker.nlp.config, scores_key, model)  # a key no component writes: every score null

    def __call__(self, batch: Any) -> pyarrow.Table:
        """The entity rows of one batch.

        batch (Any): a dict of columns (numpy arrays or lists: Ray Data's "numpy" and
            "default" batch formats), a pandas DataFrame or a pyarrow Table, with the
            text and id columns.
        RETURNS (pyarrow.Table): PREDICTION_SCHEMA rows (id, start, end, text, label,
            score, error).
        """
        ids, texts = self._columns(batch)
        records: List[Record] = []
        failed: Dict[int, str] = {}
        for row, (doc_id, text) in enumerate(zip(ids, texts)):
            if isinstance(text, str):
                records.append((doc_id, text, doc_id, row))
            else:
                failed[row] = f"{self.text_column!r} is {'null' if text is None else type(text).__name__}, not a string"
        result = self.worker.run(annotate_records, records, batch_size=self.batch_size, scores_key=self.scores_key).result
        notes: Dict[int, List[str]] = {row: [reason] for row, reason in failed.items()}
        for bad in result.bad_lines + result.truncated:
            notes.setdefault(bad.line, []).append(bad.reason)
        empty = set(failed) | {bad.line for bad in result.bad_lines}  # rows that gave no entity rows
        return _with_errors(result.table, ids, notes, empty)

    def _columns(self, batch: Any) -> "tuple[list, list]":
        if isinstance(batch, pyarrow.Table):
            names, get = batch.column_names, lambda name: batch.column(name).to_pylist()
        elif hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # a pandas DataFrame
            names, get = list(batch.columns), lambda name: batch[name].tolist()
        elif isinstance(batch, dict):
            names, get = list(batch), lambda name: list(batch[name])
        else:
            raise TypeError(f"EntityPredictor takes a dict of columns, a pandas DataFrame or a pyarrow Table, not {type(batch).__name__}")
        missing = [c for c in (self.text_column, self.id_column) if c not in names]
        if missing:
            raise ValueError(
                f"the batch has no column {missing[0]!r} (columns: {names}); choose the columns with "
                f"fn_constructor_kwargs={{'text_column': ..., 'id_column': ...}}"
            )
        texts = [_plain(t) for t in get(self.text_column)]
        ids = ["" if i is None else str(_plain(i)) for i in get(self.id_column)]
        return ids, texts


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value (numpy.str_ is a str already)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, str) else value


def _ray_cpus() -> int:
    """The CPUs Ray gave this actor (its num_cpus), or 0 outside Ray."""
    try:
        import ray

        if ray.is_initialized():
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 0)
            return max(int(cpus), 1) if cpus else 0
    except Exception:  # no Ray, or not inside an actor
        return 0
    return 0


def _with_errors(table: pyarrow.Table, ids: Sequence[str], notes: Dict[int, List[str]],
                 empty: Optional[Set[int]] = None) -> pyarrow.Table:
    """The entity table with an error column, and one error row per note after the
    entity rows of its document (the entity rows come in document order).

    table (pyarrow.Table): the entity rows, in the batch's order.
    ids (Sequence[str]): each row's document id.
    notes (Dict[int, List[str]]): the errors of each row.
    empty (Optional[Set[int]]): the rows that gave no entity row (failed), whose id must
        not take the entity rows of a neighbour with the same id.
    """
    table = table.append_column("error", pyarrow.nulls(table.num_rows, pyarrow.string())).cast(PREDICTION_SCHEMA)
    if not notes:
        return table
    entity_ids = table.column("id").to_pylist()
    pieces, k, empty = [], 0, empty or set()
    for row, doc_id in enumerate(ids):
        first = k
        while row not in empty and k < len(entity_ids) and entity_ids[k] == doc_id:
            k += 1
        if k > first:
            pieces.append(table.slice(first, k - first))
        for reason in notes.get(row, []):
            pieces.append(pyarrow.table({"id": [doc_id], "start": [None], "end": [None], "text": [None], "label": [None],
                                         "score": [None], "error": [reason]}, schema=PREDICTION_SCHEMA))
    return pyarrow.concat_tables(pieces) if pieces else table
