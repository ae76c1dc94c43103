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


def test_a_name_or_version_spacy_package_refuses_is_refused_before_any_training(tmp_path) -> None:
    """--vars.name my-ner trained every step, then `spacy package` refused xx_my-ner
    (10 minutes on the sample, 30 and more a language on CoNLL)."""
    import pytest

    from spacy_maral.pipeline.packaged import check_package_name

    check_package_name("maral_ner", "0.1.0")
    check_package_name("Ner2", "1.0.0rc1")
    for name, version, said in (("my-ner", "0.1.0", "the package name 'my-ner' can't be packaged"),
                                ("my ner", "0.1.0", "name 'my ner'"), ("", "0.1.0", "name ''"),
                                ("maral_ner", "banana", "the package version 'banana' is not one pip takes")):
        with pytest.raises(ValueError, match=said):
            check_package_name(name, version)
    text = tmp_path / "de.txt"
    text.write_text("Angela Merkel besuchte Paris.\n", encoding="utf8")
    for args in (["export", str(tmp_path / "no-model"), str(tmp_path / "out"), "--name", "my-ner"],
                 ["export", str(tmp_path / "no-model"), str(tmp_path / "out"), "--version", "banana"],
                 ["check-text", "de", "--text", str(text), "--name", "my-ner"],
                 ["languages", "de", "--project", str(tmp_path), "--text", str(text), "--name", "my-ner"],
                 ["languages", "de", "--project", str(tmp_path), "--text", str(text), "--vars.version", "banana"]):
        result = CliRunner().invoke(app, args)
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and ("can't be packaged" in said or "is not one pip takes" in said), (args, said)
    assert not (tmp_path / "out").exists() and not (tmp_path / "metrics").exists()
    assert CliRunner().invoke(app, ["check-text", "de", "--text", str(text), "--name", "maral_ner"]).exit_code == 0


def test_install_package_checks_its_interpreter_and_check_file_before_installing(tmp_path, monkeypatch) -> None:
    """A --python that can't be run ended in a traceback, and a missing --check-file was
    reported after installing, as spacy.load failing."""
    dist = tmp_path / "dist"
    dist.mkdir()
    fake_wheel(dist, "de")
    pip = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: pip.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    for args, said in ((["--python", str(tmp_path / "no-python")], f"--python {tmp_path / 'no-python'} is not an interpreter"),
                       (["--check-file", str(tmp_path / "missing.txt")],
                        f"--check-file: target corpus {tmp_path / 'missing.txt'} does not exist")):
        result = CliRunner().invoke(app, ["install-package", str(dist), *args])
        shown = " ".join(result.output.split())
        assert result.exit_code == 1 and said in shown and "nothing was installed" in shown, shown
    assert pip == []


def test_export_refuses_an_unknown_language_before_the_pipeline_loads(tmp_path) -> None:
    """export --lang zz loaded the pipeline, then ended in spaCy's traceback."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.cfg").write_text("[nlp]\n", encoding="utf8")  # not loadable: its error would come first
    result = CliRunner().invoke(app, ["export", str(model), str(tmp_path / "out"), "--lang", "zz"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "unknown language code 'zz'" in said, said
    assert not (tmp_path / "out").exists()
