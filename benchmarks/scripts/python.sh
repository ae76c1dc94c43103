# Sourced by the benchmark shell scripts (bash): sets PY, the Python they run. A PY the
# caller set is kept (made absolute where it is a relative path, as the scripts change
# directory); otherwise the repository's .venv when it has one, else python3. Paths are
# built with cd/pwd (CDPATH off), not realpath: realpath resolves the venv's python link
# to the base interpreter, which runs without the venv's packages.
if [ -n "${PY:-}" ]; then
  case $PY in
    /*) ;;
    */*) PY="$(CDPATH='' cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" ;;
  esac
else
  PY="$(CDPATH='' cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python"
  [ -x "$PY" ] || PY=python3
fi
