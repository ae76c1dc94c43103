# Sourced by the benchmark shell scripts: sets PY, the Python they run, unless the caller
# set it: the repository's .venv when it has one, else python3. The path is built with
# cd/pwd, not realpath: realpath resolves the venv's python link to the base interpreter,
# which runs without the venv's packages.
if [ -z "${PY:-}" ]; then
  if [ -x "$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python" ]; then
    PY="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.venv/bin/python"
  else
    PY=python3
  fi
fi
