"""benchmarks/scripts/python.sh: the Python the benchmark shell scripts run."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent


def sourced_py(cwd: Path, env: dict) -> str:
    """$PY after sourcing python.sh from `cwd`, the script named by a relative path."""
    script = Path("rel") / "benchmarks" / "scripts" / "python.sh"
    (cwd / "rel").symlink_to(REPO)
    return subprocess.run(["bash", "-c", f'. "{script}"; printf %s "$PY"'], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="no .venv in this checkout")
def test_the_repository_venv_with_its_packages(tmp_path) -> None:
    py = sourced_py(tmp_path, {"PATH": "/usr/bin:/bin"})
    assert Path(py).is_absolute()
    # the venv's interpreter, not the base one its link resolves to: spacy_maral imports
    prefix = subprocess.run([py, "-c", "import sys, spacy_maral; print(sys.prefix)"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert Path(prefix) == (tmp_path / "rel" / ".venv").absolute()


def test_the_callers_py_wins_made_absolute(tmp_path) -> None:
    assert sourced_py(tmp_path, {"PATH": "/usr/bin:/bin", "PY": sys.executable}) == sys.executable
    (tmp_path / "c" / "bin").mkdir(parents=True)
    # a relative PY stays right after the scripts change directory; CDPATH (here: / has a
    # bin/ too) does not send it elsewhere
    py = sourced_py(tmp_path / "c", {"PATH": "/usr/bin:/bin", "PY": "bin/python", "CDPATH": "/"})
    assert py == str((tmp_path / "c" / "bin" / "python").absolute())
