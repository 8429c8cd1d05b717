"""DFlash speculative decoding on AMD GPUs: the ``rocm_dflash`` attention backend for vLLM and SGLang.

Layers, arrows pointing down only:
  vllm/, sglang/   thin host adapters (registration, metadata translation, host fixes)
  ops/             the framework-free API: paged_attention, write_kv_cache, greedy_sample
  kernels/         Triton
"""

__version__ = "0.1.0"
BACKEND_NAME = "rocm_dflash"
