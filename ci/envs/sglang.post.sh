# Runs inside the activated sglang venv.  sglang's own requirements pin CUDA-only wheels
# (sglang-kernel, flashinfer); its Python code imports fine without them on CPU.
set -euo pipefail
python -m pip install -q --no-deps sglang==0.5.23
python - <<'PY'
import sglang
assert sglang.__version__ == "0.5.23", sglang.__version__
PY
