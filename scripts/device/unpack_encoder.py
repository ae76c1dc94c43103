"""Rebuild the encoder directory packed by pack_encoder.py (benchmark tooling).

    python scripts/device/unpack_encoder.py .dev/encoder encoders/multilingual-e5-small

Writes model.safetensors (the 4-bit blocks dequantised exactly as `build-encoder` does;
word-embedding rows of ids not kept are zeros) and the tokenizer files. Prints the
sha256 of the packed weights so that both machines can be compared.
"""
import hashlib
import json
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np

from spacy_maral.encoder import DTYPE_F32, E5Header, dequantize_q4_0, hf_tensor_names, hf_tensor_shapes


def main(pack_dir: str, out_dir: str) -> None:
    from safetensors.numpy import save_file

    pack, out = Path(pack_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = json.loads((pack / "pack.json").read_text())
    weights = np.load(pack / "weights.npz")
    keep_ids = weights["keep_ids"]
    config = json.loads(lzma.open(pack / "config.json.xz").read())
    names = hf_tensor_names(config["num_hidden_layers"])
    state = {}
    for key in weights.files:
        if key == "keep_ids":
            continue
        short, dtype, count = key.split("|")
        raw = weights[key]
        if short == "emb.word":
            hidden = info["hidden"]
            rows = dequantize_q4_0(raw.reshape(-1), keep_ids.size * hidden).reshape(-1, hidden)
            array = np.zeros((info["vocab"], hidden), dtype=np.float32)
            array[keep_ids] = rows
        elif int(dtype) == DTYPE_F32:
            array = np.frombuffer(raw.tobytes(), dtype="<f4").astype(np.float32)
        else:
            array = dequantize_q4_0(raw, int(count))
        state[names[short]] = array
    header = E5Header(version=0, hidden=info["hidden"], layers=config["num_hidden_layers"],
                      heads=config["num_attention_heads"], ff=config["intermediate_size"],
                      vocab=info["vocab"], max_positions=config["max_position_embeddings"],
                      type_vocab=config["type_vocab_size"], eps=config["layer_norm_eps"], block_size=32)
    for short, shape in hf_tensor_shapes(header).items():
        state[names[short]] = state[names[short]].reshape(shape)
    h = header.hidden
    state["pooler.dense.weight"] = np.eye(h, dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros(h, dtype=np.float32)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    for xz in pack.glob("*.xz"):
        with lzma.open(xz) as src, open(out / xz.stem, "wb") as dst:
            shutil.copyfileobj(src, dst)
    digest = hashlib.sha256((pack / "weights.npz").read_bytes()).hexdigest()
    check = float(sum(float(np.abs(a).sum()) for a in state.values()))
    print(f"encoder rebuilt in {out}: {keep_ids.size} kept rows, weights.npz sha256 {digest[:16]}, "
          f"sum|w| {check:.6f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
