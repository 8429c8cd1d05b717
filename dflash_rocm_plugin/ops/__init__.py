"""The framework-free contract both hosts call, and the only face of this floor.

Calls (arguments checked before any launch; ``ValueError`` naming the argument)::

    paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, *, causal, ...)
    write_kv_cache(key, value, k_cache, v_cache, slot_mapping)
    greedy_sample(logits, out=None)

What is supported, and why not: ``supports(AttentionSpec(...))`` answers None or the reason;
``require`` raises ``Unsupported`` with it; ``features_problem``, ``kv_cache_dtype_problem`` and
``v_head_dim_problem`` answer for one fact each (adapters word their own refusals with them);
``platform_problem()`` says why no kernel can run here.  fp8 on a GPU: ``native_fp8_dtype(arch)`` is the
cache format it converts in hardware, ``has_fp8_dots(arch)`` whether it multiplies fp8 operands (then Q K^T
over such a cache takes q as two fp8 parts), ``splits_p_for_fp8_dots(arch)`` whether P V may too, with P as
two fp8 parts (gfx94x), ``fp8_dots_problem(mode, arch)`` why a forced ``fp8_dots`` mode cannot run there;
``fp8_qk_policy()`` which calls round q into fp8 instead (``DFLASH_ROCM_FP8_QK``: off, draft, all).
What a call would run: ``describe_launch(...)``; which ``fp8_dots`` it may run: ``fp8_dots_choices(...)``
(``FP8_ROUNDING_DOTS``: those that round q or P into fp8, at ten times the error);
and whether its keys may be split at all:
``may_split_keys(...)``; which backend serves each op: ``kernel_paths()``; whether AMD AITER may serve calls of
a configuration on a GPU architecture: ``aiter_may_serve(arch, ...)``.
Workspace: ``workspace_floats(...)`` sizes the caller-owned split-KV scratch; ``MAX_KV_SPLITS`` is the most
splits a call may take (``paged_attention(num_kv_splits=)``).
Tuned launches (``dflash-rocm tune``): ``tuned_configs()`` says which files are in force;
``tuned_sources(...)`` limits them within a block; ``tuned_bucket``, ``tuned_document``,
``read_tuned_file`` and ``tuned_user_path`` are the file's keys, writer, reader and default place.

Kernels are imported on first use, so ``TRITON_INTERPRET`` may be set late.
"""

from dflash_rocm_plugin.ops._runtime import gpu_arch, interpreting, is_rocm as on_rocm
from dflash_rocm_plugin.ops._runtime import triton_problem as platform_problem
from dflash_rocm_plugin.ops._runtime import use_interpreter_without_gpu
from dflash_rocm_plugin.ops.attention import paged_attention
from dflash_rocm_plugin.ops.backends import AiterUnavailable
from dflash_rocm_plugin.ops.backends.aiter import serves_on as aiter_may_serve
from dflash_rocm_plugin.ops.backends import status as kernel_paths
from dflash_rocm_plugin.ops.kv_cache import write_kv_cache
from dflash_rocm_plugin.ops.launch_config import FP8_ROUNDING_MODES as FP8_ROUNDING_DOTS
from dflash_rocm_plugin.ops.extend_launch import ExtendLaunch, forced_extend
from dflash_rocm_plugin.ops.launch_config import may_split as may_split_keys
from dflash_rocm_plugin.ops.launch_config import takes_inline_ptx
from dflash_rocm_plugin.ops.plan import (
    AttentionLaunch,
    LaunchDescription,
    describe_launch,
    forced_launch,
    fp8_dots_choices,
    workspace_floats,
)
from dflash_rocm_plugin.ops.sampling import greedy_sample
from dflash_rocm_plugin.ops.workspace import MAX_SPLITS as MAX_KV_SPLITS
from dflash_rocm_plugin.ops.tuned import ENV as TUNED_CONFIGS_ENV
from dflash_rocm_plugin.ops.tuned import in_force as tuned_configs
from dflash_rocm_plugin.ops.tuned import document as tuned_document
from dflash_rocm_plugin.ops.tuned import only as tuned_sources
from dflash_rocm_plugin.ops.tuned import read as read_tuned_file
from dflash_rocm_plugin.ops.tuned import user_path as tuned_user_path
from dflash_rocm_plugin.ops.tuned_file import LAUNCH_FIELDS as TUNED_LAUNCH_FIELDS
from dflash_rocm_plugin.ops.tuned_file import DENSE_FIELDS as TUNED_DENSE_FIELDS
from dflash_rocm_plugin.ops.tuned_file import OPTIONAL_LAUNCH_FIELDS as TUNED_OPTIONAL_LAUNCH_FIELDS
from dflash_rocm_plugin.ops.tuned_file import bucket as tuned_bucket
from dflash_rocm_plugin.ops.support import (
    DTYPES,
    FP8_KV_CACHE_DTYPES,
    FP8_QK_CHOICES,
    FP8_QK_ENV,
    HEAD_DIMS,
    KV_CACHE_DTYPES,
    UNSUPPORTED_FEATURES,
    AttentionSpec,
    Unsupported,
    features_problem,
    fp8_dots_problem,
    fp8_qk_covers,
    fp8_qk_policy,
    has_fp8_dots,
    kv_cache_dtype_problem,
    native_fp8_dtype,
    require,
    splits_p_for_fp8_dots,
    supports,
    v_head_dim_problem,
)

__all__ = [
    "paged_attention", "write_kv_cache", "greedy_sample",
    "AttentionSpec", "supports", "require", "features_problem",
    "kv_cache_dtype_problem", "v_head_dim_problem", "Unsupported", "HEAD_DIMS", "DTYPES", "KV_CACHE_DTYPES",
    "FP8_KV_CACHE_DTYPES", "UNSUPPORTED_FEATURES", "native_fp8_dtype", "has_fp8_dots",
    "splits_p_for_fp8_dots", "fp8_dots_problem", "fp8_qk_policy", "fp8_qk_covers", "FP8_QK_ENV", "FP8_QK_CHOICES",
    "platform_problem", "on_rocm", "gpu_arch", "interpreting", "use_interpreter_without_gpu",
    "describe_launch", "fp8_dots_choices", "FP8_ROUNDING_DOTS", "may_split_keys", "takes_inline_ptx",
    "LaunchDescription", "AttentionLaunch", "forced_launch",
    "ExtendLaunch", "forced_extend", "workspace_floats",
    "MAX_KV_SPLITS",
    "kernel_paths", "aiter_may_serve", "AiterUnavailable",
    "tuned_configs", "tuned_sources", "tuned_bucket", "tuned_document", "read_tuned_file", "tuned_user_path",
    "TUNED_CONFIGS_ENV", "TUNED_LAUNCH_FIELDS", "TUNED_OPTIONAL_LAUNCH_FIELDS", "TUNED_DENSE_FIELDS",
]

