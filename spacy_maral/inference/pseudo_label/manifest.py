"""What a pseudo-label run's shards are made from (its _manifest.json): a run with
anything else refuses the folder instead of mixing its shards with stale ones (the
stage-2 reader reads every shard there)."""
import hashlib
from pathlib import Path
from typing import Dict, List, Sequence

from spacy.language import Language

from spacy_maral.corpora.docbin import docbin_paths
from spacy_maral.fingerprint import file_stats
from spacy_maral.inference.runner import Manifest
from spacy_maral.ml.span_ner import get_span_head
from spacy_maral.pipeline.loading import encoder_runtime_of
from spacy_maral.pipeline.maral_ner import MaralNER, find_maral_ner


def run_manifest(
    nlp: Language, input_path: Path, ensemble: Sequence[Language], *, gold_tokens: bool, shard_size: int, limit: int
) -> Manifest:
    """What a run's shards are made from: the input files, the teacher (and the
    ensemble's teachers), the decision rule, the tokenizer, the shard size, the limit
    and the encoder's precision.

    nlp (Language): the teacher.
    input_path (Path): the target corpus (input_fingerprint).
    ensemble (Sequence[Language]): the ensemble's other teachers.
    gold_tokens (bool): whether the corpus's own tokens are kept.
    shard_size (int): sentences per shard.
    limit (int): the run's sentence limit (0 = all).
    """
    ner = find_maral_ner(nlp)
    manifest: Manifest = {
        "inputs": input_fingerprint(input_path),
        # the head's weights identify the teacher (trained with its encoder); the score
        # temperature, which `calibrate` changes, does not enter the soft labels
        "teacher_head_sha256": head_fingerprint(ner),
        "classes": list(ner.classes), "inference_tau": float(ner.inference_tau),
        "tokenizer": dict(nlp.config["nlp"]["tokenizer"]), "gold_tokens": gold_tokens,
        "shard_size": shard_size, "limit": limit,
        # bfloat16 and fp32 soft labels differ slightly: shards of one run share one precision
        "encoder_precision": (encoder_runtime_of(nlp) or {}).get("running", "fp32"),
    }
    if ensemble:  # (absent for one teacher: the manifests of single-teacher runs stay as they were)
        manifest["ensemble_head_sha256"] = [head_fingerprint(find_maral_ner(member)) for member in ensemble]
        manifest["ensemble_inference_tau"] = [float(find_maral_ner(member).inference_tau) for member in ensemble]
    return manifest


def input_fingerprint(path: Path) -> List[Dict[str, object]]:
    """Name, size and modification time of the input file, or of each .spacy file of an
    input directory (as `annotate` records its inputs): what a resumed run must find
    unchanged."""
    files = docbin_paths(path) if path.is_dir() else [path]
    return file_stats(files)


def head_fingerprint(ner: MaralNER) -> str:
    """SHA-256 of the state of maral_ner's span head (its parameters and class
    statistics, by name, on the CPU: the same on every device)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(get_span_head(ner.model).state_dict().items()):
        digest.update(name.encode("utf8"))
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
