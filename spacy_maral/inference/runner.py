"""The resumable partition runner shared by `annotate` and `pseudo-label`.

A run owns an output folder. `open_output` checks that the folder is this run's
(`_manifest.json`: what its outputs are made from) and removes the temporaries a killed
run left; `run_partitions` then walks the input's partitions in order, keeps those
already finished, and has an engine's workers process the others, each result written
as it comes back (by this process, or by the worker itself): what to keep, what a
worker gets and what becomes of a result is the run's own (`PartitionRun`). Every output file is
written atomically (spacy_maral.fileio), so a killed run loses at most the partitions
in flight, and the same command started again ends with exactly the output of an
uninterrupted run.
"""
import hashlib
import json
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Optional, Protocol, Sequence, Tuple, TypeVar, Union

from spacy_maral.fileio import atomic_write_text, remove_stale_temporaries
from spacy_maral.fingerprint import path_digest
from spacy_maral.inference.engines.base import Done, Engine, Task
from spacy_maral.pipeline.location import pipeline_folder

MANIFEST = "_manifest.json"
# what a run's outputs are made from (JSON): input files, model, the settings that change them
Manifest = Dict[str, object]
Part = TypeVar("Part")  # a partition as the run knows it
Payload = TypeVar("Payload")  # what a worker gets of it
Result = TypeVar("Result")  # what the worker's task returns


def model_files(model: Union[str, Path]) -> str:
    """The digest of a model's files as they are now (each file's path within the model,
    size and modification time: fingerprint.path_digest), so that a model changed in
    place (retrained, or calibrated into the same folder) is another model for a manifest.

    model (Union[str, Path]): a pipeline directory, or an installed package name (its package folder).
    RETURNS (str): the digest ("" for a name that is neither: nothing to fingerprint).
    """
    folder = pipeline_folder(model)
    return path_digest(folder) if folder is not None else ""


def manifest_digest(manifest: Manifest) -> str:
    """SHA-256 of a manifest (its JSON with sorted keys): stored with every partition or
    shard, so that a kept piece is one of this run's (same input and settings).

    manifest (Manifest): what the outputs are made from (check_manifest).
    """
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode("utf8")).hexdigest()


def check_manifest(
    output_dir: Path, manifest: Manifest, run: str, outputs: str,
    remedy: str = "use a new output directory, or delete it",
) -> None:
    """Write OUTPUT/_manifest.json, or check that the one there describes this run, so that
    a resumed run never mixes its outputs with those of another (other input, model or
    settings).

    output_dir (Path): the output directory of a resumable run.
    manifest (Manifest): what the outputs are made from (JSON-serializable): the
        input files (name, size, mtime), the model, the settings that change them.
    run (str): the command's name, for the error message (e.g. "annotate").
    outputs (str): glob of the output files a resumed run keeps (e.g. "part-*.parquet").
    remedy (str): what the error tells the user to do.
    RAISES (ValueError): the directory holds outputs of another run, or outputs without
        a manifest. A directory without outputs takes the new manifest.
    """
    output_dir = Path(output_dir)
    path = output_dir / MANIFEST
    has_outputs = any(output_dir.glob(outputs))
    if path.exists() and has_outputs:
        try:
            old = json.loads(path.read_text(encoding="utf8"))
        except ValueError:
            old = None
        if old == manifest:
            return
        diffs = sorted(k for k in set(manifest) | set(old or {}) if (old or {}).get(k) != manifest.get(k))
        raise ValueError(
            f"{output_dir} holds the output of another {run} run (different: {', '.join(diffs) or 'unreadable manifest'}); "
            f"its files can't be resumed with these settings: {remedy}"
        )
    if has_outputs:
        raise ValueError(
            f"{output_dir} has {outputs} files but no {MANIFEST} (they were not written by this {run} "
            f"version, or by another command): {remedy}"
        )
    atomic_write_text(path, json.dumps(manifest, indent=2))


def open_output(
    output_dir: Path,
    manifest: Manifest,
    *,
    run: str,
    outputs: str,
    overwrite: bool = False,
    also_remove: Sequence[str] = (),
    remedy: str = "use a new output directory, or delete it",
    check_input: Optional[Callable[[], None]] = None,
) -> Path:
    """Make `output_dir` this run's: create it, check (or write) its manifest, and remove
    the temporary files a killed run left there.

    output_dir (Path): the run's output folder.
    manifest (Manifest): what the outputs are made from (check_manifest).
    run (str): the command's name, for messages.
    outputs (str): glob of the output files a resumed run keeps.
    overwrite (bool): when the folder holds another run's outputs, delete them (the
        `outputs`, the files named in `also_remove` and the manifest) instead of raising.
        `check_input` runs first: nothing is removed for an input that is then refused.
    also_remove (Sequence[str]): names (or globs) of other files of a run that
        `overwrite` removes.
    remedy (str): what the error tells the user to do.
    check_input (Optional[Callable[[], None]]): reads the new input completely and raises
        (ValueError, OSError) when it is unreadable, empty or undecodable; called only
        when `overwrite` is about to remove another run's outputs.
    RETURNS (Path): the folder. Hold its folder_lock (spacy_maral.inference.lock) for
        the whole run.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_manifest(output_dir, manifest, run=run, outputs=outputs, remedy=remedy)
    except ValueError:
        if not overwrite:
            raise
        if check_input is not None:
            check_input()  # before anything of the old run is removed
        olds = [*output_dir.glob(outputs), *(p for name in also_remove for p in output_dir.glob(name))]
        for old in [*olds, output_dir / MANIFEST]:
            if old.is_file():
                old.unlink()
        check_manifest(output_dir, manifest, run=run, outputs=outputs, remedy=remedy)
    remove_stale_temporaries(output_dir)
    return output_dir


class PartitionRun(Protocol[Part, Payload, Result]):
    """A resumable run's part in run_partitions: which partitions are finished already,
    what a worker gets of the others, and what becomes of a worker's result.

    annotate's run keeps nothing here (its workers check, write and keep their own
    partitions: on a cluster too); pseudo-label's run keeps and writes the shards here.
    """

    def reuse(self, part: Part) -> bool:
        """True when `part` is finished on disk already: the run counts it as kept, and no
        worker processes it again."""
        ...

    def payload(self, part: Part) -> Payload:
        """What a worker gets to process `part`."""
        ...

    def finish(self, part: Part, done: Done[Result]) -> None:
        """A worker processed `part`: write what this process writes of it, count it."""
        ...


def run_partitions(
    engine: Engine,
    task: Task[Result],
    run: PartitionRun[Part, Payload, Result],
    partitions: Iterable[Part],
    **settings: object,
) -> None:
    """Process the partitions that are not finished yet, in input order, with `engine`.

    engine (Engine): an entered engine: its workers run `task`.
    task (Task[Result]): the workers' function, task(nlp, payload, **settings).
    run (PartitionRun): what is kept, what a worker gets, what becomes of its result.
    partitions (Iterable[Part]): the input's partitions, read lazily.
    settings: passed on to `task`.
    """

    def pending() -> Iterator[Tuple[Part, Payload]]:
        for part in partitions:
            if not run.reuse(part):
                yield part, run.payload(part)

    for part, done in engine.map(task, pending(), **settings):
        run.finish(part, done)
