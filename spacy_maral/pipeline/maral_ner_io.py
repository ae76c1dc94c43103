"""maral_ner's serialization: its cfg, vocab and weights to and from disk and bytes (and,
in training, the stage-2 adaptation state), a load replacing what an earlier load or
training left, the labels checked against the weights' record before anything changes.
`MaralNER` (pipeline.maral_ner) takes these methods from `MaralNERSerialization`.
"""
from typing import Any, Dict, Iterable

import srsly
from spacy import util

from spacy_maral.ml.span_ner import CLASSES_ATTR, build_head, drop_head
from spacy_maral.pipeline.stored_cfg import (
    NON_ENTITY_LABEL,
    check_stored_classes,
    checked_cfg,
    initial_cfg,
    load_weights,
    read_cfg,
    read_weights,
)


class MaralNERSerialization:
    """to_bytes, from_bytes, to_disk and from_disk of maral_ner (a mixin of MaralNER: it
    uses the component's cfg, vocab, model, loss, adaptation, name, classes and spans_key)."""

    def _restore_model(self) -> None:
        self.loss.from_cfg(self.cfg.get("loss_state", {}))
        self.model.attrs[CLASSES_ATTR] = list(self.classes)  # what weights that record none are taken for
        if self.cfg.get("nI") is not None:
            self.model.set_dim("nO", len(self.classes), force=True)
            self.model.set_dim("nI", self.cfg["nI"], force=True)
            build_head(self.model)
        else:  # the state of a component never initialized: no head
            drop_head(self.model)

    def drop_adaptation_state(self) -> None:
        """Forget the student's training-only state (soft labels, neighbour index), so
        that a pipeline exported for packaging carries only what prediction needs."""
        if self.adaptation is not None:
            self.adaptation.store = None

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        self._validate_serialization_attrs()
        serialize = {
            "cfg": lambda: srsly.json_dumps(self.cfg),
            "vocab": lambda: self.vocab.to_bytes(exclude=exclude),
            "model": lambda: self.model.to_bytes(),
        }
        return util.to_bytes(serialize, exclude)

    def _load(self, stored: Dict[str, Any], weights: bytes, cfg_where: object, model_where: object) -> None:
        """Take the stored cfg and weights in the place of the present ones, the labels
        checked against the weights before anything changes: nothing of an earlier
        load or training stays (a score map, other labels). The config's spans_key stays."""
        cfg = {**initial_cfg(self.spans_key), **stored, "spans_key": self.spans_key}
        check_stored_classes((NON_ENTITY_LABEL, *cfg["labels"]), weights, cfg_where, model_where, self.name)
        self.cfg = cfg
        self._restore_model()
        load_weights(self.model, weights, model_where, self.name)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "MaralNERSerialization":
        self._validate_serialization_attrs()
        msg = srsly.msgpack_loads(bytes_data)
        where = f"maral_ner '{self.name}' bytes"
        self._load(checked_cfg(srsly.json_loads(msg["cfg"]), where), msg["model"], f"{where} (cfg)", f"{where} (model)")
        if "vocab" in msg and "vocab" not in exclude:
            self.vocab.from_bytes(msg["vocab"], exclude=exclude)
        return self

    def to_disk(self, path, *, exclude: Iterable[str] = tuple()) -> None:
        path = util.ensure_path(path)
        serialize = {
            "cfg": lambda p: srsly.write_json(p, self.cfg),
            "vocab": lambda p: self.vocab.to_disk(p, exclude=exclude),
            "model": lambda p: self.model.to_disk(p),
        }
        if self.adaptation is not None and self.adaptation.store is not None:
            serialize["adaptation"] = lambda p: self.adaptation.save(p)  # type: ignore[union-attr]
        util.to_disk(path, serialize, exclude)

    def from_disk(self, path, *, exclude: Iterable[str] = tuple()) -> "MaralNERSerialization":
        path = util.ensure_path(path)
        for required in ("cfg", "model"):
            if not (path / required).exists():
                raise ValueError(f"maral_ner '{self.name}': {path / required} is missing; the pipeline directory is incomplete")
        self._load(read_cfg(path / "cfg", self.name), read_weights(path / "model", self.name), path / "cfg", path / "model")
        if (path / "vocab").exists() and "vocab" not in exclude:
            self.vocab.from_disk(path / "vocab", exclude=exclude)
        if self.adaptation is not None and (path / "adaptation").exists() and "adaptation" not in exclude:
            self.adaptation.load(path / "adaptation")
        return self
