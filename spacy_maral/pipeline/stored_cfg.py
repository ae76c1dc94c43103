"""maral_ner's stored cfg: its format version and the check that this version of
spacy-maral can read a cfg, with an error naming the file."""
from pathlib import Path
from typing import Any, Dict

import srsly

# version of what to_disk/to_bytes write (cfg and model); bumped on incompatible changes
FORMAT_VERSION = 1


def checked_cfg(cfg: Dict[str, Any], where: object) -> Dict[str, Any]:
    """The stored cfg, if this version of spacy-maral can read it; a clear error if not.

    cfg (dict): the component's stored cfg.
    where (object): the file (or description) it came from, for the message.
    """
    if not isinstance(cfg, dict) or "labels" not in cfg:
        raise ValueError(f"{where}: not a maral_ner cfg (no 'labels'); the pipeline directory is damaged")
    version = cfg.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: saved in maral_ner format version {version!r}, but this spacy-maral reads "
            f"versions up to {FORMAT_VERSION}; upgrade spacy-maral to load this pipeline"
        )
    return cfg


def read_cfg(path: Path, component: str) -> Dict[str, Any]:
    """The cfg stored at `path`, checked (checked_cfg); errors name the file.

    path (Path): the component's cfg file.
    component (str): the component's name, for messages.
    """
    try:
        cfg = srsly.read_json(path)
    except ValueError as err:
        raise ValueError(f"maral_ner '{component}': {path} is not valid JSON ({err}); the pipeline directory is damaged") from err
    return checked_cfg(cfg, path)
