"""Peer kernels, imported at run time from downloaded sources (``benchmarks/get_peers.sh``).

Nothing of the peers is part of this package: each loader reads the peer's own ``.py`` files from
the folder given with ``--peers`` and supplies, through small stand-in modules, only what those
files import from their host packages (logging, platform queries, an enum).  AMD-only launch
options (``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack``) are stripped from AITER's source
so its configs launch on NVIDIA.  Every peer gets the same Q and the same K/V values; where a
peer needs another cache layout (vLLM's ``prefix_prefill``) or dense tensors (SDPA), the copy is
made once outside timing.  Each peer returns ``prepare(case) -> (calls, output_of_copy0)``.
"""

from __future__ import annotations

import enum
import importlib.util
import logging
import pathlib
import re
import sys
import tempfile
import types

import torch
import triton
import triton.language as tl

from dflash_rocm_plugin.bench import inputs


def _module(name: str, **attrs) -> types.ModuleType:
    mod = sys.modules.get(name) or types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _package(name: str, path=None) -> types.ModuleType:
    mod = _module(name)
    mod.__path__ = [str(path)] if path else []
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


def _load(name: str, path: pathlib.Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Logger(logging.LoggerAdapter):
    def debug_once(self, *a, **k):
        pass

    def info_once(self, *a, **k):
        pass

    def warning_once(self, *a, **k):
        pass


class _Platform:
    """What vLLM's attention ops ask of ``current_platform`` (CUDA-only answers)."""

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def is_rocm(self):
        return False

    def is_cuda(self):
        return True

    def get_device_capability(self, device_id=0):
        # (9, 0) without a GPU: only the CPU smoke run of the bench takes that branch.
        return torch.cuda.get_device_capability(device_id) if torch.cuda.is_available() else (9, 0)

    def has_device_capability(self, cap, device_id=0):
        major, minor = self.get_device_capability(device_id)
        return major * 10 + minor >= (cap if isinstance(cap, int) else cap[0] * 10 + cap[1])

    def is_device_capability_family(self, cap, device_id=0):
        return self.get_device_capability(device_id)[0] == cap // 10


class KVQuantMode(enum.IntEnum):
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4


def _vllm_stubs() -> None:
    if "vllm.triton_utils" in sys.modules:
        return
    for name in ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops"):
        _package(name)
    _module("vllm.envs", VLLM_BATCH_INVARIANT=False)
    _module("vllm.logger", init_logger=lambda n: _Logger(logging.getLogger(n), {}))
    _module("vllm.platforms", current_platform=_Platform())
    _module("vllm.triton_utils", tl=tl, triton=triton)
    _module("vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode)
    sys.modules["vllm"].envs = sys.modules["vllm.envs"]


def _ones(device):
    return torch.ones(1, dtype=torch.float32, device=device)


# --------------------------------------------------------------------------- vLLM unified attention
def vllm_unified(root: pathlib.Path):
    _vllm_stubs()
    ops = root / "vllm" / "v1" / "attention" / "ops"
    _load("vllm.v1.attention.ops.triton_attention_helpers", ops / "triton_attention_helpers.py")
    mod = _load("vllm.v1.attention.ops.triton_unified_attention", ops / "triton_unified_attention.py")

    def prepare(case: inputs.Case):
        s = case.shape
        one = _ones(case.q.device)
        outs = [torch.empty_like(case.q) for _ in case.block_tables]
        # As vLLM's TRITON_ATTN passes them: (W - 1, 0) causal; fp8 caches with per-tensor descales.
        window = (-1, -1) if s.window is None else (s.window - 1, 0 if s.causal else s.window - 1)
        fp8 = case.k_scale is not None
        descale = dict(k_descale=case.k_scale.expand(s.batch, s.heads[1]) if fp8 else one,
                       v_descale=case.v_scale.expand(s.batch, s.heads[1]) if fp8 else one)
        quant = {"kv_quant_mode": KVQuantMode.FP8_PER_TENSOR} if fp8 else {}

        def call(i):
            return lambda: mod.unified_attention(
                q=case.q, k=case.k_cache, v=case.v_cache, out=outs[i],
                cu_seqlens_q=case.query_start_loc, max_seqlen_q=s.q_len, seqused_k=case.seq_lens,
                max_seqlen_k=s.context, softmax_scale=case.scale, causal=s.causal,
                window_size=window, block_table=case.block_tables[i], softcap=0.0,
                q_descale=None, sinks=case.sinks, **descale, **quant)
        return [call(i) for i in range(case.copies)], outs[0]
    return prepare


# ------------------------------------------------------------- vLLM prefix_prefill (ROCM_ATTN path)
def vllm_prefix_prefill(root: pathlib.Path):
    _vllm_stubs()
    mod = _load("vllm.v1.attention.ops.prefix_prefill",
                root / "vllm" / "v1" / "attention" / "ops" / "prefix_prefill.py")

    def prepare(case: inputs.Case):
        s = case.shape
        hq, hkv, d = s.heads
        x = 16 // case.k_cache.element_size()
        nb, page = case.k_cache.shape[:2]
        # Its paged layout: K [blocks, Hkv, D/x, page, x], V [blocks, Hkv, D, page].
        k5 = case.k_cache.view(nb, page, hkv, d // x, x).permute(0, 2, 3, 1, 4).contiguous()
        v4 = case.v_cache.permute(0, 2, 3, 1).contiguous()
        one = _ones(case.q.device)
        outs = [torch.empty_like(case.q) for _ in case.block_tables]
        # This step's K/V (the last q_len keys of each sequence) as the dense "new" tokens.
        news = []
        for table in case.block_tables:
            keys = torch.arange(s.context - s.q_len, s.context, device=table.device)
            pages = table.long()[:, keys // page]
            news.append((case.k_cache[pages, keys % page].reshape(-1, hkv, d).contiguous(),
                         case.v_cache[pages, keys % page].reshape(-1, hkv, d).contiguous()))

        def call(i):
            return lambda: mod.context_attention_fwd(
                q=case.q, k=news[i][0], v=news[i][1], o=outs[i], kv_cache_dtype="auto",
                k_cache=k5, v_cache=v4, b_loc=case.block_tables[i], b_start_loc=case.query_start_loc,
                b_seq_len=case.seq_lens, max_seq_len=s.context, max_input_len=s.q_len,
                k_scale=one, v_scale=one, sm_scale=case.scale, causal=s.causal)
        return [call(i) for i in range(case.copies)], outs[0]
    return prepare


# ----------------------------------------------------------------------- SGLang extend attention
def sglang_extend(root: pathlib.Path):
    if "sglang.srt.utils" not in sys.modules:
        for name in ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.ops",
                     "sglang.kernels.ops.attention"):
            _package(name)

        class _Flag:
            def __init__(self, v):
                self.v = v

            def get(self):
                return self.v

        class _Envs:
            def __getattr__(self, name):
                return _Flag(False)

        _module("sglang.srt.environ", envs=_Envs())
        _module("sglang.srt.utils", is_cuda=torch.cuda.is_available, is_hip=lambda: False,
                is_gfx95_supported=lambda: False, is_gfx1250_supported=lambda: False)
    att = root / "sglang" / "kernels" / "ops" / "attention"
    _load("sglang.kernels.ops.attention.score_mod", att / "score_mod.py")
    # decode_attention imports more host helpers than the one function extend_attention needs.
    _module("sglang.kernels.ops.attention.decode_attention",
            _extract_kv_strides=_sglang_kv_strides)
    mod = _load("sglang.kernels.ops.attention.extend_attention", att / "extend_attention.py")

    def prepare(case: inputs.Case):
        s = case.shape
        hq, hkv, d = s.heads
        nb, page = case.k_cache.shape[:2]
        # SGLang's token pool: [slots, Hkv, D] with slot = block * page + offset (same bytes).
        k_buf = case.k_cache.view(nb * page, hkv, d)
        v_buf = case.v_cache.view(nb * page, hkv, d)
        prefix = s.context - s.q_len
        dev = case.q.device
        kv_indptr = torch.arange(0, (s.batch + 1) * prefix, prefix, dtype=torch.int32, device=dev)
        outs = [torch.empty_like(case.q) for _ in case.block_tables]
        per_copy = []
        for table in case.block_tables:
            keys = torch.arange(s.context, device=dev)
            slots = (table.long()[:, keys // page] * page + keys % page)      # [B, ctx]
            idx = slots[:, :prefix].reshape(-1).contiguous()
            new = slots[:, prefix:].reshape(-1)
            per_copy.append((idx, k_buf[new].contiguous(), v_buf[new].contiguous()))

        def call(i):
            idx, k_new, v_new = per_copy[i]
            return lambda: mod.extend_attention_fwd(
                case.q, k_new, v_new, outs[i], k_buf, v_buf, case.query_start_loc, kv_indptr, idx,
                None, s.causal, None, s.q_len, 1.0, 1.0, sm_scale=case.scale)
        return [call(i) for i in range(case.copies)], outs[0]
    return prepare


def _sglang_kv_strides(buf, page_size):
    # Same contract as SGLang's decode_attention._extract_kv_strides.
    slot, head = buf.stride(0), buf.stride(1)
    return slot, head, slot * page_size, slot


# ------------------------------------------------------------- AITER flash_attn_with_kvcache
_AMD_ONLY = re.compile(r'"(waves_per_eu|matrix_instr_nonkdim|kpack)"\s*:\s*[\w.]+\s*,?')


def aiter_kvcache(root: pathlib.Path):
    src = root / "aiter" / "flash_attn_triton_amd"
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is missing (run benchmarks/get_peers.sh with an AITER git dir)")
    import os
    os.environ.setdefault("FLASH_ATTENTION_TRITON_AMD_AUTOTUNE", "0")
    dst = pathlib.Path(tempfile.mkdtemp(prefix="aiter_fa_")) / "aiter_fa"
    dst.mkdir()
    for f in src.glob("*.py"):
        text = f.read_text()
        if f.name == "__init__.py":
            text = ""  # import the forward interface alone
        elif f.name == "bwd.py":
            # Only the forward is timed; the backward's autotune keys name an argument its
            # kernel lacks, which newer Triton rejects at import.
            text = "def attention_backward_triton_impl(*args, **kwargs):\n    raise NotImplementedError\n"
        (dst / f.name).write_text(_AMD_ONLY.sub("", text))
    _package("aiter_fa", dst)
    fa3 = importlib.import_module("aiter_fa.interface_v3")

    def prepare(case: inputs.Case):
        s = case.shape
        hq, hkv, d = s.heads
        q4 = case.q.view(s.batch, s.q_len, hq, d)
        outs = [None] * case.copies

        def call(i):
            def run():
                out, *_ = fa3.fwd(
                    q4, case.k_cache, case.v_cache, None, None, None, None, None, None, None, None,
                    case.seq_lens, s.q_len, None, case.block_tables[i], None, None, None, None, None,
                    None, None, None, case.scale, s.causal, -1, -1, 0, 0.0, False, None, 1, None, 0)
                outs[i] = out
            return run
        calls = [call(i) for i in range(case.copies)]
        calls[0]()
        return calls, _Lazy(outs)
    return prepare


class _Lazy:
    """The output a peer allocates per call: read after the call ran."""

    def __init__(self, outs):
        self.outs = outs

    def get(self):
        return self.outs[0].reshape(-1, *self.outs[0].shape[-2:])


# ---------------------------------------------------------------------- torch SDPA, dense, unpaged
def _fold_gqa(case: inputs.Case) -> torch.Tensor:
    """Q as [B, KV heads, q_len x G, D]: the q_len x G rows of a KV head form one query block over
    that head's keys (undone by ``_unfold_gqa``)."""
    s = case.shape
    hq, hkv, d = s.heads
    return case.q.view(s.batch, s.q_len, hkv, hq // hkv, d).permute(0, 2, 1, 3, 4).reshape(
        s.batch, hkv, s.q_len * (hq // hkv), d)


def _unfold_gqa(case: inputs.Case, o: torch.Tensor) -> torch.Tensor:
    s = case.shape
    hq, hkv, d = s.heads
    return o.view(s.batch, hkv, s.q_len, hq // hkv, d).permute(0, 2, 1, 3, 4).reshape(s.batch * s.q_len, hq, d)


def torch_sdpa(root: pathlib.Path):
    import torch.nn.functional as F

    def prepare(case: inputs.Case):
        s = case.shape
        g = s.heads[0] // s.heads[1]
        dense = [inputs.dense_kv(case, i) for i in range(case.copies)]
        qf = _fold_gqa(case)
        mask = None
        if s.causal:
            pos = s.context - s.q_len + torch.arange(s.q_len, device=qf.device).repeat_interleave(g)
            mask = torch.arange(s.context, device=qf.device)[None, :] <= pos[:, None]
        outs = [None] * case.copies

        def call(i):
            def run():
                outs[i] = F.scaled_dot_product_attention(qf, dense[i][0], dense[i][1], attn_mask=mask,
                                                         scale=case.scale)
            return run

        calls = [call(i) for i in range(case.copies)]
        calls[0]()
        lazy = _Lazy(outs)
        lazy.get = lambda: _unfold_gqa(case, outs[0])
        return calls, lazy
    return prepare


def sdpa_pinned(backend_name: str):
    """torch SDPA on one pinned backend (FLASH_ATTENTION: FlashAttention-2; CUDNN_ATTENTION), each
    call in the layout that backend runs fastest without a general mask: GQA folded into the query
    rows where no mask is needed (non-causal, or one query), else per query head with a causal mask
    aligned to the last key (``is_causal`` when q = context) and native GQA.  A backend that refuses
    the shape raises, and the bench reports the row as failed."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    backend = getattr(SDPBackend, backend_name)

    def loader(root: pathlib.Path):
        def prepare(case: inputs.Case):
            s = case.shape
            hq, hkv, d = s.heads
            g = hq // hkv
            dense = [inputs.dense_kv(case, i) for i in range(case.copies)]
            folded = not s.causal or s.q_len == 1
            if folded:
                q, extra = _fold_gqa(case), {}
            else:
                q = case.q.view(s.batch, s.q_len, hq, d).transpose(1, 2).contiguous()
                extra = ({"is_causal": True} if s.q_len == s.context
                         else {"attn_mask": causal_lower_right(s.q_len, s.context)})
                extra["enable_gqa"] = g > 1
            outs = [None] * case.copies

            def call(i):
                def run():
                    with sdpa_kernel([backend]):
                        outs[i] = F.scaled_dot_product_attention(q, dense[i][0], dense[i][1], scale=case.scale,
                                                                 **extra)
                return run

            def unfold():
                if folded:
                    return _unfold_gqa(case, outs[0])
                return outs[0].transpose(1, 2).reshape(s.batch * s.q_len, hq, d)
            calls = [call(i) for i in range(case.copies)]
            try:
                calls[0]()
            except RuntimeError:
                if not extra.get("enable_gqa"):
                    raise
                # This backend takes no native GQA here: the KV heads repeated for it, outside timing.
                extra.pop("enable_gqa")
                dense[:] = [(k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)) for k, v in dense]
                calls[0]()
            lazy = _Lazy(outs)
            lazy.get = unfold
            return calls, lazy
        return prepare
    return loader


PEERS = {
    "vllm_unified": ("vLLM 0.33 triton unified_attention", vllm_unified),
    "vllm_prefix_prefill": ("vLLM 0.33 prefix_prefill.context_attention_fwd", vllm_prefix_prefill),
    "sglang_extend": ("SGLang 0.5.23 extend_attention_fwd", sglang_extend),
    "aiter_kvcache": ("AITER flash_attn_with_kvcache (Triton, AMD options stripped)", aiter_kvcache),
    "torch_sdpa": ("torch SDPA, dense unpaged copy, GQA folded", torch_sdpa),
    "sdpa_flash": ("torch SDPA pinned to FlashAttention-2, dense unpaged copy", sdpa_pinned("FLASH_ATTENTION")),
    "sdpa_cudnn": ("torch SDPA pinned to cuDNN attention, dense unpaged copy", sdpa_pinned("CUDNN_ATTENTION")),
}
TRITON_PEERS = ("vllm_unified", "vllm_prefix_prefill", "sglang_extend", "aiter_kvcache")
# Peers timed on shapes with an fp8 cache, a sliding window or sinks (vLLM's unified attention takes all three).
FEATURE_PEERS = ("vllm_unified",)


def load(root, names=None) -> dict:
    """name -> (description, prepare or an error string)."""
    root = pathlib.Path(root)
    loaded = {}
    for name in names or PEERS:
        desc, loader = PEERS[name]
        try:
            loaded[name] = (desc, loader(root))
        except Exception as exc:  # a peer that cannot load is reported, not fatal
            loaded[name] = (desc, f"{type(exc).__name__}: {exc}")
    return loaded


def version_of(root, name) -> str:
    folder = {"vllm_unified": "vllm", "vllm_prefix_prefill": "vllm", "sglang_extend": "sglang",
              "aiter_kvcache": "aiter"}.get(name)
    if folder is None:
        return f"torch {torch.__version__}"
    f = pathlib.Path(root) / folder / "VERSION"
    return f.read_text().strip() if f.exists() else "unknown"
