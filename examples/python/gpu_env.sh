# Sourced by h200.sh and h200_python.sh (needs HERE = this folder, LIB = the
# plug-in library): the environment every run on the GPU machine shares.
export GCPRESSURE_TORCH_LIB=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
# tests/h200_compat: numpy.row_stack for numba-cuda's compiler there (its sitecustomize.py says
# why); on PYTHONPATH for every run, with and without gcpressure alike.
export PYTHONPATH=$HERE:$HERE/tests/h200_compat${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The interpreter that has CuPy ($PYTHON if set; the machine's venvs otherwise).
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3 /opt/torch/.venv/bin/python3 /opt/*/.venv/bin/python3 /opt/*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import cupy" >/dev/null 2>&1; then PY=$cand; break; fi
  done
fi
PY=${PY:-python3}
