"""One bucket's bench: its inputs and float32 reference, and one candidate launch checked, then timed.

A candidate is a backend (``auto``: the default policy, ``triton``, ``aiter``) and, for Triton, every
tunable launch field forced (``ops.forced_launch``), so neither the chooser's rules nor a tuned file
decide what runs.  Its output, written over NaN, must match the reference before it is timed; a
candidate that fails to compile, raises or is wrong is recorded with the reason and never wins.
Timing is injectable (``Timer``): on a GPU, the median of graph replays and of single calls after
a cache flush (``bench.timing``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs, timing
from dflash_rocm_plugin.tune.space import TuneShape

MAX_SPLITS = ops.MAX_KV_SPLITS


@dataclasses.dataclass(frozen=True)
class Candidate:
    label: str
    backend: str                 # "auto" | "triton" | "aiter"
    fields: tuple = ()           # (name, value) pairs of ops.TUNED_LAUNCH_FIELDS, forced; () = chosen
    # Calls that pass their prompts' own K/V rows (``BucketBench(own_rows=True)``): (name, value) pairs of
    # ops.TUNED_DENSE_FIELDS forcing the dense kernel's tile, or ``pages`` (the rows withheld: every prompt
    # reads the pages); neither: the chooser's.
    dense: tuple = ()
    pages: bool = False

    @property
    def launch(self) -> dict | None:
        return dict(self.fields) or None


@dataclasses.dataclass
class Timing:
    graph_us: float      # per call, graph replay of back-to-back calls over rotating inputs
    flushed_us: float    # one call after the caches were overwritten


@dataclasses.dataclass
class Measured:
    candidate: Candidate
    ran: str = ""                    # the backend and launch that actually ran
    timing: Timing | None = None
    rel_err: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.timing is not None


Timer = Callable[[list, Candidate], Timing]


def gpu_timer(calls: list, candidate: Candidate) -> Timing:
    return Timing(graph_us=timing.graph_us(calls, target_ms=3.0, reps=10), flushed_us=timing.flushed_us(calls))


def fields_of(launch, rows: bool = False, fp8_dots: bool = False) -> tuple:
    """The launch's tuned fields, with its tile's queries (``block_q``) where ``rows`` and whether Q K^T dots
    in fp8 (``fp8_dots``) where ``fp8_dots``."""
    names = ops.TUNED_LAUNCH_FIELDS + (("block_q",) if rows else ()) + (("fp8_dots",) if fp8_dots else ())
    return tuple((name, getattr(launch, name)) for name in names)


def launch_text(fields: dict) -> str:
    """``Q32 BN64 W4 S3 x2 asm ovl fp8qk``: queries per tile (where tuned), tile keys, warps, stages, KV
    splits, and the flags that are on (dots over an fp8 cache: ``fp8qk`` q in fp8, ``fp8qk2`` q as two fp8 parts,
    ``fp8qkpv2`` q and P each as two fp8 parts)."""
    text = f"Q{fields['block_q']} " if "block_q" in fields else ""
    text += f"BN{fields['block_n']} W{fields['num_warps']} S{fields['num_stages']} x{fields['num_splits']}"
    return (text + (" asm" if fields["page_ids_asm"] else "") + (" ovl" if fields["overlap_qk"] else "")
            + {"qk": " fp8qk", "qk_split": " fp8qk2", "qk_pv_split": " fp8qkpv2"}.get(fields.get("fp8_dots"), ""))


def dense_text(launch) -> str:
    """``dense Q128 BN64 W8 S2``: the dense kernel's tile, warps and stages; ``pages`` without one."""
    if launch is None:
        return "pages"
    return f"dense Q{launch.block_m} BN{launch.block_n} W{launch.num_warps} S{launch.num_stages}"


class BucketBench:
    """Inputs of one shape on ``device``; ``run`` checks and times one candidate over them."""

    def __init__(self, shape: TuneShape, device, dtype, timer: Timer, fp8_dtype=torch.float8_e4m3fn,
                 own_rows: bool = False):
        self.shape, self.device, self.timer = shape, torch.device(device), timer
        # Without a prompt's own K/V rows the paged launch is timed, which those rows would hand a whole
        # prompt's work away from (to the dense kernel, ops/extend_launch.py); ``own_rows`` times that hand-off.
        self.case = inputs.build(shape, self.device, dtype=dtype, new_kv=own_rows)
        self.paged_case = dataclasses.replace(self.case, new_kv=None)
        if shape.kv == "fp8" and fp8_dtype != self.case.k_cache.dtype:
            self.case.k_cache = self.case.k_cache.float().to(fp8_dtype)
            self.case.v_cache = self.case.v_cache.float().to(fp8_dtype)
        self.ref = inputs.reference(self.case)
        self.outs = [torch.empty_like(self.case.q) for _ in self.case.block_tables]
        self.default = self.describe(backend="triton").launch
        # ("none", "qk_split"[, "qk_pv_split"][, "qk"]) where the cache is in the GPU's own fp8 format
        # (ops.fp8_dots_choices).
        self.fp8_dots = ops.fp8_dots_choices(kv_cache_dtype=self.case.k_cache.dtype, dtype=self.case.q.dtype,
                                             causal=shape.causal, device=self.device)
        # Caller-owned, as a host's: graph capture never allocates, whatever split count is tried.
        floats = self.describe(backend="triton", num_kv_splits=MAX_SPLITS).workspace_floats if self.can_split else 0
        self.workspace = torch.empty(max(1, floats, self.describe(backend="triton").workspace_floats),
                                     dtype=torch.float32, device=self.device)

    @property
    def can_split(self) -> bool:
        """The only calls the chooser (and a tuned entry) splits (``launch_config.may_split``)."""
        return ops.may_split_keys(self.case.q.shape[0], self.shape.batch, self.default.block_q)

    @property
    def kv_keys(self) -> int:
        return self.case.block_tables[0].shape[1] * self.shape.page

    def describe(self, backend: str = "auto", num_kv_splits=None, own_rows: bool = False):
        s, (hq, hkv, d), case = self.shape, self.shape.heads, self.case
        return ops.describe_launch(
            num_tokens=case.q.shape[0], num_seqs=s.batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
            page_size=s.page, kv_capacity=self.kv_keys, causal=s.causal,
            dtype=case.q.dtype, max_query_len=s.q_len, num_kv_splits=num_kv_splits, sinks=case.sinks is not None,
            kv_cache_dtype=case.k_cache.dtype, device=self.device, backend=backend,
            new_kv=own_rows and case.new_kv is not None)

    @property
    def bucket(self) -> tuple[int, int, int, int]:
        s, case = self.shape, self.case
        return ops.tuned_bucket(num_tokens=case.q.shape[0], num_seqs=s.batch, max_query_len=s.q_len,
                                kv_keys=self.kv_keys, page_size=s.page)

    def _calls(self, backend: str, pages: bool = False) -> list:
        case = self.paged_case if pages else self.case
        return case.plugin_calls(self.outs, workspace=self.workspace, backend=backend)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, candidate: Candidate) -> Measured:
        result = Measured(candidate)
        with contextlib.ExitStack() as forced:
            if candidate.fields:
                forced.enter_context(ops.forced_launch(**dict(candidate.fields)))
            if candidate.dense:
                forced.enter_context(ops.forced_extend(**dict(candidate.dense)))
            plan = self.describe(backend=candidate.backend, own_rows=not candidate.pages)
            tuned_fields = () if plan.launch is None else fields_of(plan.launch, rows=not self.can_split,
                                                                     fp8_dots=len(self.fp8_dots) > 1)
            result.ran = plan.backend if plan.launch is None else f"{plan.backend} {launch_text(dict(tuned_fields))}"
            if self.case.new_kv is not None:
                result.ran += f"; prompts {dense_text(plan.dense_launch)}"
            calls = self._calls(candidate.backend, pages=candidate.pages)
            try:
                for out in self.outs:
                    out.fill_(float("nan"))
                calls[0]()
                self._sync()
                result.rel_err = inputs.rel_error(self.outs[0], self.ref)
                if not result.rel_err <= inputs.tolerance(plan.launch):
                    result.error = f"wrong output (relative error {result.rel_err:.2e})"
                    return result
                result.timing = self.timer(calls, candidate)
            except Exception as exc:  # noqa: BLE001 - a launch that fails is a result, not the end
                self._sync_quietly()
                result.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        return result

    def _sync_quietly(self) -> None:
        with contextlib.suppress(Exception):
            self._sync()
