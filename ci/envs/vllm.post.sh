# vllm 0.34.0 without pip's resolver, then every requirement it declares except the ones PyPI cannot
# provide (flashinfer-python==0.7.3 was never uploaded there; the adapter suite does not use it).
set -euo pipefail
python -m pip install -q --no-deps vllm==0.34.0
python - <<'PY' > "$VIRTUAL_ENV/vllm-requirements.txt"
from importlib.metadata import requires
from packaging.requirements import Requirement
UNAVAILABLE = {"flashinfer-python"}
for line in requires("vllm"):
    req = Requirement(line)
    if req.name not in UNAVAILABLE and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(line)
PY
python -m pip install -q -r "$VIRTUAL_ENV/vllm-requirements.txt"
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds whose native libraries fail to load on a
# GPU-less machine and break `import transformers` / `import vllm.v1...`; the text-only tests need none.
python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
