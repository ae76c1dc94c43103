"""Command-line overrides as spaCy reads them (`--section.key VALUE` or
`--section.key=VALUE`, the last one winning): the value an override list gives a
setting, read without importing spaCy."""
from typing import Optional, Sequence


def override_value(args: Sequence[str], name: str) -> Optional[str]:
    """The value the last `--NAME VALUE` or `--NAME=VALUE` of `args` gives; None where
    none sets it.

    args (Sequence[str]): the arguments (e.g. a workflow's `--vars.*`, or `spacy train`'s
        config overrides).
    name (str): the dotted setting, without the dashes (e.g. "vars.target_lang").
    """
    flag, value = f"--{name}", None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
