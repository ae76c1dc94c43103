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


def load_result(claim: str) -> dict:
    path = RESULTS / f"{claim}.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist (table {claim})")
    return json.loads(path.read_text(encoding="utf8"))
