"""Tests of the CoNLL-style reader/converter (`spacy_maral.corpora.conll`) and its CLI command."""
import os
import threading
from pathlib import Path
from typing import List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab
from typer.testing import CliRunner

from helpers import conll_file
from spacy_maral.cli import app
from spacy_maral.corpora import (
    ConversionError,
    ConversionStats,
    convert_file,
    detect_format,
    detect_scheme,
    docs_to_conll,
    read_conll,
)


def write(folder: Path, name: str, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` byte for byte (no newline translation) and return the path."""
    path = folder / name
    path.write_bytes(text.encode(encoding))
    return path


def ents(doc: Doc) -> List[Tuple[int, int, str]]:
    """The (start, end, label) entity spans of a Doc."""
    return [(ent.start, ent.end, ent.label_) for ent in doc.ents]


def read(path: Path, **kwargs) -> Tuple[List[Doc], ConversionStats]:
    """Read a whole file; return the Docs and the stats."""
    stats = ConversionStats()
    docs = list(read_conll(path, stats=stats, **kwargs))
    return docs, stats


CONLL = """\
-DOCSTART- -X- O O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


# ----------------------------------------------------------------------------- formats


def test_conll_four_columns(tmp_path: Path) -> None:
    docs, stats = read(write(tmp_path, "a.conll", CONLL))
    assert [d.text for d in docs] == ["EU rejects German call.", "Peter Blackburn"]  # prose spacing
    assert [t.whitespace_ for t in docs[0]] == [" "] * 3 + ["", ""]  # no space before the full stop
    assert ents(docs[0]) == [(0, 1, "ORG"), (2, 3, "MISC")]
    assert ents(docs[1]) == [(0, 2, "PER")]
    assert all(t.ent_iob_ in ("B", "I", "O") for d in docs for t in d)  # no missing values
    assert (stats.fmt, stats.scheme) == ("conll", "iob2")
    assert (stats.sentences, stats.tokens, stats.documents) == (2, 7, 1)
    assert stats.entities == {"ORG": 1, "MISC": 1, "PER": 1}
    assert stats.repairs == []


def test_conll_tabs_two_columns_and_any_labels(tmp_path: Path) -> None:
    text = "Hamlet\tB-WORK_OF_ART\nat\tO\nthe\tB-FAC\nGlobe\tI-FAC\n\nx\tB-ART-WORK\n"
    docs, stats = read(write(tmp_path, "b.conll", text))
    assert ents(docs[0]) == [(0, 1, "WORK_OF_ART"), (2, 4, "FAC")]
    assert ents(docs[1]) == [(0, 1, "ART-WORK")]
    assert stats.fmt == "conll"


def test_token_may_hold_non_ascii_space(tmp_path: Path) -> None:
    docs, _ = read(write(tmp_path, "nbsp.conll", "10\u00a0000\tO\neuros\tO\n"))
    assert [t.text for t in docs[0]] == ["10\u00a0000", "euros"]


def test_wikiann(tmp_path: Path) -> None:
    text = (
        "en:Paris\tB-LOC\nen:is\tO\nen:http://x.org\tO\n"
        "\n"
        "en::\tO\nen:Ada\tB-PER\nen:Lovelace\tI-PER\n"
    )
    path = write(tmp_path, "wikiann.txt", text)
    assert detect_format(path) == "wikiann"
    docs, stats = read(path)
    assert [t.text for t in docs[0]] == ["Paris", "is", "http://x.org"]
    assert [t.text for t in docs[1]] == [":", "Ada", "Lovelace"]
    assert ents(docs[1]) == [(1, 3, "PER")]
    assert stats.fmt == "wikiann"


def test_wikiann_prefix_with_dashes(tmp_path: Path) -> None:
    path = write(tmp_path, "w.txt", "zh-min-nan:Tâi-oân\tB-LOC\n")
    docs, _ = read(path, fmt="wikiann")
    assert docs[0].text == "Tâi-oân"


def test_multiconer(tmp_path: Path) -> None:
    text = (
        "# id 5f1e-aa\tdomain=en\n"
        "the _ _ O\n"
        "beatles _ _ B-GRP\n"
        "# id 77b2-cc\tdomain=en\n"  # a comment right after tokens starts a sentence
        "# _ _ O\n"  # a '#' token is not a comment
        "yesterday _ _ B-CW\n"
        "\n"
    )
    path = write(tmp_path, "multiconer.conll", text)
    assert detect_format(path) == "multiconer"
    docs, stats = read(path)
    assert [d.text for d in docs] == ["the beatles", "# yesterday"]
    assert ents(docs[0]) == [(1, 2, "GRP")]
    assert ents(docs[1]) == [(1, 2, "CW")]
    assert (stats.fmt, stats.sentences) == ("multiconer", 2)


def test_unknown_format_or_scheme(tmp_path: Path) -> None:
    path = write(tmp_path, "a.conll", CONLL)
    with pytest.raises(ValueError, match="format"):
        list(read_conll(path, fmt="json"))
    with pytest.raises(ValueError, match="scheme"):
        list(read_conll(path, scheme="xyz"))


# ----------------------------------------------------------------------------- schemes


def test_iob1_to_iob2(tmp_path: Path) -> None:
    text = "Ada\tI-PER\nLovelace\tI-PER\nand\tO\nBonn\tI-LOC\nKöln\tB-LOC\n"
    path = write(tmp_path, "iob1.conll", text)
    assert detect_scheme(path) == "iob1"
    docs, stats = read(path)
    assert stats.scheme == "iob1" and stats.repairs == []
    assert ents(docs[0]) == [(0, 2, "PER"), (3, 4, "LOC"), (4, 5, "LOC")]
    assert docs_to_conll(docs) == "Ada\tB-PER\nLovelace\tI-PER\nand\tO\nBonn\tB-LOC\nKöln\tB-LOC\n"


def test_bioes_and_bilou(tmp_path: Path) -> None:
    bioes = "New\tB-LOC\nYork\tI-LOC\nCity\tE-LOC\nand\tO\nAda\tS-PER\n"
    bilou = "New\tB-LOC\nYork\tI-LOC\nCity\tL-LOC\nand\tO\nAda\tU-PER\n"
    for name, text in (("bioes.conll", bioes), ("bilou.conll", bilou)):
        path = write(tmp_path, name, text)
        assert detect_scheme(path) == "bioes"
        docs, stats = read(path)
        assert ents(docs[0]) == [(0, 3, "LOC"), (4, 5, "PER")]
        assert stats.repairs == []
        assert docs_to_conll(docs).splitlines()[:3] == ["New\tB-LOC", "York\tI-LOC", "City\tI-LOC"]


def test_bioes_repairs_are_counted(tmp_path: Path) -> None:
    text = "Ada\tB-PER\nsaid\tO\nBonn\tE-LOC\nKöln\tB-LOC\n"  # lines 1-4
    docs, stats = read(write(tmp_path, "bad.bioes", text), scheme="bioes")
    assert ents(docs[0]) == [(0, 1, "PER"), (2, 3, "LOC"), (3, 4, "LOC")]
    assert [line for line, _ in stats.repairs] == [2, 3, 4]
    with pytest.raises(ConversionError, match=r"line 2\b"):
        read(write(tmp_path, "bad.bioes", text), scheme="bioes", strict=True)


def test_iob2_stray_i_is_a_reported_repair(tmp_path: Path) -> None:
    lines = ["Ada\tB-PER", "said\tO", "Calidad\tI-MISC", "total\tI-MISC", ""]
    lines += ["Bonn\tI-LOC", "Paris\tB-LOC", "x\tI-PER", ""]
    text = "\n".join(lines)
    path = write(tmp_path, "stray.conll", text)
    docs, stats = read(path, scheme="iob2")
    assert ents(docs[0]) == [(0, 1, "PER"), (2, 4, "MISC")]
    assert ents(docs[1]) == [(0, 1, "LOC"), (1, 2, "LOC"), (2, 3, "PER")]
    assert [line for line, _ in stats.repairs] == [3, 6, 8]
    assert "I-MISC" in stats.repairs[0][1] and "'Calidad'" in stats.repairs[0][1]
    assert stats.total_entities == 5
    with pytest.raises(ConversionError) as info:
        read(path, scheme="iob2", strict=True)
    assert info.value.line == 3 and "stray.conll, line 3:" in str(info.value)


def test_auto_scheme_keeps_few_stray_i_as_repairs(tmp_path: Path) -> None:
    text = "A\tB-PER\nb\tO\n\nC\tB-ORG\nD\tI-ORG\n\nE\tI-LOC\n"
    docs, stats = read(write(tmp_path, "s.conll", text))
    assert stats.scheme == "iob2"
    assert stats.repairs and stats.repairs[0][0] == 7


# ----------------------------------------------------------------------------- DOCSTART


@pytest.mark.parametrize(
    "docstart",
    ["-DOCSTART-", "-DOCSTART-\tO", "-DOCSTART- O", "-DOCSTART- -X- O O", "-DOCSTART- -X- -X- O  "],
)
def test_docstart_lines_in_any_form(tmp_path: Path, docstart: str) -> None:
    text = f"{docstart}\n\nEU\tB-ORG\nrejects\tO\n\n{docstart}\n\nPeter\tB-PER\n"
    docs, stats = read(write(tmp_path, "d.conll", text))
    assert [d.text for d in docs] == ["EU rejects", "Peter"]
    assert stats.documents == 2 and stats.sentences == 2
    assert all("-DOCSTART-" not in d.text for d in docs)


def test_inline_docstart_ends_the_sentence(tmp_path: Path) -> None:
    # Dutch-style: -DOCSTART- directly after tokens, no blank line on either side.
    text = "De\tO\nman\tO\n-DOCSTART-\tO\nJan\tB-PER\nPeeters\tI-PER\nzegt\tO\n"
    docs, stats = read(write(tmp_path, "nl.conll", text))
    assert [d.text for d in docs] == ["De man", "Jan Peeters zegt"]
    assert ents(docs[1]) == [(0, 2, "PER")]
    assert stats.documents == 1


def test_docstart_with_other_column_count_is_no_column_error(tmp_path: Path) -> None:
    text = "-DOCSTART- -X- O O\n\nLa NC B-LOC\n"  # 4 columns, then 3
    docs, _ = read(write(tmp_path, "es.conll", text))
    assert ents(docs[0]) == [(0, 1, "LOC")]


# ----------------------------------------------------------------------------- line endings


def test_crlf_trailing_whitespace_no_final_blank_line_and_bom(tmp_path: Path) -> None:
    text = "\ufeffEU\tB-ORG \r\nrejects\tO\t\r\n\r\n  \r\nPeter\tB-PER\r\nBlackburn\tI-PER"
    docs, stats = read(write(tmp_path, "crlf.conll", text))
    assert [d.text for d in docs] == ["EU rejects", "Peter Blackburn"]
    assert ents(docs[1]) == [(0, 2, "PER")]
    assert all("\r" not in t.text for d in docs for t in d)
    assert stats.entities == {"ORG": 1, "PER": 1}


def test_lone_cr_line_endings_end_lines(tmp_path: Path) -> None:
    """Old Mac line endings (a lone CR) end lines, as LF and CRLF do; error lines count them."""
    path = tmp_path / "cr.conll"
    path.write_bytes(b"EU\tB-ORG\rrejects\tO\r\rPeter\tB-PER\rBlackburn\tI-PER\r")
    docs, stats = read(path)
    assert [d.text for d in docs] == ["EU rejects", "Peter Blackburn"]
    assert stats.entities == {"ORG": 1, "PER": 1}
    path.write_bytes(b"EU\tB-ORG\rrejects\tO\r\rPeter\tB-PER\tX\r")
    with pytest.raises(ConversionError) as info:
        read(path)
    assert info.value.line == 4


def test_streaming_is_lazy(tmp_path: Path) -> None:
    path = write(tmp_path, "lazy.conll", "A\tO\n\nB\tO\nC\n")  # error on line 4
    docs = read_conll(path, fmt="conll", scheme="iob2")
    assert next(docs).text == "A"
    with pytest.raises(ConversionError, match="line 4"):
        next(docs)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("EU\tB-ORG\nrejects\tO\tX\n", 2, "columns"),  # 3 columns after 2
        ("La NC B-LOC\nCoruña I-LOC\n", 2, "columns"),  # 2 columns after 3
        ("EU\tB-ORG\nrejects\t\n", 2, "empty tag"),  # last column empty
        ("EU\tB-ORG\n\nrejects\n", 3, "empty tag"),
        ("EU\tB-ORG\nrejects\tX-PER\n", 2, "X-PER"),
        ("EU\tB-ORG\nrejects\tB-\n", 2, "'B-'"),
        ("EU\tB-ORG\nrejects\tb-org\n", 2, "b-org"),
        ("EU\tB-ORG\n\n\nrejects\t_\n", 4, "'_'"),
    ],
)
def test_malformed_lines_name_file_and_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, "bad.conll", text)
    with pytest.raises(ConversionError) as info:
        read(path)
    message = str(info.value)
    assert f"bad.conll, line {line}:" in message and words in message
    assert info.value.line == line and isinstance(info.value, ValueError)


def test_tag_outside_the_chosen_scheme(tmp_path: Path) -> None:
    path = write(tmp_path, "e.conll", "Ada\tB-PER\nLovelace\tE-PER\n")
    with pytest.raises(ConversionError, match=r"line 2: .*IOB2"):
        read(path, scheme="iob2")


def test_latin1_file_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "latin1.conll", "La\tB-LOC\n\nCoruña\tB-LOC\n", encoding="latin-1")
    with pytest.raises(ConversionError) as info:
        read(path)
    assert info.value.line == 3 and "UTF-8" in str(info.value) and "0xf1" in str(info.value)


def test_utf16_file_gets_a_utf16_hint(tmp_path: Path) -> None:
    path = tmp_path / "u16.conll"
    path.write_bytes("La\tB-LOC\n".encode("utf-16"))
    with pytest.raises(ConversionError) as info:
        read(path)
    assert info.value.line == 1 and "UTF-16" in str(info.value) and "iconv -f utf-16" in str(info.value)


@pytest.mark.parametrize("text, line", [("", 1), ("\n\n\n", 3), ("-DOCSTART- -X- O O\n\n", 2)])
def test_file_without_sentences(tmp_path: Path, text: str, line: int) -> None:
    path = write(tmp_path, "empty.conll", text)
    with pytest.raises(ConversionError, match=f"empty.conll, line {line}: no sentences"):
        read(path)


def test_wikiann_without_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, "w.txt", "en:Paris\tB-LOC\nRome\tB-LOC\n")
    with pytest.raises(ConversionError, match="line 2: .*lang:token"):
        read(path, fmt="wikiann")


# ----------------------------------------------------------------------------- writing


def test_convert_file_writes_a_docbin(tmp_path: Path) -> None:
    out = tmp_path / "new" / "train.spacy"
    stats = convert_file(write(tmp_path, "a.conll", CONLL), out)
    assert out.exists() and [p.name for p in out.parent.iterdir()] == ["train.spacy"]
    docs = list(DocBin().from_disk(out).get_docs(Vocab()))
    assert [d.text for d in docs] == ["EU rejects German call.", "Peter Blackburn"]  # prose spacing
    assert ents(docs[1]) == [(0, 2, "PER")]
    assert stats.written is not None
    assert (stats.written.sentences, stats.written.tokens, dict(stats.written.entities)) == (
        2,
        7,
        {"ORG": 1, "MISC": 1, "PER": 1},
    )


def test_convert_file_failure_leaves_output_intact(tmp_path: Path) -> None:
    out = tmp_path / "train.spacy"
    out.write_bytes(b"previous content")
    with pytest.raises(ConversionError, match="line 2"):
        convert_file(write(tmp_path, "bad.conll", "EU\tB-ORG\nrejects\tX-PER\n"), out)
    assert out.read_bytes() == b"previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.conll", "train.spacy"]


def test_convert_file_failed_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "train.spacy"
    out.write_bytes(b"previous content")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("spacy_maral.fileio.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        convert_file(write(tmp_path, "a.conll", CONLL), out)
    assert out.read_bytes() == b"previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.conll", "train.spacy"]


def test_convert_file_unknown_lang(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="language"):
        convert_file(write(tmp_path, "a.conll", CONLL), tmp_path / "a.spacy", lang="qqq")
    assert not (tmp_path / "a.spacy").exists()


def test_docs_to_conll_refuses_unreadable_tokens() -> None:
    doc = Doc(Vocab(), words=["a", " "], spaces=[True, False])
    with pytest.raises(ValueError, match="token 1"):
        docs_to_conll([doc])
    assert docs_to_conll([]) == ""


LABELS = ["PER", "ORG", "LOC", "MISC", "WORK_OF_ART", "ART-WORK"]
TOKENS = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc"), blacklist_characters=" \t\ufeff"
    ),
    min_size=1,
    max_size=8,
).filter(lambda token: token != "-DOCSTART-")


@st.composite
def iob2_sentences(draw: st.DrawFn) -> List[List[Tuple[str, str]]]:
    """Sentences of (token, valid IOB2 tag)."""
    sentences = []
    for _ in range(draw(st.integers(1, 4))):
        sentence: List[Tuple[str, str]] = []
        previous = "O"
        for _ in range(draw(st.integers(1, 8))):
            kind = draw(st.sampled_from("OBI"))
            label = draw(st.sampled_from(LABELS))
            if kind == "I" and previous[2:] != label:
                kind = "B"
            tag = "O" if kind == "O" else f"{kind}-{label}"
            sentence.append((draw(TOKENS), tag))
            previous = tag
        sentences.append(sentence)
    return sentences


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sentences=iob2_sentences())
def test_round_trip_conll_docbin_conll(
    tmp_path: Path, sentences: List[List[Tuple[str, str]]]
) -> None:
    text = "\n\n".join("\n".join(f"{tok}\t{tag}" for tok, tag in s) for s in sentences) + "\n"
    path = write(tmp_path, "rt.conll", text)
    vocab = Vocab()
    doc_bin = DocBin(store_user_data=False)
    for doc in read_conll(path, fmt="conll", scheme="iob2", strict=True, vocab=vocab):
        doc_bin.add(doc)
    restored = DocBin().from_bytes(doc_bin.to_bytes()).get_docs(Vocab())
    assert docs_to_conll(restored) == text


# ----------------------------------------------------------------------------- CLI


runner = CliRunner()


def test_cli_converts_and_prints_counts(tmp_path: Path) -> None:
    out = tmp_path / "a.spacy"
    result = runner.invoke(app, ["convert", str(write(tmp_path, "a.conll", CONLL)), str(out)])
    assert result.exit_code == 0, result.output
    assert out.exists()
    lines = result.output.splitlines()
    assert any(line.split() == ["sentences", "2", "2"] for line in lines)
    assert any(line.split() == ["tokens", "7", "7"] for line in lines)
    assert any(line.split() == ["PER", "1", "1"] for line in lines)
    assert any(line.split() == ["total", "3", "3"] for line in lines)
    assert "-DOCSTART- documents: 1" in result.output


def test_cli_says_a_plain_text_input_needs_no_conversion(tmp_path: Path) -> None:
    text = write(tmp_path, "de.txt", "Die Telekom will in München 2000 Stellen streichen .\nAngela Merkel besuchte Paris .\n")
    result = runner.invoke(app, ["convert", str(text), str(tmp_path / "de.spacy")])
    assert result.exit_code == 1 and "de.txt, line 2: found 5 columns" in result.output
    assert "if it is plain text, one sentence a line, it needs no conversion" in " ".join(result.output.split())
    broken = write(tmp_path, "bad.conll", "EU B-ORG\nrejects O\n\nGerman B-MISC x O\n")  # CoNLL, one line wrong
    result = runner.invoke(app, ["convert", str(broken), str(tmp_path / "bad.spacy")])
    assert result.exit_code == 1 and "bad.conll, line 4: found 4 columns" in result.output
    assert "plain text" not in result.output


def test_cli_output_directory_and_repairs(tmp_path: Path) -> None:
    text = "".join(f"w{i}\tO\nx{i}\tI-MISC\n\n" for i in range(12))
    src = write(tmp_path, "stray.conll", text)
    result = runner.invoke(app, ["convert", str(src), str(tmp_path), "--scheme", "iob2"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "stray.spacy").exists()
    assert "12 repair" in result.output and "stray.conll, line 2:" in result.output
    assert "and 2 more" in result.output


def test_cli_strict_and_format_options(tmp_path: Path) -> None:
    src = write(tmp_path, "w.txt", "en:a\tB-PER\nen:b\tO\nen:c\tI-LOC\n")
    out = tmp_path / "w.spacy"
    result = runner.invoke(app, ["convert", str(src), str(out), "--format", "wikiann", "--strict"])
    assert result.exit_code == 1
    assert "w.txt, line 3:" in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_cli_bad_input_exits_1_and_keeps_output(tmp_path: Path) -> None:
    src = write(tmp_path, "bad.conll", "EU\tB-ORG\nrejects\tO\tO\n")
    out = tmp_path / "bad.spacy"
    out.write_bytes(b"old")
    result = runner.invoke(app, ["convert", str(src), str(out)])
    assert result.exit_code == 1
    assert "bad.conll, line 2:" in result.output and "columns" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.conll", "bad.spacy"]


def test_cli_rejects_output_that_is_no_spacy_file(tmp_path: Path) -> None:
    src = write(tmp_path, "a.conll", CONLL)
    result = runner.invoke(app, ["convert", str(src), str(tmp_path / "a.json")])
    assert result.exit_code == 2
    assert not (tmp_path / "a.json").exists()


def test_cli_refuses_a_stream_it_would_read_empty(tmp_path: Path) -> None:
    """A stream (a pipe, /dev/stdin) is read up by the sniffing of its format and
    scheme: refused as such, not as 'no sentences found'. /dev/null stands for one."""
    result = runner.invoke(app, ["convert", "/dev/null", str(tmp_path / "a.spacy")])
    assert result.exit_code == 1 and "/dev/null is not a regular file" in result.output and "give --format and --scheme" in result.output
    assert not (tmp_path / "a.spacy").exists()
    # with both given, nothing is sniffed: a stream is read once, and converted
    src = write(tmp_path, "a.conll", CONLL)
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(src.read_bytes()), daemon=True)
    writer.start()
    result = runner.invoke(app, ["convert", str(fifo), str(tmp_path / "a.spacy"), "--format", "conll", "--scheme", "iob2"])
    if writer.is_alive():  # not read: let the writer go
        fifo.read_bytes()
    writer.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a.spacy").is_file()


# ----------------------------------------------------------------------------- shared data


def test_shared_es_test_counts() -> None:
    path = conll_file("es", "test")  # $MARAL_CONLL_DIR/es/test.conll, or a skip
    docs, stats = read(path)
    assert (len(docs), stats.sentences, stats.total_entities) == (1517, 1517, 3559)
    assert (stats.fmt, stats.scheme, stats.documents) == ("conll", "iob2", 0)
    assert len(stats.repairs) == 1 and "'Calidad'" in stats.repairs[0][1]
    with pytest.raises(ConversionError, match=f"line {stats.repairs[0][0]}:"):
        read(path, strict=True)


def test_unwritable_output_is_named_before_the_conversion(tmp_path: Path, monkeypatch) -> None:
    """The output's problem is named after the output, and found before the input is read
    (an input with an error on its last line is never reached)."""
    from spacy_maral.fileio import OutputError

    path = write(tmp_path, "in.conll", "EU\tB-ORG\n\nbad line with too many\tcolumns\tB-PER x\n")
    (tmp_path / "out.spacy").mkdir()
    with pytest.raises(OutputError, match=r"out\.spacy is a folder: give the path of a file"):
        convert_file(path, tmp_path / "out.spacy")
    (tmp_path / "blocked").write_text("a file where a folder should be", encoding="utf8")
    with pytest.raises(OutputError, match=r"blocked/x\.spacy: \S*blocked is a file, not a folder"):
        convert_file(path, tmp_path / "blocked" / "x.spacy")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match=r"dangling/x\.spacy: \S*dangling is a link to nothing"):
        convert_file(path, tmp_path / "dangling" / "x.spacy")
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr("spacy_maral.fileio.os.access", lambda p, mode: Path(p) != locked)
    with pytest.raises(OutputError, match=r"locked/x\.spacy: not writable"):
        convert_file(path, locked / "x.spacy")
    monkeypatch.undo()
    exists = Path.exists

    def unsearchable(self: Path) -> bool:  # what a non-root user meets in a folder without x permission
        if self.name == "hidden":
            raise PermissionError(13, "Permission denied")
        return exists(self)

    monkeypatch.setattr(Path, "exists", unsearchable)
    with pytest.raises(OutputError, match=r"hidden/x\.spacy: \S*hidden can't be looked at \(Permission denied\)"):
        convert_file(path, tmp_path / "hidden" / "x.spacy")
    monkeypatch.undo()
    # a read-only file in a writable folder is replaced, as every output is (atomic writes)
    good = write(tmp_path, "good.conll", "EU\tB-ORG\n")
    (tmp_path / "read-only.spacy").write_bytes(b"old")
    (tmp_path / "read-only.spacy").chmod(0o444)
    monkeypatch.setattr("spacy_maral.fileio.os.access", lambda p, mode: Path(p).name != "read-only.spacy")  # as root too
    convert_file(good, tmp_path / "read-only.spacy")
    assert (tmp_path / "read-only.spacy").read_bytes() != b"old"


def test_convert_memory_per_token_is_bounded(tmp_path: Path) -> None:
    """The DocBin holds only what a CoNLL corpus has (words, spaces, entities): spaCy's
    default 13 token attributes made a conversion's peak about 80x the input file."""
    import tracemalloc

    sentence = "EU\tB-ORG\nrejects\tO\nGerman\tB-MISC\ncall\tO\nto\tO\nboycott\tO\nBritish\tB-MISC\nlamb\tO\n\n"
    path = write(tmp_path, "many.conll", sentence * 6000)
    n_tokens = 8 * 6000
    tracemalloc.start()
    try:
        convert_file(path, tmp_path / "many.spacy")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / n_tokens < 350, f"{peak / n_tokens:.0f} bytes per token at the peak"
    assert [d.text for d in DocBin().from_disk(tmp_path / "many.spacy").get_docs(Vocab())][:1] == [
        "EU rejects German call to boycott British lamb"
    ]


def test_a_token_a_line_file_with_other_tags_is_not_called_plain_text(tmp_path: Path) -> None:
    """IO tags (`Angela PER`), lowercase tags and an empty file got the hint that their
    lines do not end in a tag column and may be plain text."""
    for name, content in (("io.conll", "Angela PER\nMerkel PER\nvisited O\nParis LOC\n"),
                          ("lower.conll", "Angela b-per\nMerkel i-per\nvisited o\n"), ("empty.conll", "")):
        result = runner.invoke(app, ["convert", str(write(tmp_path, name, content)), str(tmp_path / "out.spacy")])
        assert result.exit_code == 1 and "plain text" not in result.output, (name, result.output)


def test_an_output_that_is_neither_a_folder_nor_a_spacy_file_says_what_to_give(tmp_path: Path) -> None:
    """`convert a.conll newdir/` (a folder not made yet) was refused without a way out."""
    result = runner.invoke(app, ["convert", str(write(tmp_path, "a.conll", CONLL)), str(tmp_path / "newdir") + "/"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "make the folder first, or name the file" in said, said
    assert not (tmp_path / "newdir").exists()
