"""`python -m spacy_maral annotate`: run a spaCy pipeline over a corpus into Parquet."""
from pathlib import Path
from typing import Literal, Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option


@app.command("annotate")
def annotate_command(
    model: str = typer.Argument(..., help="Any spaCy pipeline: a directory or an installed package name (e.g. xx_maral_ner)."),
    input_path: str = typer.Argument(..., help="Text (one document a line), JSONL ({\"text\": ..., \"id\": ...} a line) or Parquet file, or a directory of them; a local path or a URI pyarrow reads (s3://bucket/corpus/, gs://..., hdfs://...)."),
    output_dir: Path = typer.Argument(..., help="Output directory: part-NNNNNN.parquet, one row per entity (id, start, end, text, label, score)."),
    engine: Literal["local", "ray"] = typer.Option("local", "--engine", help="local: nlp.pipe on this machine (--n-process workers); ray: Ray actors on a local instance or a cluster."),
    input_format: Literal["auto", "text", "jsonl", "parquet"] = typer.Option("auto", "--format", help="auto: by suffix (.jsonl, .ndjson or .json: jsonl; .parquet or .pq: parquet; else text); or text, jsonl or parquet for every file."),
    text_field: str = typer.Option("text", "--text-field", help="JSONL key / Parquet column of the text."),
    id_field: str = typer.Option("id", "--id-field", help="JSONL key / Parquet column of the id. The default, id, may be missing (then the id is FILE:LINE); any other must be in every record."),
    partition_size: int = typer.Option(10000, "--partition-size", min=1, help="Input lines per output partition, the unit of resumption and of work."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", min=1, help="Documents per nlp.pipe batch (length-sorted within a partition)."),
    scores_key: Optional[str] = typer.Option(None, "--scores-key", help="doc.spans key whose attrs['scores'] give the entity scores: one a component of MODEL writes (default: maral_ner's spans_key; null scores without one)."),
    max_bad_lines: int = typer.Option(0, "--max-bad-lines", min=0, help="Exit with status 3 at the end if more input lines than this were bad, or had words the encoder gave no subword (all of them are listed in OUTPUT_DIR/_errors.jsonl either way)."),
    n_process: int = typer.Option(1, "--n-process", "-n", min=1, help="local: worker processes, each loading the pipeline once."),
    threads: int = typer.Option(0, "--threads", min=0, help="torch threads per worker (0: torch's default for one process, cpu_count/N for N processes, --cpus-per-actor for Ray)."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="local: GPU to use (-1 = CPU)."),
    address: Optional[str] = typer.Option(None, "--address", help="ray: the cluster to join ('auto': the one `ray start` runs here); default: start a local Ray instance for this run."),
    num_actors: int = typer.Option(0, "--num-actors", min=0, help="ray: actors, each loading the pipeline once (0 = as many as the free CPUs/GPUs allow)."),
    cpus_per_actor: int = typer.Option(1, "--cpus-per-actor", min=1, help="ray: CPUs each actor reserves (its torch threads)."),
    num_gpus_per_actor: float = typer.Option(0.0, "--num-gpus-per-actor", min=0.0, help="ray: GPUs each actor reserves (0 = CPU actors)."),
    ray_timeout: float = typer.Option(60.0, "--ray-timeout", min=0.1, help="ray: seconds to reach the cluster at --address before failing."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    precision: Precision = precision_option(),
) -> None:
    """Annotate a corpus with MODEL (any spaCy pipeline) and write its entities to
    Parquet, partition by partition. A rerun with the same arguments skips the finished
    partitions. Bad input lines are skipped, reported with file and line, listed in
    OUTPUT_DIR/_errors.jsonl, and make the exit status 3 when there are more than
    --max-bad-lines of them; status 1 is a failure (e.g. the model does not load).
    """
    from spacy_maral.inference.annotate.inputs import check_output_outside, input_files
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.util import Printer

    msg = Printer()
    try:  # before spaCy and torch are imported: a missing or empty input, a pipeline that isn't there
        files = input_files(input_path, input_format)
        check_output_outside(input_path, output_dir)
        if engine == "local":  # Ray loads it on the cluster's nodes, where a path of their own may be
            check_pipeline_found(model)
    except ImportError as err:  # a URI whose filesystem pyarrow can't load
        msg.fail(f"annotate: {err}", exits=1)
    except (OSError, ValueError) as err:
        msg.fail(f"annotate failed: {err}", exits=1)

    from spacy_maral.inference.annotate import ERRORS, EXIT_BAD_LINES, ScoresKeyError, annotate, check_model_scores_key
    from spacy_maral.inference.annotate.driver import checked_input
    from spacy_maral.inference.engines import make_engine

    try:
        # local files are read here, before the model loads: repeated ids, no document
        indexes = checked_input(files, text_field, id_field) if engine == "local" else None
        if all(f.format == "text" for f in files):  # a field named for text files would match nothing
            for hint, value, default in (("--text-field", text_field, "text"), ("--id-field", id_field, "id")):
                if value != default:
                    raise typer.BadParameter(f"{value!r}: {input_path} holds text files only (a document a line, no fields)", param_hint=hint)
        check_model_scores_key(model, scores_key)
        workers = make_engine(
            engine, model, n_process=n_process, threads=threads, gpu_id=gpu_id, address=address,
            num_actors=num_actors, cpus_per_actor=cpus_per_actor, gpus_per_actor=num_gpus_per_actor,
            precision=precision, connect_timeout=ray_timeout,
        )
        with workers:
            stats = annotate(
                workers, input_path, output_dir, fmt=input_format, text_field=text_field, id_field=id_field,
                partition_size=partition_size, batch_size=batch_size, scores_key=scores_key, progress=progress,
                indexes=indexes,
            )
    except ScoresKeyError as err:
        raise typer.BadParameter(str(err), param_hint="--scores-key") from err
    except ImportError as err:
        msg.fail(f"annotate: {err}", exits=1)
    except (OSError, ValueError, RuntimeError) as err:
        msg.fail(f"annotate failed: {err}", exits=1)
    rate = f", {stats.documents / stats.seconds:.1f} documents/s" if stats.seconds else ""
    msg.text(
        f"{stats.documents} documents, {stats.entities} entities from {stats.lines} lines "
        f"({stats.partitions_written} partitions written, {stats.partitions_kept} kept from an earlier run; "
        f"engine {stats.engine}, {stats.n_workers} worker(s){rate})"
    )
    msg.text(f"output: {output_dir}")
    if stats.bad_lines:
        msg.warn(f"{stats.bad_lines} bad input line(s) skipped, all listed in {Path(output_dir) / ERRORS}:")
        for line in stats.first_bad_lines[:10]:
            msg.text(f"  {line}", err=True)
    if stats.truncated_documents:
        msg.warn(f"{stats.truncated_documents} document(s) with {stats.words_without_subwords} word(s) the encoder gave no "
                 f"subword (they can't be entities), all listed in {Path(output_dir) / ERRORS}")
    if stats.bad_lines + stats.truncated_documents > max_bad_lines:
        msg.fail(f"more than --max-bad-lines {max_bad_lines}: exit status {EXIT_BAD_LINES}", exits=EXIT_BAD_LINES)
