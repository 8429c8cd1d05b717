"""Drive SGLang's ROCm (``is_hip()``) code paths on a CPU box, in a fresh process; print one JSON line.

    python tests/sglang/rocm_probe.py --arch gfx942 --models DIR [--aiter-5d]

Only what cannot exist here is faked: AMD AITER and ``sgl_kernel`` (stand-in packages whose every
name refuses to run; SGLang imports them on ROCm), ``torch.version.hip`` (SGLang's ``is_hip()``), the GPU's
properties, capability and memory (``gcnArchName``, read by ``is_gfx95_supported()``; ``(9, 4)`` /
``(9, 5)``; 192 GiB, which SGLang asks ``rocminfo`` for) and its presence for SGLang's platform resolution (``_is_rocm_available``).  Then SGLang itself resolves ``RocmSRTPlatform``, runs its
plugin loader, resolves server arguments through its ROCm branches (the ``aiter`` default, the
DFLASH draft-backend choice, ``SGLANG_USE_AITER``), builds KV pools under its ROCm flags and calls
the registered backend factory -- for supported target and draft layer geometries and for ones
the backend refuses.  ``--aiter-5d`` starts the process with ``SGLANG_USE_AITER=1`` and
``SGLANG_AITER_KV_CACHE_LAYOUT=vectorized_5d`` (the pool reads them at import).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _StandIn:
    """Any name SGLang imports from a GPU-only package on ROCm: attributes and call results are
    stand-ins too (SGLang builds partials of AITER ops at import); no kernel of these runs here."""

    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(f"{self._path}.{name}")

    def __call__(self, *args, **kwargs):
        return _StandIn(f"{self._path}()")

    def __mro_entries__(self, bases):  # ``class X(stand_in.Base)``
        return (object,)


class _StandInModule(types.ModuleType):
    __path__: list = []  # a package: ``import aiter.x.y`` resolves through the finder below

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StandIn(f"{self.__name__}.{name}")


class _GpuOnlyFinder:
    """Serves AMD AITER and SGLang's ROCm kernel library (``sgl_kernel``), packages that exist only on
    a ROCm GPU build, and their submodules, as stand-ins: SGLang imports them on ROCm."""

    PACKAGES = ("aiter", "sgl_kernel")

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery
        if name.split(".")[0] in self.PACKAGES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandInModule(spec.name)

    def exec_module(self, module):
        pass


def fake_rocm(arch: str) -> None:
    import torch

    sys.meta_path.insert(0, _GpuOnlyFinder())

    torch.version.hip = "7.1.0-stand-in"
    props = types.SimpleNamespace(gcnArchName=f"{arch}:sramecc+:xnack-", name=f"stand-in {arch}",
                                  major=9, minor=int(arch[4]), multi_processor_count=304,
                                  total_memory=192 << 30)
    torch.cuda.get_device_properties = lambda *a, **k: props
    capability = (props.major, props.minor)
    import sglang.srt.platforms as platforms
    platforms._is_rocm_available = lambda: True
    platforms._current_platform = None  # resolved again, on first use, with the GPU present
    import sglang.srt.utils as utils
    import sglang.srt.utils.common as common
    common.get_device_capability = utils.get_device_capability = lambda device_id=0: capability
    common.get_amdgpu_memory_capacity = lambda: 192 * 1024.0  # MiB; SGLang asks rocminfo


def server_args_view(argv, env=None):
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view
    from sglang.srt.server_args import prepare_server_args

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        args = prepare_server_args(argv)
        args.resolve_once()
        view = resolved_view(args)
        return {"attention": list(attention_backends_of(view)),
                "draft": view.speculative_draft_attention_backend}
    except BaseException as exc:  # noqa: BLE001 - argparse exits; record what the host said
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def backends(shapes: dict) -> dict:
    import torch
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    import harness as h

    out = {}
    for name, (shape_kwargs, draft, change) in shapes.items():
        shape = h.Shape(**shape_kwargs)
        try:
            runner = h.make_runner(shape, is_draft=draft, sliding_window=change.get("sliding_window"))
        except Exception as exc:  # noqa: BLE001 - SGLang's own pool refused the geometry
            out[name] = {"pool_error": f"{type(exc).__name__}: {exc}"}
            continue
        if change.get("mla"):
            runner.model_config.attention_arch = AttentionArch.MLA
        if change.get("fp8_pool"):
            runner.token_to_kv_pool = MHATokenToKVPool(
                size=64, page_size=1, dtype=torch.float8_e4m3fn, head_num=shape.num_kv_heads,
                head_dim=shape.head_dim, layer_num=1, device="cpu", enable_memory_saver=False,
                enable_alt_stream=False)
        try:
            backend = h.make_backend("rocm_dflash", runner)
            out[name] = {"backend": type(backend).__name__,
                         "kv_layout": getattr(runner.token_to_kv_pool, "kv_cache_layout", None)}
        except Exception as exc:  # noqa: BLE001 - the start-up refusal
            out[name] = {"error": f"{type(exc).__name__}: {exc}",
                         "kv_layout": getattr(runner.token_to_kv_pool, "kv_cache_layout", None)}
    return out


# name -> (harness.Shape fields, draft runner?, changes)
SHAPES = {
    "qwen3_target_d128_gqa4": (dict(num_q_heads=8, num_kv_heads=2, head_dim=128, dtype="bfloat16"), False, {}),
    "qwen3_draft_d128": (dict(num_q_heads=8, num_kv_heads=2, head_dim=128, dtype="bfloat16"), True, {}),
    "d64_target": (dict(num_q_heads=8, num_kv_heads=1, head_dim=64, dtype="float16"), False, {}),
    "d256_draft": (dict(num_q_heads=4, num_kv_heads=1, head_dim=256, dtype="bfloat16"), True, {}),
    "sliding_window_target": (dict(head_dim=128, dtype="bfloat16"), False, {"sliding_window": 128}),
    "page16_target": (dict(head_dim=128, page_size=16, dtype="bfloat16"), False, {}),
    "mla": (dict(head_dim=128, dtype="bfloat16"), False, {"mla": True}),
    "fp8_kv_pool": (dict(head_dim=128, dtype="bfloat16"), False, {"fp8_pool": True}),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", required=True)
    p.add_argument("--models", required=True, help="a directory with target/ and draft/ config.json")
    p.add_argument("--aiter-5d", action="store_true")
    a = p.parse_args(argv)
    if a.aiter_5d:
        os.environ.update(SGLANG_USE_AITER="1", SGLANG_AITER_KV_CACHE_LAYOUT="vectorized_5d")
    fake_rocm(a.arch)
    sys.path.insert(0, str(HERE))

    from sglang.srt.platforms import current_platform
    from sglang.srt.runtime_context import get_platform
    from sglang.srt.utils.common import is_gfx95_supported, is_hip

    rec = {"platform": type(current_platform).__name__, "is_hip": bool(get_platform().is_hip and is_hip()),
           "gfx95": is_gfx95_supported()}

    # Without the plugin loaded, as an SGLang process sees it before load_plugins().
    target, draft = f"{a.models}/target", f"{a.models}/draft"
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft]
    base = ["--model-path", target, "--device", "cuda"]
    rec["before_plugins"] = server_args_view(base + ["--attention-backend", "rocm_dflash"] + dflash)

    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.runtime_context import get_context, get_parallel
    get_parallel().override_permanently(attn_tp_size=1, attn_dcp_rank=0)
    get_context().override_server_args().install()

    rec["args"] = {
        "rocm_dflash_with_dflash": server_args_view(base + ["--attention-backend", "rocm_dflash"] + dflash),
        "rocm_dflash_plain": server_args_view(base + ["--attention-backend", "rocm_dflash"]),
        "host_default_with_dflash": server_args_view(base + dflash),
        "aiter_target_rocm_dflash_draft": server_args_view(
            base + ["--attention-backend", "aiter", "--speculative-draft-attention-backend", "rocm_dflash"] + dflash),
        "rocm_dflash_with_dflash_use_aiter": server_args_view(
            base + ["--attention-backend", "rocm_dflash"] + dflash, {"SGLANG_USE_AITER": "1"}),
    }
    import torch
    shapes = {name: ({**kw, "dtype": getattr(torch, kw.get("dtype", "float32"))}, d, c)
              for name, (kw, d, c) in SHAPES.items()}
    rec["backends"] = backends(shapes)
    from dflash_rocm_plugin import hostfix
    rec["fixes"] = {s.id: s.status.value for s in hostfix.statuses("sglang")}
    print("PROBE " + json.dumps(rec))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
