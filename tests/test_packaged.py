"""install-package over a package of the same name built for another language: the
tokenizer language of a wheel and of an installed package (spacy_maral.pipeline.packaged)."""
import subprocess
import sys
import zipfile

from typer.testing import CliRunner

from spacy_maral.cli import app
from spacy_maral.pipeline.packaged import config_tokenizer_lang, installed_tokenizer_lang, wheel_tokenizer_lang


def config(lang: str) -> str:
    return f'[nlp]\nlang = "xx"\n\n[nlp.tokenizer]\n@tokenizers = "spacy_maral.tokenizer.v1"\nlang = "{lang}"\n'


def fake_wheel(folder, lang: str):
    wheel = folder / "xx_fake_ner-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("xx_fake_ner/__init__.py", "")
        archive.writestr("xx_fake_ner/xx_fake_ner-0.1.0/config.cfg", config(lang))
    return wheel


def fake_installed(folder, lang: str) -> None:
    package = folder / "xx_fake_ner"
    (package / "xx_fake_ner-0.1.0").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf8")
    (package / "xx_fake_ner-0.1.0" / "config.cfg").write_text(config(lang), encoding="utf8")


def test_the_tokenizer_language_of_a_config_a_wheel_and_an_installed_package(tmp_path, monkeypatch) -> None:
    assert config_tokenizer_lang(config("fi")) == "fi"
    assert config_tokenizer_lang('[nlp]\nlang = "de"\n') == "de"  # spaCy's own tokenizer: the pipeline's language
    assert config_tokenizer_lang("not [a config") is None
    assert wheel_tokenizer_lang(fake_wheel(tmp_path, "de")) == "de"
    assert installed_tokenizer_lang(sys.executable, "xx_fake_ner") is None
    fake_installed(tmp_path / "site", "fi")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    assert installed_tokenizer_lang(sys.executable, "xx_fake_ner") == "fi"


def test_installing_one_languages_package_over_anothers_says_so(tmp_path, monkeypatch) -> None:
    """Two one-language runs both made xx_maral_ner: the second install replaced the
    first language's package without a word."""
    dist = tmp_path / "dist"
    dist.mkdir()
    fake_wheel(dist, "de")
    fake_installed(tmp_path / "site", "fi")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    run = subprocess.run
    pip = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: pip.append(cmd) or subprocess.CompletedProcess(cmd, 0)
                        if "pip" in cmd else run(cmd, **kw))
    result = CliRunner().invoke(app, ["install-package", str(dist)])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and len(pip) == 1, result.output
    assert "the xx_fake_ner installed now is a fi pipeline; this de one replaces it" in said
    fake_wheel(dist, "fi")  # the same language again: nothing to say
    result = CliRunner().invoke(app, ["install-package", str(dist)])
    assert result.exit_code == 0 and "replaces it" not in result.output and len(pip) == 2
