"""pseudo-label's output folder: DocBin shards `shard-00000.spacy`, ... of `shard_size`
sentences in corpus order, each written atomically with a `.json` sidecar written after
it (what the shard was made from and the digest of its bytes), and summary.json.

A shard is kept by a later run only when its sidecar names the same run (the digest of
its _manifest.json) and the same unlabelled sentences, and the shard's bytes match it:
anything else is labelled again.
"""
import hashlib
import json
from dataclasses import dataclass
from itertools import count, islice
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional

from spacy.tokens import Doc, DocBin

from spacy_maral.fileio import atomic_open, atomic_write_text
from spacy_maral.fingerprint import bytes_digest
from spacy_maral.inference.pseudo_label.task import shard_bytes

SHARDS = "shard-*.spacy"
SIDECARS = "shard-*.spacy.json"  # beside each shard: what it was made from (shard_identity)
SUMMARY = "summary.json"


@dataclass
class Shard:
    """A shard of the target corpus as the driver cuts it.

    path (Path): its file in the output folder.
    docs (List[Doc]): its unlabelled sentences, in corpus order.
    payload (bytes): their DocBin bytes (shard_bytes), what a worker labels.
    """

    path: Path
    docs: List[Doc]
    payload: bytes


def cut_shards(docs: Iterable[Doc], output_dir: Path, shard_size: int) -> Iterator[Shard]:
    """The corpus's shards of `shard_size` sentences, in order, read lazily.

    docs (Iterable[Doc]): the unlabelled target sentences, in corpus order.
    output_dir (Path): the output folder (each shard's path is in it).
    shard_size (int): sentences per shard (the last one may have fewer).
    """
    iterator = iter(docs)
    for shard_no in count():
        chunk = list(islice(iterator, shard_size))
        if not chunk:
            return
        yield Shard(Path(output_dir) / f"shard-{shard_no:05d}.spacy", chunk, shard_bytes(chunk))


def sidecar_path(shard: Path) -> Path:
    """Where a shard's identity is kept: SHARD.json (shard-00000.spacy.json)."""
    return shard.with_name(shard.name + ".json")


def shard_identity(run_digest: str, payload: bytes) -> Dict[str, str]:
    """What a shard is made from: the run's manifest digest and the digest of its
    unlabelled sentences (their DocBin bytes)."""
    return {"manifest_sha256": run_digest, "input_sha256": bytes_digest([payload])}


def write_shard(shard: Shard, labelled: bytes, run_digest: str) -> None:
    """Write a labelled shard, then its sidecar (finished_shard trusts a shard only
    with a sidecar that holds the digest of its bytes).

    shard (Shard): the shard as cut (its path and unlabelled bytes).
    labelled (bytes): the labelled shard's DocBin bytes.
    run_digest (str): the digest of the run's manifest.
    """
    with atomic_open(shard.path, "wb") as f:
        f.write(labelled)
    identity = {**shard_identity(run_digest, shard.payload), "shard_sha256": hashlib.sha256(labelled).hexdigest()}
    atomic_write_text(sidecar_path(shard.path), json.dumps(identity, indent=2))


def finished_shard(shard: Shard, run_digest: str) -> Optional[DocBin]:
    """The finished shard at `shard.path` (read once), or None when it is missing,
    damaged, not as long as `shard`, or not made from these sentences by this run (its
    sidecar, written after it, must hold their identity and the digest of the shard's
    bytes): then it is labelled again.

    shard (Shard): the shard as cut.
    run_digest (str): the digest of the run's manifest.
    """
    path = shard.path
    if not path.exists():
        return None
    try:
        recorded = json.loads(sidecar_path(path).read_text(encoding="utf8"))
        data = path.read_bytes()
    except (OSError, ValueError):  # no sidecar (killed before it, or an older run): relabelled
        return None
    identity = shard_identity(run_digest, shard.payload)
    if not isinstance(recorded, dict) or any(recorded.get(k) != v for k, v in identity.items()):
        return None
    if recorded.get("shard_sha256") != hashlib.sha256(data).hexdigest():
        return None
    try:
        kept = DocBin().from_bytes(data)
    except Exception:  # a damaged shard is relabelled
        return None
    return kept if len(kept) == len(shard.docs) else None
