"""Registered callbacks for `spacy train`: encoder set-up and epoch boundaries."""
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from spacy.language import Language

from spacy_maral.fileio import old_dir, replace_dir
from spacy_maral.training.compact import keep_encoder_layers
from spacy_maral.training.snapshots import snapshot_path
from spacy_maral.util import logger, registry


def freeze_word_embeddings_of(nlp: Language) -> int:
    """Stop training the word-embedding matrix of every transformer in the pipeline.

    On a CPU most of an optimizer step goes to the dense gradient of the 250k-row
    embedding matrix; with requires_grad off, torch computes no gradient for it and
    thinc's optimizer skips it.

    nlp (Language): the pipeline, after initialize.
    RETURNS (int): number of embedding parameters frozen.
    """
    frozen = 0
    for name, transformer in hf_transformers(nlp):
        weight = transformer.get_input_embeddings().weight
        weight.requires_grad_(False)
        frozen += weight.numel()
        logger.info("Froze the word embeddings of '%s' (%d parameters)", name, weight.numel())
    return frozen


def copy_weights_from(nlp: Language, source: Path) -> List[str]:
    """Load the weights of a trained pipeline into the pipes of the same name in `nlp`.

    Used to start a student from its teacher (a warm start). Only the models' weights
    (and the class statistics, which are buffers of the maral_ner model) are copied: each
    pipe keeps its own settings, labels, class prior and adaptation state.

    nlp (Language): the pipeline, after initialize.
    source (Path): a trained pipeline directory (e.g. the teacher's model-best).
    RETURNS (List[str]): the names of the pipes whose weights were copied.
    """
    import spacy

    source = Path(source)
    if not (source / "config.cfg").exists():
        raise ValueError(f"init_from: {source} is not a spaCy pipeline directory (no config.cfg)")
    trained = spacy.load(source)
    copied = []
    for name, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None or name not in trained.pipe_names:
            continue
        other = trained.get_pipe(name)
        try:
            if hasattr(pipe, "copy_weights_from"):
                pipe.copy_weights_from(other)  # maral_ner: classes mapped by name
            else:
                model.from_bytes(other.model.to_bytes())
        except (ValueError, KeyError) as err:
            raise ValueError(
                f"init_from: the weights of '{name}' in {source} don't fit this pipeline's '{name}' "
                f"(different architecture settings?): {err}"
            ) from err
        copied.append(name)
    if not copied:
        raise ValueError(f"init_from: {source} has none of the pipes {nlp.pipe_names}")
    logger.warning("Warm start: copied the weights of %s from %s", copied, source)
    return copied


@registry.callbacks("spacy_maral.configure_encoder.v1")
def configure_encoder(
    freeze_word_embeddings: bool = True, init_from: Optional[str] = None, encoder_layers: int = 0
) -> Callable[[Language], Language]:
    """An [initialize.after_init] callback that configures the transformer.

    freeze_word_embeddings (bool): freeze the word-embedding matrix (2-3x faster
        training steps on CPU; the paper trains it).
    init_from (Optional[str]): a trained pipeline whose weights the pipes of the same
        name start from (a warm start, e.g. a student from its teacher). The paper's
        stage 2 starts from the pretrained encoder (None).
    encoder_layers (int): a compact encoder: keep this many of the transformer's layers,
        evenly spaced and ending with the last, after the warm start (e.g. 6 of 12;
        spacy_maral.training.compact); 0 = every layer.
    """
    if encoder_layers < 0:
        raise ValueError(f"encoder_layers must be 0 (every layer) or the number of layers to keep, not {encoder_layers}")

    def after_init(nlp: Language) -> Language:
        if init_from:
            copy_weights_from(nlp, Path(init_from))
        if encoder_layers:
            for name, transformer in hf_transformers(nlp):
                kept = keep_encoder_layers(transformer, encoder_layers)
                logger.warning("Compact encoder: '%s' keeps its layers %s", name, [i + 1 for i in kept])
        if freeze_word_embeddings:
            n = freeze_word_embeddings_of(nlp)
            if n == 0:
                logger.warning("freeze_word_embeddings is on, but the pipeline has no transformer")
        return nlp

    return after_init


@registry.callbacks("spacy_maral.epoch_hook.v1")
def make_epoch_hook(
    checkpoint_dir: Optional[str] = None,
    checkpoint_every: int = 0,
    snapshot_dir: Optional[str] = None,
    snapshot_every: int = 0,
) -> Callable[[Language, Dict[str, Any]], None]:
    """A [training.before_update] callback: epoch boundaries, checkpoints and resume.

    Each pipe with an `end_epoch()` method (maral_ner) gets it called once when spaCy's
    training loop moves on to the next epoch; maral_ner rolls its class-mean estimators
    and, in stage 2, refreshes its adaptation state.

    checkpoint_dir (Optional[str]): directory of a resumable checkpoint (the whole
        pipeline, soft labels included). If it holds a complete checkpoint when
        training starts, the pipeline's weights and state are loaded from it first.
    checkpoint_every (int): write the checkpoint every this many steps (0 = never).
        Each checkpoint is written beside the old one and swapped in by renames, so a
        run killed at any moment leaves a complete checkpoint.
    snapshot_dir (Optional[str]): folder of weight snapshots for checkpoint averaging
        (`python -m spacy_maral average`): every `snapshot_every` steps the pipeline is
        saved to SNAPSHOT_DIR/step-NNNNNN (the weights after NNNNNN updates of this
        process), each written atomically and kept.
    snapshot_every (int): write a snapshot every this many steps (0 = never).
    """
    if snapshot_every and not snapshot_dir:
        raise ValueError("epoch_hook: snapshot_every is set but snapshot_dir is not (where should the snapshots go?)")
    for what, folder in (("checkpoint_dir", checkpoint_dir), ("snapshot_dir", snapshot_dir)):
        if folder and Path(folder).exists() and not Path(folder).is_dir():  # found now, not at the first save
            raise ValueError(f"epoch_hook: {what} {folder} is a file, not a folder; nothing was written (choose a folder)")
    state = {"epoch": 0, "started": False}

    def before_update(nlp: Language, info: Dict[str, Any]) -> None:
        step = int(info.get("step", 0))
        if not state["started"]:
            state["started"] = True
            found = find_checkpoint(Path(checkpoint_dir)) if checkpoint_dir else None
            if found is not None:
                load_checkpoint(nlp, found)
        epoch = int(info.get("epoch", 0))
        if epoch != state["epoch"]:
            state["epoch"] = epoch
            for _, pipe in nlp.pipeline:
                end_epoch = getattr(pipe, "end_epoch", None)
                if callable(end_epoch):
                    end_epoch()
        if checkpoint_dir and checkpoint_every > 0 and step > 0 and step % checkpoint_every == 0:
            save_checkpoint(nlp, Path(checkpoint_dir))
        if snapshot_dir and snapshot_every > 0 and step > 0 and step % snapshot_every == 0:
            save_snapshot(nlp, Path(snapshot_dir), step)

    return before_update


CHECKPOINT_MARKER = "checkpoint-complete"


def find_checkpoint(path: Path) -> Optional[Path]:
    """The complete checkpoint at `path`, or the one a kill between the two renames of
    its swap left beside it (fileio.replace_dir)."""
    for candidate in (Path(path), old_dir(path)):
        if (candidate / CHECKPOINT_MARKER).exists():
            return candidate
    return None


def save_checkpoint(nlp: Language, path: Path) -> None:
    """Write the pipeline to `path` so that a kill at any moment leaves a complete one.

    The new checkpoint is written to a temporary folder beside it, marked complete, and
    swapped in (fileio.replace_dir); `find_checkpoint` also finds the previous one that a
    kill between the two renames of the swap leaves.
    """
    with replace_dir(Path(path)) as tmp:
        nlp.to_disk(tmp)
        (tmp / CHECKPOINT_MARKER).write_text("ok\n", encoding="utf8")
    logger.info("checkpoint written to %s", path)


def save_snapshot(nlp: Language, snapshot_dir: Path, step: int) -> Path:
    """Save the whole pipeline as the snapshot of `step`, atomically (a loadable pipeline)."""
    path = snapshot_path(snapshot_dir, step)
    with replace_dir(path) as tmp:
        nlp.to_disk(tmp)
    logger.info("snapshot of step %d written to %s", step, path)
    return path


def load_checkpoint(nlp: Language, path: Path) -> None:
    """Load every pipe's weights and state from a checkpoint written by save_checkpoint."""
    path = Path(path)
    if not (path / CHECKPOINT_MARKER).exists():
        raise ValueError(f"{path} is not a complete checkpoint")
    frozen = _frozen_embedding_pipes(nlp)
    if (path / "vocab").exists():
        nlp.vocab.from_disk(path / "vocab")
    for name, pipe in nlp.pipeline:
        if (path / name).exists() and hasattr(pipe, "from_disk"):
            pipe.from_disk(path / name, exclude=["vocab"])
    # Loading rebuilds the transformer, which resets requires_grad: freeze again.
    for name, pipe in nlp.pipeline:
        if name in frozen:
            pipe.model.transformer.get_input_embeddings().weight.requires_grad_(False)
    logger.warning("Resumed from the checkpoint %s", path)


def hf_transformers(nlp: Language) -> List[Tuple[str, Any]]:
    """(pipe name, Hugging Face model) of each spacy-transformers `transformer` pipe: the
    pipes whose model has a `transformer` with input embeddings.

    nlp (Language): the pipeline.
    """
    found = []
    for name, pipe in nlp.pipeline:
        transformer = getattr(getattr(pipe, "model", None), "transformer", None)
        if transformer is not None and hasattr(transformer, "get_input_embeddings"):
            found.append((name, transformer))
    return found


def _frozen_embedding_pipes(nlp: Language) -> List[str]:
    return [name for name, t in hf_transformers(nlp) if not t.get_input_embeddings().weight.requires_grad]
