"""Runs of child processes side by side or one after the other: independent commands,
each with its log (`parallel`), one training per seed (`per_seed`), the spaCy
project's per-language workflow for each target language (`languages`), and the
values that command-line overrides give (`overrides`)."""
