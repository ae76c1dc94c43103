# spacy-maral: set-up, tests and the end-to-end cross-lingual job.
#   make test      set up .venv (CPU torch first, then the package with constraints.txt)
#                  and run the whole test suite (tests/ and benchmarks/tests/)
#   make test-fast the suite without the tests marked slow
#   make all       set up, then `spacy project run all` in project/: build the offline
#                  encoder, convert the sample corpus, train the teacher (stage 1) and
#                  the ensemble's teachers, calibrate, pseudo-label the target text,
#                  adapt (stage 2), select its checkpoint, soup and calibrate the student,
#                  guard, evaluate, package and install xx_maral_ner, after checking the
#                  target text (timings: docs/workflow.md, "Run times"). VARS="--vars.x y"
#   make conll     the same workflow on CoNLL data: DATA=folder with en/{train,dev}.conll and
#                  LANG/train.conll for each of TARGETS (LANG/test.conll scores it where present)
#   make benchmark the benchmark project (benchmarks/project.yml) on CoNLL data
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# a folder with en/{train,dev}.conll and LANG/train.conll (the raw text: tags unused) for
# each target language, LANG/test.conll where a test set exists: `spacy project assets`
# fetches the public English, Spanish and Dutch files into project/assets; give your own with DATA=...
DATA ?= project/assets
SOURCE ?= en
# the target language (of the benchmark project too), and the target languages of
# `make conll`, comma-separated (e.g. TARGETS=de,es,fi): one set of teachers, a student per language
TARGET ?= de
TARGETS ?= $(TARGET)
# the development language: its dev set (DATA/DEV_LANG/dev.conll) calibrates the shipped
# scores; es where DATA has es/dev.conll, else the source language
DEV_LANG ?= $(if $(wildcard $(DATA)/es/dev.conll),es,$(SOURCE))
# the student's score temperature (the workflow's student_temperature): 0, the rule (Platt's
# map fitted on DEV_LANG's dev set when the target is DEV_LANG, else T = 2.0, what Spanish
# students were fitted to there: `calibrate --target-lang`), or a given one
STUDENT_TEMPERATURE ?= 0
# seeds of more teachers for the pseudo-labels (the workflow's ensemble_seeds); empty: one teacher
ENSEMBLE_SEEDS ?= 1,2
# the seeds of the teacher (stage 1) and of the student (stage 2): another draw of the whole
# job, e.g. TEACHER_SEED=3 ENSEMBLE_SEEDS=4,5 STUDENT_SEED=1 (teacher_seed, student_seed);
# TEACHER_SEED not in ENSEMBLE_SEEDS (the same seed trains the same teacher twice)
TEACHER_SEED ?= 0
STUDENT_SEED ?= 0
# stage-2 seeds of more students, trained side by side with the student, whose weights
# are averaged with the student's (the workflow's soup_seeds, e.g. 100); empty: the student alone
SOUP_SEEDS ?=
STAGE1_STEPS ?= 1800
STAGE2_STEPS ?= 800
MAX_TARGET_DOCS ?= 800
STAGE2_EPOCHS ?= 8
PSEUDO_LIMIT ?= 4000
EVAL_EVERY ?= 200
DEV_LIMIT ?= 1000
SPEED_LIMIT ?= 1000
VARS ?=
# PyTorch's own index of CPU builds, as an extra index: PyPI's torch for Linux is the
# CUDA build (GBs more), and pip takes the highest match, 2.13.0+cpu from this index.
# Where it cannot be reached pip warns and uses its own index and find-links.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# offline (the encoder is built locally); a hub encoder needs them on make's command
# line: `make all HF_HUB_OFFLINE=0 TRANSFORMERS_OFFLINE=0 VARS="--vars.encoder ..."`
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# the tests that read real CoNLL files find them here (they skip without it)
export MARAL_CONLL_DIR ?= $(abspath $(DATA))
# the suite runs in one pytest-xdist worker per core, a test module's tests in one worker
# (they share its module fixtures); TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= $(shell nproc)
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope

.PHONY: setup test test-fast all conll benchmark browser clean-venv data-path
setup: $(VENV)/.installed browser

$(VENV)/.installed: setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 --extra-index-url "$(TORCH_INDEX)"
	$(PY) -m pip install -q -c constraints.txt -e ".[encoder,knn,dev,bench,ray]"
	touch $@

test: setup
	$(PYTEST) tests benchmarks/tests

test-fast: setup
	$(PYTEST) -m "not slow" tests benchmarks/tests

# the spaCy project (project/project.yml): the whole job, offline, on the sample corpus
all: setup
	cd project && ../$(PY) -m spacy project run all . $(VARS)

# the same workflow on the CoNLL data in $(DATA), English -> $(TARGETS), at the budget of
# the results in BENCHMARKS.md (run times: README)
conll: data-path setup
	cd project && ../$(PY) -m spacy project run all . --vars.data_dir $(abspath $(DATA)) \
	  --vars.target_langs $(TARGETS) --vars.target_text "$(abspath $(DATA))/{lang}/train.conll" \
	  --vars.target_test "$(abspath $(DATA))/{lang}/test.conll" --vars.dev_lang $(DEV_LANG) --vars.student_temperature $(STUDENT_TEMPERATURE) --vars.ensemble_seeds "$(ENSEMBLE_SEEDS)" \
	  --vars.teacher_seed $(TEACHER_SEED) --vars.student_seed $(STUDENT_SEED) \
	  --vars.soup_seeds "$(SOUP_SEEDS)" \
	  --vars.stage1_steps $(STAGE1_STEPS) --vars.stage2_steps $(STAGE2_STEPS) \
	  --vars.target_docs $(MAX_TARGET_DOCS) --vars.stage2_epochs $(STAGE2_EPOCHS) \
	  --vars.pseudo_limit $(PSEUDO_LIMIT) --vars.eval_every $(EVAL_EVERY) --vars.dev_limit $(DEV_LIMIT) $(VARS)

# the benchmark project (benchmarks/project.yml) on the CoNLL data: spaCy ner, the maral
# teacher, the MARAL student and its ablations, side by side; report and plots in
# benchmarks/metrics/conll-$(TARGET) (git-ignored; results worth keeping go to benchmarks/results)
benchmark: data-path setup
	cd benchmarks && ../$(PY) -m spacy project run benchmark . --vars.data_dir $(abspath $(DATA)) \
	  --vars.target_lang $(TARGET) --vars.target_text $(abspath $(DATA))/$(TARGET)/train.conll \
	  --vars.stage1_steps $(STAGE1_STEPS) --vars.stage2_steps $(STAGE2_STEPS) \
	  --vars.target_docs $(MAX_TARGET_DOCS) --vars.stage2_epochs $(STAGE2_EPOCHS) \
	  --vars.pseudo_limit $(PSEUDO_LIMIT) --vars.eval_every $(EVAL_EVERY) --vars.dev_limit $(DEV_LIMIT) \
	  --vars.bench_dir metrics/conll-$(TARGET) --vars.speed_limit $(SPEED_LIMIT) $(VARS)

# DATA checked before the set-up: make splits a path at its spaces (abspath, the project's
# commands), and the source language's CoNLL files must be there
data-path:
	@if [ -z "$(DATA)" ]; then echo "DATA is empty: give the folder of the CoNLL files, DATA=..." >&2; exit 2; fi
	@if [ "$(words $(DATA))" != 1 ]; then \
	  echo 'DATA="$(DATA)": make cannot pass a path with spaces; give a link without them, e.g.' \
	    'ln -s "$(DATA)" conll-data && make $(MAKECMDGOALS) DATA=conll-data' >&2; exit 2; fi
	@for name in train dev; do if [ ! -f "$(DATA)/$(SOURCE)/$$name.conll" ]; then \
	  echo "DATA=$(DATA) has no $(SOURCE)/$$name.conll: DATA is a folder with $(SOURCE)/{train,dev}.conll and" \
	    "LANG/train.conll for each target (after \`make setup\`, \`../.venv/bin/python -m spacy project assets\`" \
	    "in project/ fetches the public English files to project/assets, the default DATA)" >&2; exit 2; fi; done

# Debian's chromium, for the test that renders the displaCy page headless
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium not found and not root: the headless displaCy test will be skipped"; fi

clean-venv:
	rm -rf $(VENV)
