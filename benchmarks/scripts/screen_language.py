"""Screen what ships for one language on its dev set: the teacher, the student, and the
interpolations of their weights (WiSE-FT), each scored on the raw text against the
teacher with a paired bootstrap; the guard's tag-free figures beside them; the ECE of
each at its stored temperature and at the tag-free temperature rule.

    python benchmarks/scripts/screen_language.py OUT.json PROJECT LANG DEV.conll [--alphas 0.25,0.5,0.75]

PROJECT is a finished workflow folder (training/teacher/model-best,
training/student-LANG/model, metrics/LANG-guard.json, corpus/LANG-pseudo). The
interpolations are written to PROJECT/screen/LANG-wise-A (git-ignored build outputs).
Reads only the dev set given: no test set.
"""
import json
import subprocess
import sys
from pathlib import Path

from paired_bootstrap import difference

from spacy_maral.cli.evaluate import per_sentence_path

PY = [sys.executable, "-m", "spacy_maral"]


def run(argv) -> None:
    print("$", " ".join(str(a) for a in argv), flush=True)
    subprocess.run([str(a) for a in argv], check=True)


def main(argv) -> None:
    alphas = [0.25, 0.5, 0.75]
    if "--alphas" in argv:
        i = argv.index("--alphas")
        alphas = [float(a) for a in argv[i + 1].split(",")]
        argv = argv[:i] + argv[i + 2:]
    out, project, lang, dev = Path(argv[0]), Path(argv[1]), argv[2], Path(argv[3])
    teacher, student = project / "training/teacher/model-best", project / f"training/student-{lang}/model"
    models = {"teacher": teacher, "student": student}
    for a in alphas:
        path = project / "screen" / f"{lang}-wise-{a:g}"
        if not (path / "config.cfg").exists():
            run(PY + ["average", teacher, student, "--weights", f"{1 - a:g},{a:g}", "--output", path])
        models[f"wise-{a:g}"] = path
    metrics = project / "screen" / f"{lang}-dev.json"
    if not metrics.exists():
        run(PY + ["evaluate", dev, *[f"{n}={p}" for n, p in models.items()], "--lang", lang, "--output", metrics])
    results = json.loads(metrics.read_text())["results"]
    counts = json.loads(per_sentence_path(metrics).read_text())["raw_text"]
    guard = json.loads((project / "metrics" / f"{lang}-guard.json").read_text())
    table = {}
    for name in models:
        raw = results[name]["raw_text"]
        row = {"f1": round(100 * raw["ents_f"], 2), "ece": raw.get("calibration", {}).get("ece")}
        if name != "teacher":
            row["vs_teacher"] = difference(counts, name, "teacher")
        table[name] = row
    summary = {"lang": lang, "dev": str(dev.name), "sentences": len(counts["teacher"]), "models": table,
               "guard": {k: v for k, v in guard.items() if k not in ("teacher", "student", "chosen_path")}}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
