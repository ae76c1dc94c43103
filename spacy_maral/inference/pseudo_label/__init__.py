"""`pseudo-label`: a target corpus labelled by the teacher (and its ensemble) into soft
labels, shard by shard, resumable (docs/method.md, section 5).

- `task`: a worker's labelling of one shard (soft labels from the teachers' mean span
  probabilities; target tags kept aside for diagnostics);
- `shards`: the output folder's shards, their sidecars and which are finished;
- `manifest`: what a run's shards are made from (a run with other inputs is refused);
- `driver`: `pseudo_label()`, which cuts the corpus into shards and runs them on an engine.
"""
from spacy_maral.inference.pseudo_label.driver import PseudoLabelStats, check_target_corpus, pseudo_label
from spacy_maral.inference.pseudo_label.manifest import head_fingerprint, run_manifest
from spacy_maral.inference.pseudo_label.shards import SUMMARY
from spacy_maral.inference.pseudo_label.task import LabelledShard, ShardCounts, label_batch, label_shard_bytes

__all__ = [
    "SUMMARY", "LabelledShard", "PseudoLabelStats", "ShardCounts", "check_target_corpus", "head_fingerprint",
    "label_batch", "label_shard_bytes", "pseudo_label", "run_manifest",
]
