"""A pipeline package: the name and version `spacy package` will take, checked before
any training, and what a package holds, read without loading it: the tokenizer
language of a built wheel and of the package of that name installed in an environment,
so that installing one language's package over another's says so."""
import re
import subprocess
import zipfile
from pathlib import Path
from typing import Optional

PACKAGE_NAME = re.compile(r"[A-Za-z0-9_]+")  # LANG_NAME is imported as a module: an identifier spaCy permits
DEFAULT_VERSION = "0.1.0"  # a package's version where none is given (export, the workflow's `version`)


def check_package_name(name: str, version: str) -> None:
    """Raise ValueError where `spacy package` would refuse the package LANG_NAME of this
    version, after all the training: a name that is not ASCII letters, digits and _, or
    a version pip does not take (PEP 440).

    name (str): the package name without its language (the workflow's `name`).
    version (str): the package version (the workflow's `version`).
    """
    from packaging.version import InvalidVersion, Version

    if not PACKAGE_NAME.fullmatch(name):
        raise ValueError(f"the package name {name!r} can't be packaged: give ASCII letters, digits and _ only "
                         "(the package LANG_NAME is imported as a Python module), e.g. maral_ner")
    try:
        Version(version)
    except InvalidVersion as err:
        raise ValueError(f"the package version {version!r} is not one pip takes (PEP 440), e.g. 0.1.0") from err


# prints the folder of an installed package (nothing where there is none), run by the
# environment's own interpreter
_FIND = ("import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
         "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')")


def config_tokenizer_lang(config_text: str) -> Optional[str]:
    """The tokenizer language a pipeline's config.cfg gives: its `[nlp.tokenizer]` lang
    where it has one (spacy_maral.tokenizer.v1), else its `[nlp]` lang; None where the
    text is not a config.

    config_text (str): the config file's text.
    """
    from confection import Config

    try:
        nlp = Config().from_str(config_text, interpolate=False).get("nlp") or {}
    except Exception:  # noqa: BLE001 (confection's errors share no base): not a config we can read
        return None
    lang = (nlp.get("tokenizer") or {}).get("lang") or nlp.get("lang")
    return str(lang) if lang else None


def wheel_tokenizer_lang(wheel: Path) -> Optional[str]:
    """The tokenizer language of the pipeline in a wheel built by `spacy package` (its
    config.cfg); None where it holds none.

    wheel (Path): the .whl file.
    """
    with zipfile.ZipFile(wheel) as archive:
        configs = [name for name in archive.namelist() if name.endswith("/config.cfg")]
        return config_tokenizer_lang(archive.read(configs[0]).decode("utf8")) if configs else None


def installed_tokenizer_lang(interpreter: str, package: str) -> Optional[str]:
    """The tokenizer language of `package` as installed in the environment of
    `interpreter` (its data folder's config.cfg); None where it is not installed.

    interpreter (str): the Python whose environment is asked.
    package (str): the package name, e.g. xx_maral_ner.
    """
    found = subprocess.run([interpreter, "-c", _FIND, package], capture_output=True, text=True)
    folder = found.stdout.strip() if found.returncode == 0 else ""
    configs = sorted(Path(folder).glob("*/config.cfg")) if folder else []
    return config_tokenizer_lang(configs[-1].read_text(encoding="utf8")) if configs else None
