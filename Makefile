# spacy-maral: set-up, tests and the end-to-end cross-lingual job.
#   make test      set up .venv (CPU torch first) and run the test suite
#   make all       set up, then: build the offline encoder, convert CoNLL, train the
#                  teacher (stage 1), pseudo-label the target text, adapt (stage 2),
#                  evaluate on the target test set.  Variables below; e.g.
#                  make all TARGET=es STAGE1_STEPS=3000 STAGE2_STEPS=1500
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA ?= ../shared/data/conll
SOURCE ?= en
TARGET ?= de
ENCODER ?= encoders/multilingual-e5-small
STAGE1_STEPS ?= 1800
STAGE2_STEPS ?= 1500
MAX_TARGET_DOCS ?= 3000
EVAL_EVERY ?= 450
DEV_LIMIT ?= 1000
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup test all clean-venv
setup: $(VENV)/.installed

$(VENV)/.installed: setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[encoder,knn,dev]"
	touch $@

test: setup
	$(PY) -m pytest tests -q -p no:cacheprovider

$(ENCODER)/config.json: | setup
	$(PY) -m spacy_maral build-encoder $(ENCODER)

corpus/%.spacy: | setup
	@mkdir -p corpus
	$(PY) -m spacy_maral convert $(DATA)/$(subst -,/,$*).conll $@

training/stage1/model-best: $(ENCODER)/config.json corpus/$(SOURCE)-train.spacy corpus/$(SOURCE)-dev.spacy
	$(PY) -m spacy train configs/source.cfg --output training/stage1 \
	  --paths.train corpus/$(SOURCE)-train.spacy --paths.dev corpus/$(SOURCE)-dev.spacy \
	  --paths.encoder $(ENCODER) --training.max_steps $(STAGE1_STEPS) \
	  --training.eval_frequency $(EVAL_EVERY) --corpora.dev.limit $(DEV_LIMIT)

corpus/$(TARGET)-pseudo/summary.json: training/stage1/model-best corpus/$(TARGET)-train.spacy
	$(PY) -m spacy_maral pseudo-label training/stage1/model-best corpus/$(TARGET)-train.spacy corpus/$(TARGET)-pseudo

training/adapt-$(TARGET)/model-best: corpus/$(TARGET)-pseudo/summary.json
	$(PY) -m spacy train configs/adapt.cfg --output training/adapt-$(TARGET) \
	  --paths.source corpus/$(SOURCE)-train.spacy --paths.target corpus/$(TARGET)-pseudo \
	  --paths.dev corpus/$(SOURCE)-dev.spacy --paths.encoder $(ENCODER) \
	  --paths.diagnostics training/adapt-$(TARGET)/diagnostics.jsonl \
	  --paths.checkpoint training/adapt-$(TARGET)/checkpoint \
	  --corpora.train.max_target_docs $(MAX_TARGET_DOCS) --training.max_steps $(STAGE2_STEPS) \
	  --components.maral_ner.adaptation.n_epochs $$(( ($(STAGE2_STEPS) * 8 + $(MAX_TARGET_DOCS) - 1) / $(MAX_TARGET_DOCS) )) \
	  --training.eval_frequency $(EVAL_EVERY) --corpora.dev.limit $(DEV_LIMIT)

all: training/adapt-$(TARGET)/model-best corpus/$(TARGET)-test.spacy
	$(PY) -m spacy evaluate training/stage1/model-best corpus/$(TARGET)-test.spacy --output training/stage1/$(TARGET)-test.json
	$(PY) -m spacy evaluate training/adapt-$(TARGET)/model-best corpus/$(TARGET)-test.spacy --output training/adapt-$(TARGET)/$(TARGET)-test.json

clean-venv:
	rm -rf $(VENV)
