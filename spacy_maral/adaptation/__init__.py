"""Stage 2, progressive adaptation: the student's state and per-step logic
(`progressive`, with its settings `spacy_maral.Adaptation.v1`), anchors and guidance
(`refinement`), the soft-label store (`soft_labels`) and how a target example is marked
(`examples`). `maral_ner` holds one `ProgressiveAdaptation` when its config has an
`adaptation` block; nothing here imports the pipeline components."""
