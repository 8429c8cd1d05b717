# PyPI's torchvision/torchaudio/torchcodec are CUDA builds whose native libraries fail to load on a
# GPU-less machine and break `import transformers` / `import vllm.v1...`; the text-only tests need none.
python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
