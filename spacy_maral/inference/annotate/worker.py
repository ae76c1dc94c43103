"""annotate's worker task: a partition's records through the pipeline, into a table of
entity rows (id, start, end, text, label, score)."""
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow
from spacy.language import Language
from spacy.tokens import Doc

from spacy_maral.inference.annotate.inputs import BadLine, Record
from spacy_maral.inference.batching import pipe_length_sorted
from spacy_maral.pipeline.entity_scores import entity_scores
from spacy_maral.pipeline.entity_scores import scores_key as pipeline_scores_key
from spacy_maral.pipeline.subwords import lost_words
from spacy_maral.util import logger

Rows = List[Tuple[int, int, str, str, Optional[float]]]

OUTPUT_SCHEMA = pyarrow.schema(
    [
        ("id", pyarrow.string()), ("start", pyarrow.int64()), ("end", pyarrow.int64()),
        ("text", pyarrow.string()), ("label", pyarrow.string()), ("score", pyarrow.float64()),
    ]
)


def entity_rows(doc: Doc, scores_key: Optional[str]) -> Rows:
    """The entities of a processed Doc as (start, end, text, label, score) rows.

    doc (Doc): the Doc, after the pipeline.
    scores_key (Optional[str]): doc.spans key whose group has attrs["scores"] (one
        probability per span); an entity that is not in it gets score None.
    """
    return [
        (ent.start_char, ent.end_char, ent.text, ent.label_, score)
        for ent, score in zip(doc.ents, entity_scores(doc, scores_key))
    ]


def doc_result(doc: Doc, scores_key: Optional[str]) -> Tuple[Rows, List[str]]:
    """A processed Doc's entity rows and the words the encoder gave no subword (they can't
    be entities: spacy_maral.pipeline.subwords)."""
    return entity_rows(doc, scores_key), [doc[i].text for i in lost_words(doc)]


def truncation_line(record: Record, words: Sequence[str]) -> BadLine:
    """The errors-file entry of a document with words the encoder gave no subword.

    record (Record): the document's (id, text, file, line).
    words (Sequence[str]): those words.
    """
    shown = ", ".join(repr(w[:40]) for w in words[:5]) + (", ..." if len(words) > 5 else "")
    return BadLine(record[2], record[3], f"{len(words)} word(s) got no subword from the encoder and can't be entities "
                   f"(the text passes the encoder's length limit): {shown}", id=record[0], words=len(words))


def rows_table(ids: List[str], rows: List[Rows]) -> pyarrow.Table:
    """The output table: one row per entity, documents in order.

    ids (List[str]): the document ids.
    rows (List[List[...]]): each document's entity_rows.
    """
    columns: Dict[str, list] = {name: [] for name in OUTPUT_SCHEMA.names}
    for doc_id, doc_rows in zip(ids, rows):
        for start, end, text, label, score in doc_rows:
            columns["id"].append(doc_id)
            columns["start"].append(start)
            columns["end"].append(end)
            columns["text"].append(text)
            columns["label"].append(label)
            columns["score"].append(score)
    return pyarrow.Table.from_pydict(columns, schema=OUTPUT_SCHEMA)


@dataclass
class AnnotatedRecords:
    """What the pipeline made of a partition's records.

    table (pyarrow.Table): the entity rows (OUTPUT_SCHEMA), documents in order.
    documents (int): the documents annotated.
    entities (int): the entity rows.
    bad_lines (List[BadLine]): the documents the pipeline failed on.
    truncated (List[BadLine]): the documents with words the encoder gave no subword,
        each with its id and number of such words.
    """

    table: pyarrow.Table
    documents: int
    entities: int
    bad_lines: List[BadLine]
    truncated: List[BadLine]


def annotate_records(
    nlp: Language,
    records: Sequence[Record],
    batch_size: int = 64,
    scores_key: Optional[str] = None,
    sort_buffer: int = 0,
) -> AnnotatedRecords:
    """Run the pipeline over one partition's records: the worker's annotate task.

    The records are sorted by length and cut into batches (pipe_length_sorted); the rows
    come out in the records' order. If the pipeline raises on a batch, the partition's
    documents are run one at a time and those it fails on become bad lines.

    nlp (Language): the pipeline.
    records (Sequence[Record]): (id, text, file, line) of each document.
    batch_size (int): documents per nlp.pipe batch.
    scores_key (Optional[str]): doc.spans key with the scores (None: the pipeline's, spacy_maral.pipeline.entity_scores.scores_key).
    sort_buffer (int): documents sorted together (0 = the whole partition).
    RETURNS (AnnotatedRecords): the entity rows, the counts and the bad lines.
    """
    key = scores_key if scores_key is not None else pipeline_scores_key(nlp)
    texts = [r[1] for r in records]
    bad: List[BadLine] = []
    try:
        results = list(pipe_length_sorted(nlp, texts, batch_size=batch_size, buffer_size=sort_buffer,
                                          transform=lambda doc: doc_result(doc, key)))
    except Exception as batch_err:  # find the documents it fails on
        logger.warning("the pipeline failed on a batch (%s); running the partition's documents one by one", batch_err)
        results = []
        for _doc_id, text, file, line in records:
            try:
                results.append(doc_result(nlp(text), key))
            except Exception as err:
                bad.append(BadLine(file, line, f"the pipeline failed: {type(err).__name__}: {err}"))
                results.append(([], []))
        if len(bad) == len(records) and not _runs_on_plain_text(nlp):  # the pipeline is broken, not the input
            raise batch_err
    table = rows_table([r[0] for r in records], [rows for rows, _ in results])
    truncated = [truncation_line(record, lost) for record, (_, lost) in zip(records, results) if lost]
    return AnnotatedRecords(table, documents=len(records) - len(bad), entities=table.num_rows, bad_lines=bad, truncated=truncated)


def _runs_on_plain_text(nlp: Language) -> bool:
    """Whether the pipeline processes a short ordinary sentence: when every document of
    a partition failed, this tells a broken pipeline from bad documents (a partition of
    one bad document)."""
    try:
        nlp("This is a short test sentence.")
    except Exception:
        return False
    return True
