"""`python -m spacy_maral pseudo-label`: soft labels for a target corpus from a teacher."""
from contextlib import nullcontext
from pathlib import Path
from typing import List, Literal, Optional

import typer

from spacy_maral.cli._app import Precision, app, precision_option


@app.command("pseudo-label")
def pseudo_label_command(
    teacher: str = typer.Argument(..., help="Trained teacher pipeline (directory or installed package name)."),
    input_path: Path = typer.Argument(..., help="Target corpus: .spacy file or directory, a CoNLL-style file (.conll, .iob, .tsv...), or text with one sentence a line."),
    output_dir: Path = typer.Argument(..., help="Directory for the pseudo-labelled shards."),
    batch_size: int = typer.Option(32, "--batch-size", "-b", min=1, help="Sentences per teacher batch."),
    shard_size: int = typer.Option(1000, "--shard-size", min=1, help="Sentences per output shard (a killed run keeps finished shards)."),
    limit: int = typer.Option(0, "--limit", min=0, help="Label only the first N sentences (0 = all)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="When OUTPUT_DIR holds the shards of another run (other input, teacher or settings), delete them instead of stopping. A rerun of the same run always keeps its finished shards."),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="GPU to use (-1 = CPU)."),
    precision: Precision = precision_option(),
    lang: Optional[str] = typer.Option(None, "--lang", help="Tokenize the target text with this language's rules (spacy_maral.tokenizer.v1), e.g. de; default: the teacher's tokenizer."),
    gold_tokens: bool = typer.Option(False, "--gold-tokens", help="Keep the tokens of a .spacy or CoNLL corpus instead of tokenizing its raw text."),
    inference_tau: Optional[float] = typer.Option(None, "--inference-tau", help="Override the teacher's inference_tau (source prior weight in the decision rule); choose it on the source dev set."),
    ensemble: List[str] = typer.Option([], "--ensemble", help="Another teacher, a directory or installed package name (repeat for more): the soft labels come from the mean of all teachers' span probabilities, decoded once. Every teacher needs the same labels and max_width; the first one's tokenizer reads the corpus."),
    ensemble_from: Optional[Path] = typer.Option(None, "--ensemble-from", help="The teachers.json of `train-teachers`: its teachers join the ensemble (none listed: the teacher alone)."),
    engine: Literal["local", "ray"] = typer.Option("local", "--engine", help="local: label in this process; ray: on Ray actors (the [ray] extra: pip install '.[ray]'), shard by shard, bit-identical output."),
    address: Optional[str] = typer.Option(None, "--address", help="ray: the cluster to join ('auto': the one `ray start` runs here); default: start a local Ray instance for this run."),
    num_actors: int = typer.Option(0, "--num-actors", min=0, help="ray: actors, each loading the teacher once (0 = as many as the free CPUs/GPUs allow)."),
    cpus_per_actor: int = typer.Option(1, "--cpus-per-actor", min=1, help="ray: CPUs each actor reserves (its torch threads)."),
    num_gpus_per_actor: float = typer.Option(0.0, "--num-gpus-per-actor", min=0.0, help="ray: GPUs each actor reserves (0 = CPU actors)."),
    ray_timeout: float = typer.Option(60.0, "--ray-timeout", min=0.1, help="ray: seconds to reach the cluster at --address before failing."),
) -> None:
    """Label every target sentence with the teacher: kept entity spans get their
    probability vectors, every other span is O. Target tags, if the corpus has any, are
    kept aside for diagnostics only. With --engine ray the shards are labelled by Ray
    actors (the teacher must load on every node: same path or installed package); the
    driver reads the corpus and writes the shards. With --ensemble, several teachers
    label the corpus together (the mean of their span probabilities).
    """

    from spacy_maral.ml.decoding import check_inference_tau

    if inference_tau is not None:  # refused at once, before torch or spaCy is imported
        try:
            check_inference_tau(inference_tau)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--inference-tau") from err

    from spacy_maral.corpora.target_path import check_target_path
    from spacy_maral.pipeline.location import check_pipeline_found
    from spacy_maral.util import Printer

    msg = Printer()
    try:  # a missing input or teacher, refused at once too
        check_target_path(input_path)
        for pipeline in (teacher, *ensemble):
            check_pipeline_found(pipeline)
    except ValueError as err:
        msg.fail(f"pseudo-label failed: {err}", exits=1)

    from thinc.api import require_gpu

    from spacy_maral.corpora.text_check import check_target_text
    from spacy_maral.inference.engines import make_engine
    from spacy_maral.inference.pseudo_label import pseudo_label
    from spacy_maral.inference.pseudo_label.driver import check_output_apart
    from spacy_maral.pipeline.loading import load_pipeline
    from spacy_maral.pipeline.maral_ner import find_maral_ner
    from spacy_maral.pipeline.tokenizer import set_tokenizer_lang

    try:  # before the GPU starts, any teacher is loaded or OUTPUT_DIR is touched
        check_output_apart(input_path, output_dir)
        for warning in check_target_text(input_path, lang or "xx").warnings:
            msg.warn(f"pseudo-label: {warning}")
    except ValueError as err:
        msg.fail(f"pseudo-label failed: {err}", exits=1)
    if gpu_id >= 0 and engine == "local":
        require_gpu(gpu_id)
    try:
        if ensemble_from is not None:
            from spacy_maral.training.run_summary import check_summary_models

            ensemble = [*ensemble, *(str(m) for m in check_summary_models(ensemble_from))]
        nlp = load_pipeline(teacher, precision=precision)
        if lang:
            set_tokenizer_lang(nlp, lang)
        members = [load_pipeline(path, precision=precision) for path in ensemble]
        if inference_tau is not None:
            for pipeline in [nlp, *members]:
                find_maral_ner(pipeline).inference_tau = inference_tau
        # the local engine is this process, with the teachers loaded here (pseudo_label's own)
        workers = nullcontext() if engine == "local" else make_engine(
            "ray", teacher, inference_tau=inference_tau, precision=precision, address=address, num_actors=num_actors,
            cpus_per_actor=cpus_per_actor, gpus_per_actor=num_gpus_per_actor, connect_timeout=ray_timeout,
            ensemble=ensemble,
        )
        with workers as running:
            n_workers = running.n_workers if running is not None else 1
            stats = pseudo_label(
                nlp, input_path, output_dir, batch_size=batch_size, shard_size=shard_size, limit=limit,
                gold_tokens=gold_tokens, engine=running, overwrite=overwrite, ensemble=members,
            )
    except ImportError as err:
        msg.fail(f"pseudo-label: {err}", exits=1)
    except (OSError, ValueError, RuntimeError) as err:
        msg.fail(f"pseudo-label failed: {err}", exits=1)
    msg.text(f"{stats.sentences} sentences ({stats.shards_written} shards written, {stats.shards_kept} kept from an earlier run)")
    if engine == "ray":
        per_actor = ", ".join(str(n) for _, n in sorted(stats.shards_per_worker.items()))
        msg.text(f"engine: ray, {n_workers} actors (shards labelled per worker process: {per_actor or 'none'})")
    for label, n in sorted(stats.entities.items()):
        msg.text(f"  {label:<10} {n:>8} pseudo-labelled entity spans")
    if members:
        msg.text(f"  {stats.agreed} of {stats.sentences} sentences where every teacher found the same entities")
    if stats.diagnostic_gold:
        msg.text(f"  {stats.diagnostic_gold} target tags kept aside for diagnostics only")
    msg.text(f"output: {output_dir}")
