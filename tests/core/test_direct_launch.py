"""Direct launches (ops/backends/triton_direct.py), the parts that exist without a GPU.

* the arguments after the pointers are exactly those Triton's own binder (the installed release,
  which passes every parameter in order, as 3.3-3.9 do) gives the launcher, for the real kernels;
* the switch, the interpreter and releases outside 3.2-3.9 keep the normal launch;
* the settings each release's ``JITFunction.run`` compiles with, and 3.7+'s pass-pipeline hook, are
  read from the installed release's own source and followed by the key;
* the keying and the fallback, with the compiled kernel and the driver stood in for (they need a
  GPU): a repeat call with the same alignments launches the kept kernel with the same arguments
  (tensors as their addresses), another alignment or device launches normally, set launch hooks
  launch normally, and an error in a direct launch runs the normal launch and ends direct launches;
* a split call relaunches both kernels from one reading of the device, stream and hooks, one key
  and one lookup, each with its own pointers, and reuses its workspace views while the buffer
  under them stays the same.

Bitwise equality with the normal launch on real kernels, and under graph capture, is
tests/gpu/test_direct_launch.py.
"""

from __future__ import annotations

import types

import pytest
import torch

from dflash_rocm_plugin.ops import _runtime, workspace
from dflash_rocm_plugin.ops.backends import triton as triton_backend
from dflash_rocm_plugin.ops.backends import triton_direct
from dflash_rocm_plugin.ops.call import AttentionCall
from tests.core.cases import build


@pytest.fixture(autouse=True)
def fresh_switch(monkeypatch):
    monkeypatch.setattr(triton_direct, "_facts", None)  # the switch and the Triton release read again


def _call(splits=None, sinks=False, fp8=False, window=0):
    c = build([300, 40], [16, 1], num_q_heads=4, num_kv_heads=2, head_dim=32,
              cache_dtype=torch.float8_e4m3fn if fp8 else None)
    scale = torch.ones(1) if fp8 else None
    return AttentionCall(c.q, c.k_cache, c.v_cache, c.block_table, c.seq_lens, c.query_start_loc,
                         torch.empty_like(c.q), causal=True, scale=0.17, window=window, softcap=0.0,
                         max_query_len=16, num_kv_splits=splits, workspace=None,
                         sinks=torch.zeros(4) if sinks else None, k_scale=scale, v_scale=scale)


def _pointers(call, launch):
    k, v = call.k_cache, call.v_cache
    if launch.soft:
        k, v = k.view(torch.uint8), v.view(torch.uint8)
    p_out = p_lse = call.out
    if launch.scratch is not None:
        p_out, p_lse = workspace.scratch(call.q.device, *launch.scratch.shape)
    q = call.q
    return ((q, k, v, call.out, call.block_table, call.seq_lens, call.query_start_loc, p_out, p_lse,
             q if call.sinks is None else call.sinks, q if call.k_scale is None else call.k_scale,
             q if call.v_scale is None else call.v_scale),
            (call.out, p_out, p_lse, call.query_start_loc))


def _jit(interpreted):
    from triton.runtime.jit import JITFunction
    return JITFunction(interpreted.fn)


@pytest.mark.parametrize("kw", [dict(), dict(splits=4), dict(sinks=True), dict(fp8=True), dict(window=64)],
                         ids=["unsplit", "split", "sinks", "fp8", "window"])
def test_fixed_arguments_are_what_tritons_binder_passes(kw):
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import create_function_from_signature
    call = _call(**kw)
    launch = triton_backend.Launch(call)
    kernels, _ = _runtime.kernels()
    attention_ptrs, merge_ptrs = _pointers(call, launch)
    cases = [(kernels.paged_attention_kernel, attention_ptrs, launch.ints, launch.constexprs)]
    if launch.scratch is not None:
        cases.append((kernels.merge_splits_kernel, merge_ptrs, launch.merge_ints, launch.merge_constexprs))
    for kernel, ptrs, ints, constexprs in cases:
        jit = _jit(kernel)
        binder = create_function_from_signature(jit.signature, jit.params, BaseBackend)
        bound, _, _ = binder(*ptrs, *ints, **constexprs)
        fixed = triton_direct._fixed_arguments(jit, True, len(ptrs), ints, constexprs)
        assert fixed is not None
        got = (*ptrs, *fixed)
        want = tuple(bound.values())
        assert len(got) == len(want)
        assert all(a is b or (not isinstance(a, torch.Tensor) and a == b and type(a) is type(b))
                   for a, b in zip(got, want))
        # 3.2 passes the non-constexpr ones only: the pointers and the integers.
        assert triton_direct._fixed_arguments(jit, False, len(ptrs), ints, constexprs) == tuple(ints)


def test_a_kernel_whose_parameters_are_laid_out_otherwise_is_not_relaunched():
    kernels, _ = _runtime.kernels()
    jit = _jit(kernels.merge_splits_kernel)
    assert triton_direct._fixed_arguments(jit, True, 4, (1, 2, 3), {}) is None  # too few integers


def test_the_interpreter_the_switch_and_other_releases_launch_normally(monkeypatch):
    import triton
    assert not triton_direct.enabled()  # interpreting
    monkeypatch.setattr(_runtime, "interpreting", lambda: False)
    for version, switch, on in [("3.6.0", None, True), ("3.2.0", None, True), ("3.4.1", "1", True),
                                ("3.7.1", None, True), ("3.8.0", None, True), ("3.9.0", None, True),
                                ("3.6.0", "0", False), ("3.6.0", "off", False), ("3.1.0", None, False),
                                ("3.10.0", None, False), ("4.0.0", None, False), ("", None, False)]:
        monkeypatch.setattr(triton, "__version__", version)
        if switch is None:
            monkeypatch.delenv(triton_direct.SWITCH, raising=False)
        else:
            monkeypatch.setenv(triton_direct.SWITCH, switch)
        monkeypatch.setattr(triton_direct, "_facts", None)
        assert triton_direct.enabled() is on, (version, switch)
        state = triton_direct.state()
        assert state["direct"] is on
        says = "directly" if on else (f"{triton_direct.SWITCH}={switch}" if switch else "3.2-3.9 only")
        assert says in state["reason"], (version, switch, state)


class FakeCompiled:
    """Stands in for a CompiledKernel (needs a GPU): records launches."""

    def __init__(self, log, name="attention"):
        self.log, self.name, self.function, self.packed_metadata = log, name, "fn", "meta"

    def run(self, *args):
        self.log.append(("direct", args, self.name))


class FakeJit:
    """A JITFunction of the real kernel's parameters whose launch is recorded instead of run."""

    def __init__(self, interpreted, log, name="attention"):
        real = _jit(interpreted)
        self.params, self.signature = real.params, real.signature
        self.pre_run_hooks, self.used_global_vals = [], {}
        self.debug, self.log, self.name = None, log, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs, self.name))
            return FakeCompiled(self.log, self.name)
        return launch


@pytest.fixture
def fake_gpu(monkeypatch):
    state = types.SimpleNamespace(device=0, hooks=None)
    driver = types.SimpleNamespace(active=types.SimpleNamespace(get_current_device=lambda: state.device,
                                                                get_current_stream=lambda d: 1000 + d))
    facts = types.SimpleNamespace(driver=driver, all_params=True, rocm=False,
                                  hooks_unset=lambda: state.hooks is None, options=lambda: (False,))
    monkeypatch.setattr(triton_direct, "_facts", facts)
    return state


def _recorded_launch():
    """A prepared launch of the attention kernel, its pointers, and a Relauncher whose normal and
    direct launches land in ``log``."""
    call = _call()
    launch = triton_backend.Launch(call)
    kernels, _ = _runtime.kernels()
    log = []
    jit = FakeJit(kernels.paged_attention_kernel, log)
    ptrs, _ = _pointers(call, launch)
    return launch, log, jit, ptrs, triton_backend.Relauncher()


def test_repeat_calls_launch_the_kept_kernel_and_anything_new_launches_normally(fake_gpu):
    launch, log, jit, ptrs, relaunch = _recorded_launch()

    def run(pointers=ptrs):
        relaunch(((jit, launch.grid, None, launch.ints, launch.constexprs),), pointers)
        return log[-1][0]

    assert run() == "jit"
    assert run() == "direct"
    # The compiled kernel is held with its launcher: from Triton 3.8 on, a collected one unloads
    # its module, and with it the function handle a direct launch passes.
    (kept,), = relaunch.variants.values()
    assert isinstance(kept[-1], FakeCompiled) and kept[4] == kept[-1].function
    fixed = triton_direct._fixed_arguments(jit, True, len(ptrs), launch.ints, launch.constexprs)
    # Each tensor as its address: the launcher then makes no driver call per pointer.
    addresses = tuple(p.data_ptr() for p in ptrs)
    assert log[-1][1] == (*launch.grid, 1000, "fn", "meta", None, None, None, *addresses, *fixed)
    assert all(type(a) is int for a in log[-1][1][9:9 + len(ptrs)])
    odd_q = torch.zeros(ptrs[0].numel() + 1)[1:].view_as(ptrs[0])  # 4-byte aligned, not 16
    assert run((odd_q, *ptrs[1:])) == "jit"
    assert run((odd_q, *ptrs[1:])) == "direct"
    fake_gpu.device = 1
    assert run() == "jit"
    assert run() == "direct" and log[-1][1][3] == 1001  # that device's stream
    fake_gpu.hooks = "profiler"
    assert run() == "jit" and run() == "jit"
    fake_gpu.hooks = None
    jit.pre_run_hooks.append(lambda *a, **k: None)
    assert run() == "jit"
    jit.pre_run_hooks.clear()
    jit.used_global_vals[("LIMIT", 0)] = (1, {"LIMIT": 2})  # a global changed since compiling
    assert run() == "jit"
    jit.used_global_vals.clear()
    assert run() == "direct"


def test_an_error_in_a_direct_launch_runs_the_normal_one_and_ends_direct_launches(fake_gpu, caplog):
    launch, log, jit, ptrs, relaunch = _recorded_launch()
    launches = ((jit, launch.grid, None, launch.ints, launch.constexprs),)
    relaunch(launches, ptrs)
    key, kept = next(iter(relaunch.variants.items()))

    def broken(*args):
        raise TypeError("launcher takes other arguments")
    relaunch.variants[key] = ((broken, *kept[0][1:]),)
    relaunch(launches, ptrs)
    assert log[-1][0] == "jit"
    assert triton_direct._facts is False
    assert "direct Triton launches switched off" in caplog.text
    assert triton_direct.state() == {"direct": False, "switch": triton_direct.SWITCH,
                                     "reason": "switched off after TypeError: launcher takes other arguments"}
    from dflash_rocm_plugin import doctor, ops
    assert "switched off after TypeError" in doctor._launch_line(ops.kernel_paths())
    relaunch(launches, ptrs)
    assert log[-1][0] == "jit"


def test_the_key_follows_tritons_settings_and_on_rocm_its_buffer_ops_switch():
    """JITFunction.run compiles anew when TRITON_DEBUG or the instrumentation mode changes, and on ROCm
    a pointer's storage size is part of its specialization only while buffer ops are on."""
    knobs = types.SimpleNamespace(runtime=types.SimpleNamespace(debug=False),
                                  compilation=types.SimpleNamespace(instrumentation_mode="off",
                                                                    fpsan_homomorphic_casts=False),
                                  amd=types.SimpleNamespace(use_buffer_ops=True))
    facts = types.SimpleNamespace(knobs=knobs, instrumentation=True, fpsan_casts=True, rocm=True)
    seen = {triton_direct._Facts.options(facts)}
    knobs.amd.use_buffer_ops = False
    seen.add(triton_direct._Facts.options(facts))
    knobs.runtime.debug = True
    seen.add(triton_direct._Facts.options(facts))
    knobs.compilation.instrumentation_mode = "fpsan"
    seen.add(triton_direct._Facts.options(facts))
    knobs.compilation.fpsan_homomorphic_casts = True
    seen.add(triton_direct._Facts.options(facts))
    assert len(seen) == 5
    facts.rocm = False  # NVIDIA has no buffer ops: the switch is not read
    knobs.amd.use_buffer_ops = True
    on = triton_direct._Facts.options(facts)
    knobs.amd.use_buffer_ops = False
    assert triton_direct._Facts.options(facts) == on


def _installed_facts():
    text, version = triton_direct.triton_release()
    oldest, newest = triton_direct.READ_RELEASES
    assert version is not None and oldest <= version <= newest, \
        f"read Triton {text}'s launch path before widening the range"
    return triton_direct._Facts(version)


def test_the_installed_triton_launches_directly(monkeypatch):
    """Whatever Triton this environment's torch brings (3.9 here; 3.8 with the torch builds vLLM and
    SGLang pin, where tests/vllm runs this again) keeps repeat calls on the direct launch."""
    monkeypatch.setattr(_runtime, "interpreting", lambda: False)
    monkeypatch.delenv(triton_direct.SWITCH, raising=False)
    monkeypatch.setattr(triton_direct, "_facts", None)
    assert triton_direct.enabled(), triton_direct.state()


def test_the_key_holds_every_setting_the_installed_triton_compiles_with(monkeypatch):
    """Each option ``JITFunction.run`` of the installed release adds from Triton's settings (read from
    its source: debug, the instrumentation mode, 3.9's fpsan casts) changes the key when it changes."""
    import inspect
    import re

    from triton import knobs
    from triton.runtime.jit import JITFunction
    source = inspect.getsource(JITFunction.run)
    added = re.findall(r'kwargs\["(\w+)"\]\s*=.*knobs\.(\w+)\.(\w+)', source)
    assert {name for name, _, _ in added} >= {"debug", "instrumentation_mode"}
    facts = _installed_facts()
    for name, group, knob in added:
        before = facts.options()
        was = getattr(getattr(knobs, group), knob)
        monkeypatch.setattr(getattr(knobs, group), knob, "fpsan" if isinstance(was, str) else not was)
        assert facts.options() != before, name
        monkeypatch.setattr(getattr(knobs, group), knob, was)
        assert facts.options() == before, name


def test_a_pass_pipeline_hook_launches_normally_where_the_installed_triton_keys_on_it(monkeypatch):
    """3.7+ put ``knobs.runtime.add_stages_inspection_hook`` in a kernel's key: while one is set the
    kept kernel may not be the one ``JITFunction.run`` would launch."""
    import inspect

    from triton import knobs
    from triton.runtime.jit import JITFunction
    facts = _installed_facts()
    keyed = "add_stages_inspection_hook" in inspect.getsource(JITFunction.run)
    assert facts.stages_hook is keyed
    assert facts.hooks_unset()
    if keyed:
        monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", lambda: ("key", "hash"))
        assert not facts.hooks_unset()


def test_the_split_merge_is_launched_on_three_grid_sizes():
    """The split merge's grid is 2-D; the launcher takes three sizes, as JITFunction.run passes
    them (an unpadded grid raised IndexError on the H200 and ended direct launches)."""
    call = _call(splits=4)
    launch = triton_backend.Launch(call)
    assert len(launch.grid) == 3
    assert launch.merge_grid == (call.num_tokens, call.num_q_heads, 1)


def test_a_split_call_relaunches_both_kernels_from_one_key_and_reuses_its_workspace_views(fake_gpu, monkeypatch):
    call = _call(splits=4)
    launch = triton_backend.Launch(call)
    assert launch.scratch is not None
    reads = []
    real_begin = triton_direct.begin
    monkeypatch.setattr(triton_direct, "begin", lambda: reads.append(1) or real_begin())
    kernels, _ = _runtime.kernels()
    log = []
    fakes = {kernels.paged_attention_kernel: FakeJit(kernels.paged_attention_kernel, log),
             kernels.merge_splits_kernel: FakeJit(kernels.merge_splits_kernel, log, "merge")}
    monkeypatch.setattr(_runtime, "kernels", lambda: (types.SimpleNamespace(
        paged_attention_kernel=fakes[kernels.paged_attention_kernel],
        merge_splits_kernel=fakes[kernels.merge_splits_kernel]), None))
    given = torch.empty(workspace.elements(4, call.num_tokens, call.num_q_heads, call.head_dim))

    def run(ws=given):
        triton_backend.launch(launch, call.q, call.k_cache, call.v_cache, call.out, call.block_table,
                              call.seq_lens, call.query_start_loc, None, None, None, ws)
        return [entry[0] for entry in log[-2:]]

    assert run() == ["jit", "jit"]
    first = launch.scratch.views(call.q.device, given)
    assert run() == ["direct", "direct"] and len(reads) == 2  # one reading per call, both launches
    assert [entry[2] for entry in log[-2:]] == ["attention", "merge"]  # in order
    assert len(launch.relaunch.variants) == 1  # one key for both kernels
    (_, attention_args, _), (_, merge_args, _) = log[-2:]
    q = call.q
    attention_ptrs = (q, call.k_cache, call.v_cache, call.out, call.block_table, call.seq_lens,
                      call.query_start_loc, first[0], first[1], q, q, q)
    merge_ptrs = (call.out, first[0], first[1], call.query_start_loc)
    fixed = [triton_direct._fixed_arguments(fakes[k], True, len(p), i, c) for k, p, i, c in (
        (kernels.paged_attention_kernel, attention_ptrs, launch.ints, launch.constexprs),
        (kernels.merge_splits_kernel, merge_ptrs, launch.merge_ints, launch.merge_constexprs))]
    assert attention_args == (*launch.grid, 1000, "fn", "meta", None, None, None,
                              *(p.data_ptr() for p in attention_ptrs), *fixed[0])
    assert merge_args == (*launch.merge_grid, 1000, "fn", "meta", None, None, None,
                          *(p.data_ptr() for p in merge_ptrs), *fixed[1])
    assert launch.scratch.views(call.q.device, given) is first  # same buffer: the same views
    # The merge's direct launch fails after the attention's ran: both run again the normal way.
    (key, (attention_kept, merge_kept)), = launch.relaunch.variants.items()

    def broken(*args):
        raise RuntimeError("merge launcher")
    launch.relaunch.variants[key] = (attention_kept, (broken, *merge_kept[1:]))
    assert run() == ["jit", "jit"] and log[-3][0] == "direct" and triton_direct._facts is False
    other = torch.empty_like(given)
    views = launch.scratch.views(call.q.device, other)
    assert views is not first and views[0].data_ptr() == other.data_ptr()
    assert views[1].data_ptr() == other.data_ptr() + 4 * 4 * call.num_tokens * call.num_q_heads * call.head_dim
    with pytest.raises(ValueError, match="workspace holds"):
        launch.scratch.views(call.q.device, given[:10])  # a smaller buffer is checked again


def test_kernels_replaced_after_a_launch_are_launched_as_they_are(fake_gpu, monkeypatch):
    """A prepared launch keeps the compiled kernels of the kernel objects it launched; when
    ``_runtime.kernels`` answers other objects (a test's stand-ins), those run, normally first."""
    call = _call(splits=4)
    launch = triton_backend.Launch(call)
    kernels, _ = _runtime.kernels()
    log = []

    def use(suffix):
        fakes = types.SimpleNamespace(
            paged_attention_kernel=FakeJit(kernels.paged_attention_kernel, log, "attention" + suffix),
            merge_splits_kernel=FakeJit(kernels.merge_splits_kernel, log, "merge" + suffix))
        monkeypatch.setattr(_runtime, "kernels", lambda: (fakes, None))

    def run():
        triton_backend.launch(launch, call.q, call.k_cache, call.v_cache, call.out, call.block_table,
                              call.seq_lens, call.query_start_loc, None, None, None, None)
        return [(entry[0], entry[-1]) for entry in log[-2:]]

    use("")
    assert run() == [("jit", "attention"), ("jit", "merge")]
    assert run() == [("direct", "attention"), ("direct", "merge")]
    use(" again")
    assert run() == [("jit", "attention again"), ("jit", "merge again")]
    assert run() == [("direct", "attention again"), ("direct", "merge again")]


def test_on_rocm_a_storage_on_the_other_side_of_2_gb_launches_normally(fake_gpu, monkeypatch):
    """ROCm specializes a pointer on whether its storage fits 2 GB (buffer ops): a repeat call whose
    tensor lies in a larger storage, same shape, strides and alignment, is another variant."""
    monkeypatch.setattr(triton_direct._facts, "rocm", True)
    launch, log, jit, ptrs, relaunch = _recorded_launch()
    limit = max(p.untyped_storage().nbytes() for p in ptrs)
    monkeypatch.setattr(triton_direct, "_INT32_MAX", limit)  # every storage of the call "fits"

    def run(pointers=ptrs):
        relaunch(((jit, launch.grid, None, launch.ints, launch.constexprs),), pointers)
        return log[-1][0]

    assert run() == "jit" and run() == "direct"
    big = torch.zeros(limit // ptrs[0].element_size() + 64)[:ptrs[0].numel()].view_as(ptrs[0])
    assert big.untyped_storage().nbytes() > limit and big.data_ptr() % 16 == 0
    assert run((big, *ptrs[1:])) == "jit"
    assert run((big, *ptrs[1:])) == "direct"
    assert run() == "direct" and len(relaunch.variants) == 2


def _dense(window=0, sinks=False, fp8=False, chunks=False):
    """A whole prompt's call, its prepared dense launch (``chunks``: one that serves chunks too), and its
    own K/V rows."""
    from dflash_rocm_plugin.ops import extend_launch
    from dflash_rocm_plugin.ops.backends import triton_extend
    c = build([70, 40], [70, 40], num_q_heads=4, num_kv_heads=2, head_dim=32,
              cache_dtype=torch.float8_e4m3fn if fp8 else None)
    call = AttentionCall(c.q, c.k_cache, c.v_cache, c.block_table, c.seq_lens, c.query_start_loc,
                         torch.empty_like(c.q), causal=True, scale=0.17, window=window, softcap=0.0,
                         max_query_len=70, num_kv_splits=None, workspace=None,
                         sinks=torch.zeros(4) if sinks else None, k_scale=torch.tensor([0.5]) if fp8 else None,
                         v_scale=torch.tensor([0.25, 2.0]) if fp8 else None, extend_min_q=32, extend_chunks=chunks)
    fused = torch.zeros(c.q.shape[0] + 2, 8 * 32)  # q, k and v of a token side by side
    keys, values = fused[:, 4 * 32:6 * 32].view(-1, 2, 32), fused[:, 6 * 32:].view(-1, 2, 32)
    cfg = extend_launch.ExtendLaunch(32, 16, 4, 1, True, True, chunks)
    return call, triton_extend.Launch(call, cfg, keys, values), keys, values


@pytest.mark.parametrize("kw", [dict(), dict(window=24, sinks=True), dict(fp8=True, sinks=True), dict(chunks=True),
                                dict(chunks=True, fp8=True), dict(chunks=True, window=24)],
                         ids=["plain", "window-sinks", "fp8", "chunks", "chunks-fp8", "chunks-window"])
def test_dense_launch_fixed_arguments_are_what_tritons_binder_passes(kw):
    """Every kernel of the dense launch (over an fp8 cache the rows' rounding first, with chunks the
    prefixes' copy next) gets, from the call's pointers, the ones its parameters name, and the fixed
    arguments Triton's binder would pass."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import create_function_from_signature
    call, launch, keys, values = _dense(**kw)
    unused = call.q
    rows = (keys, values, torch.empty(launch.rows), torch.empty(launch.rows)) if kw.get("fp8") else (unused,) * 4
    read_k, read_v = rows[2:] if kw.get("fp8") else (keys, values)
    prefix = ()
    pre_k = pre_v = unused
    if kw.get("chunks"):
        pre_k, pre_v = torch.empty(launch.prefix_rows), torch.empty(launch.prefix_rows)
        prefix = (call.k_cache.view(torch.uint8) if kw.get("fp8") else call.k_cache, call.v_cache, call.block_table,
                  pre_k, pre_v)
    ptrs = (call.q, call.q, read_k, read_v, call.out, call.out, call.seq_lens, call.query_start_loc,
            call.sinks if call.sinks is not None else unused, call.k_scale if call.k_scale is not None else unused,
            call.v_scale if call.v_scale is not None else unused, pre_k, pre_v, *rows, *prefix)
    launches, _ = launch._launches(False, False)
    assert len(launches) == 1 + bool(kw.get("fp8")) + bool(kw.get("chunks"))
    for kernel, _, take, ints, constexprs in launches:
        jit = _jit(kernel)
        taken = triton_direct._take(take, ptrs)
        binder = create_function_from_signature(jit.signature, jit.params, BaseBackend)
        bound, _, _ = binder(*taken, *ints, **constexprs)
        fixed = triton_direct._fixed_arguments(jit, True, len(taken), ints, constexprs)
        got, want = (*taken, *fixed), tuple(bound.values())
        assert len(got) == len(want)
        assert all(a is b or (not isinstance(a, torch.Tensor) and a == b and type(a) is type(b))
                   for a, b in zip(got, want))
        named = dict(zip(bound.keys(), taken))
        if "k_cache_ptr" in named:  # the prefixes' copy: the cache and table in, the prefix buffers out
            assert named["k_cache_ptr"] is prefix[0] and named["v_cache_ptr"] is call.v_cache
            assert named["block_table_ptr"] is call.block_table and named["seq_lens_ptr"] is call.seq_lens
            assert named["k_rows_ptr"] is pre_k and named["v_rows_ptr"] is pre_v
            assert constexprs["GQA"] == 2 and constexprs["MIN_QUERY"] == 32 and constexprs["FP8"] == int(bool(kw.get("fp8")))
            assert constexprs["USE_WINDOW"] == bool(kw.get("window")) and ints[0] == kw.get("window", 0)
        elif "key_ptr" in named:   # the rows' rounding: the host's rows in, the buffers out
            assert named["key_ptr"] is keys and named["value_ptr"] is values
            assert named["k_rows_ptr"] is rows[2] and named["v_rows_ptr"] is rows[3]
        else:
            assert named["new_k"] is read_k and named["new_v"] is read_v and named["out_ptr"] is call.out
            assert named["pre_k"] is pre_k and named["pre_v"] is pre_v and constexprs["CHUNKS"] == bool(kw.get("chunks"))
        if kw.get("fp8") and "k_scale_ptr" in named:
            assert named["k_scale_ptr"] is call.k_scale and named["v_scale_ptr"] is call.v_scale
            assert constexprs["USE_K_SCALE"] and constexprs["USE_V_SCALE"]


def test_dense_launches_with_tma_descriptors_pass_them_to_the_launcher_as_built(fake_gpu, monkeypatch):
    """The q, K/V and out descriptors are built per call around the tensors' addresses and reach the
    launcher as they are (it encodes them), the other tensors as addresses; misaligned rows take pointer
    loads."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    from dflash_rocm_plugin.ops.backends import triton_extend
    call, launch, keys, values = _dense()
    log = []
    fake = FakeJit(_runtime.extend_kernel(), log, "dense")
    monkeypatch.setattr(_runtime, "extend_kernel", lambda: fake)

    def run(k=keys, v=values):
        triton_extend.launch(launch, call.q, call.out, call.seq_lens, call.query_start_loc, k, v, None)
        return log[-1]

    first = run()
    assert first[0] == "jit" and first[3]["USE_DESC"] is True and first[3]["DESC_QO"] is True
    q_desc, k_desc, v_desc, out_desc = first[2][1], first[2][2], first[2][3], first[2][5]
    assert type(k_desc) is TensorDescriptor and k_desc.base is keys
    assert (k_desc.shape, k_desc.strides, k_desc.block_shape) == ([call.num_tokens, 64], [keys.stride(0), 1], [16, 32])
    assert q_desc.base is call.q and out_desc.base is call.out
    assert (q_desc.shape, q_desc.block_shape) == ([call.num_tokens, 4 * 32], [32, 32])
    again = run()
    assert again[0] == "direct"
    args = again[1][9:]
    assert all(type(args[i]) is TensorDescriptor for i in (1, 2, 3, 5))
    assert args[2] is not k_desc and args[2].base is keys and args[3].base is values
    assert args[0] == call.q.data_ptr() and args[4] == call.out.data_ptr()
    assert all(type(a) is int for a in args[6:9])
    # Rows that start off 16 bytes: pointer loads, their own kernel variant, launched normally first.
    fused = torch.zeros(keys.shape[0] * 8 * 32 + 1)[1:].view(keys.shape[0], 8 * 32)
    odd_k, odd_v = fused[:, 4 * 32:6 * 32].view(-1, 2, 32), fused[:, 6 * 32:].view(-1, 2, 32)
    assert odd_k.stride() == keys.stride() and odd_k.data_ptr() % 16 != 0
    odd = run(odd_k, odd_v)
    assert odd[0] == "jit" and odd[3]["USE_DESC"] is False and odd[3]["DESC_QO"] is False and odd[2][2] is odd_k
    assert run(odd_k, odd_v)[0] == "direct"
    assert run()[0] == "direct"


def _dense_pair(monkeypatch, first_kernel: str, tag: str, launch, call, keys, values, *rest):
    """``run()``: one dense launch whose attention and first kernel (``first_kernel`` of the KV kernels,
    logged as ``tag``) are fakes; it returns their log entries."""
    from dflash_rocm_plugin.ops.backends import triton_extend
    log = []
    attention = FakeJit(_runtime.extend_kernel(), log, "dense")
    first = FakeJit(getattr(_runtime.kernels()[1], first_kernel), log, tag)
    monkeypatch.setattr(_runtime, "extend_kernel", lambda: attention)
    monkeypatch.setattr(_runtime, "kernels", lambda: (None, types.SimpleNamespace(**{first_kernel: first})))

    def run():
        del log[:]
        triton_extend.launch(launch, call.q, call.out, call.seq_lens, call.query_start_loc, keys, values, None,
                             *rest)
        return list(log)

    return run


def test_fp8_dense_launch_relaunches_both_kernels_around_new_buffers(fake_gpu, monkeypatch):
    """Over an fp8 cache the rows' rounding runs first on the host's rows, then the attention reads the
    buffers it wrote through descriptors built around them; on a repeat call both go direct, each with its
    own pointers' addresses."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    call, launch, keys, values = _dense(fp8=True)
    run = _dense_pair(monkeypatch, "cached_rows_kernel", "rows", launch, call, keys, values,
                      call.k_scale, call.v_scale)
    first = run()
    assert [(e[0], e[-1]) for e in first] == [("jit", "rows"), ("jit", "dense")]
    rows_args, dense_args = first[0][2], first[1][2]
    assert rows_args[0] is keys and rows_args[1] is values and rows_args[4] is call.k_scale
    buffers = rows_args[2], rows_args[3]
    assert all(b.shape == (call.num_tokens, 64) and b.dtype == call.q.dtype for b in buffers)
    k_desc = dense_args[2]
    assert type(k_desc) is TensorDescriptor and k_desc.base is buffers[0] and dense_args[3].base is buffers[1]
    assert dense_args[9] is call.k_scale and dense_args[10] is call.v_scale
    again = run()
    assert [(e[0], e[-1]) for e in again] == [("direct", "rows"), ("direct", "dense")]
    rows_direct = again[0][1][9:]
    assert rows_direct[0] == keys.data_ptr() and rows_direct[4] == call.k_scale.data_ptr()
    dense_direct = again[1][1][9:]
    assert type(dense_direct[2]) is TensorDescriptor and dense_direct[2].base.data_ptr() == rows_direct[2]
    assert dense_direct[9] == call.k_scale.data_ptr() and dense_direct[10] == call.v_scale.data_ptr()


def test_dense_launch_with_chunks_copies_prefixes_then_reads_them_through_descriptors(fake_gpu, monkeypatch):
    """With chunks the prefixes' copy runs first on the cache, the block table and two fresh buffers of GQA
    rows per query token, and the attention reads those through descriptors built around them; on a
    repeat call both go direct."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    call, launch, keys, values = _dense(chunks=True)
    run = _dense_pair(monkeypatch, "cached_prefix_kernel", "prefix", launch, call, keys, values,
                      None, None, call.k_cache, call.v_cache, call.block_table)
    first = run()
    assert [(e[0], e[-1]) for e in first] == [("jit", "prefix"), ("jit", "dense")]
    copy_args, dense_args = first[0][2], first[1][2]
    assert copy_args[0] is call.k_cache and copy_args[1] is call.v_cache and copy_args[2] is call.block_table
    buffers = copy_args[5], copy_args[6]
    assert all(b.shape == (2 * call.num_tokens, 64) and b.dtype == call.q.dtype for b in buffers)
    assert first[1][3]["CHUNKS"] is True
    pre_k, pre_v = dense_args[11], dense_args[12]
    assert type(pre_k) is TensorDescriptor and pre_k.base is buffers[0] and pre_v.base is buffers[1]
    assert (pre_k.shape, pre_k.strides, pre_k.block_shape) == ([2 * call.num_tokens, 64], [64, 1], [16, 32])
    assert dense_args[2].base is keys
    again = run()
    assert [(e[0], e[-1]) for e in again] == [("direct", "prefix"), ("direct", "dense")]
    copy_direct, dense_direct = again[0][1][9:], again[1][1][9:]
    assert copy_direct[0] == call.k_cache.data_ptr() and copy_direct[2] == call.block_table.data_ptr()
    assert type(dense_direct[11]) is TensorDescriptor and dense_direct[11].base.data_ptr() == copy_direct[5]
