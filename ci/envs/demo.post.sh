# The independent DFlash reference (MIT, z-lab).  Its declared deps (datasets, requests, tqdm pins) are
# only for its benchmark module; the model module needs torch + transformers, already installed.
set -euo pipefail
python -m pip -q install --no-deps dflash==0.1.0
python -c "import dflash.model" 
