"""Reading benchmarks/results/ (one file per claim) and the number formats of its tables,
shared by tables.py and seed_tables.py."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def signed(x: float) -> str:
    """"+1.41": a difference with its sign, two decimals."""
    return f"{x:+.2f}"


def interval(x: dict, key: str = "ci95") -> str:
    """"+1.41 [-0.47, +3.36]": a difference and its 95% interval (under `key`; the final
    runs' own results files name it difference_95ci)."""
    return f"{signed(x['difference'])} [{signed(x[key][0])}, {signed(x[key][1])}]"


def bootstrap_of(result: dict, seed: int, lang: str, a: str, b: str) -> dict:
    """The paired bootstrap of `a` minus `b` at `seed` on `lang` among a results file's
    "bootstraps"."""
    for x in result["bootstraps"]:
        if (x["seed"], x["lang"], x["a"], x["b"]) == (seed, lang, a, b):
            return x
    raise ValueError(f"no bootstrap {a} - {b} for seed {seed}, {lang}")


def load_result(claim: str) -> dict:
    path = RESULTS / f"{claim}.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist (table {claim})")
    return json.loads(path.read_text(encoding="utf8"))
