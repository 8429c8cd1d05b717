"""A gpt-oss target (attention sinks) with a DFlash draft in vLLM's real CPU engine, on the plugin.

The target is a tiny random ``GptOssForCausalLM`` saved in bf16: two layers, layer 0 sliding
window 8 (vLLM slides the even layers; the default alternating ``layer_types`` say the same),
head_dim 64, 4 q / 2 kv heads, 4 experts, a learned sink per head (N(0, 2), large enough to
change the greedy tokens: the Hugging Face reference below shows it).  The draft is shaped like
the published gpt-oss DFlash drafts: a Qwen3 stack, head_dim 64, non-causal, no sinks.

* Every target layer's attention reaches ``ops.paged_attention`` with the sink logits the
  checkpoint holds (read back from the call), the window layer with its window; the draft's
  without sinks; vLLM's own CPU attention never runs.
* Lossless, in bf16: greedy speculative output on the plugin equals the plugin's own plain
  decoding (and CPU_ATTN's speculative output its own plain decoding).
* Against vLLM's CPU_ATTN: with the engine in float32 (same bf16 checkpoint) the outputs, every
  proposed draft row and the spec-decode counters are equal.  In bf16 the two kernels round
  attention differently (CPU_ATTN's bf16 dots, the interpreter's fp32 ones), and a near tie goes
  either way (prompt 0's third token: logits 7.134 / 7.105 in float32; the plugin keeps the float32
  choice, CPU_ATTN takes the other), so there only each prompt's first two tokens are compared
  (dropping the sinks changes prompt 0's first and prompt 3's second), and the draft tokens
  proposed on equal contexts are equal but where two draft logits tie (draft_rows.py).
* A 200-token prompt prefilled in 64-token chunks (float32, NaN in every new block and in the null
  block that stands for the blocks the window let go): its second and third chunks run on the dense
  kernel in both layers, over a copy of their prefix -- the window layer's only its last 7 keys --
  and the output equals CPU_ATTN's, which prefilled the whole prompt at once.
* The float32 outputs equal Hugging Face's eager gpt-oss (sinks, window by ``layer_types``), and
  the same model with its sinks at -inf decodes other tokens: the runs above are sink-sensitive.
"""

import pytest

from tests.e2e_vllm_cpu import draft_rows
from tests.e2e_vllm_cpu import tiny_checkpoints as tc

PLUGIN_IMPL = "dflash_rocm_plugin.vllm.impl.RocmDFlashImpl"
VLLM_CPU_IMPL = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackendImpl"
TARGET_LAYERS = [f"model.layers.{i}.attn.attn" for i in range(tc.GPTOSS_LAYERS)]
DRAFT_LAYERS = [f"model.layers.{tc.GPTOSS_LAYERS}.self_attn.attn"]
K = tc.DRAFT_BLOCK - 1
BF16_SAME_PREFIX = 2


@pytest.mark.parametrize("variant", ["plugin_gptoss_dflash", "plugin_gptoss_dflash_fp32", "plugin_gptoss_plain"])
def test_every_target_layer_passes_its_sinks(engine_runs, checkpoints, variant):
    run = engine_runs.get(variant)
    calls = run["impl_calls"][PLUGIN_IMPL]
    assert calls["layers"].get("causal") == TARGET_LAYERS
    assert calls["layers"].get("non_causal", []) == (DRAFT_LAYERS if "dflash" in variant else [])
    sinks = run["ops_sinks"]
    # every target forward (and no draft forward) passed sinks; half of them are the window layer's
    assert sinks["calls"] == run["ops_calls"]["causal"] == calls["causal"] > 0
    assert sinks["windowed_calls"] * tc.GPTOSS_LAYERS == sinks["calls"]
    assert calls.get("windowed_past_a_block", 0) > 0, "no window-layer step had a whole block before its window"
    # The 70-token prompt's prefill ran dense in both layers, with the sinks, the window layer windowed.
    dense = run["ops_dense"]
    assert dense["with_sinks"] == dense["launches"] >= tc.GPTOSS_LAYERS, dense
    assert dense["windowed"] * tc.GPTOSS_LAYERS == dense["launches"], dense
    # the loaded values (not the parameter's initial contents), per layer
    assert sorted(sinks["values"]) == sorted(tc.gptoss_sinks(checkpoints["gptoss_target"]))
    assert run["impl_calls"][VLLM_CPU_IMPL]["causal"] == run["impl_calls"][VLLM_CPU_IMPL]["non_causal"] == 0


def test_bf16_speculation_is_lossless(engine_runs):
    spec = engine_runs.get("plugin_gptoss_dflash")
    plain = engine_runs.get("plugin_gptoss_plain")
    m = spec["metrics"]
    assert m["vllm:spec_decode_num_drafts"] > 0 and len(spec["drafts"]) > 0
    assert m["vllm:spec_decode_num_draft_tokens"] == K * m["vllm:spec_decode_num_drafts"]
    assert spec["outputs"] == plain["outputs"]
    host = engine_runs.get("cpu_attn_gptoss_dflash")
    assert host["outputs"] == engine_runs.get("cpu_attn_gptoss_plain")["outputs"]


def test_bf16_first_tokens_equal_cpu_attn(engine_runs):
    ours, theirs = engine_runs.get("plugin_gptoss_plain")["outputs"], engine_runs.get("cpu_attn_gptoss_plain")["outputs"]
    assert [o[:BF16_SAME_PREFIX] for o in ours] == [o[:BF16_SAME_PREFIX] for o in theirs]


def test_bf16_drafts_equal_cpu_attn_drafts_but_ties(engine_runs):
    ours, theirs = engine_runs.get("plugin_gptoss_dflash"), engine_runs.get("cpu_attn_gptoss_dflash")
    rows = draft_rows.compare(ours, theirs, draft_rows.BF16_TIE)
    assert rows["compared"] > 0
    assert not rows["far"], f"draft tokens that differ beyond a bf16 tie: {rows['far']} (ties: {rows['ties']})"


def test_fp32_drafts_equal_cpu_attn_drafts(engine_runs):
    ours, theirs = engine_runs.get("plugin_gptoss_dflash_fp32"), engine_runs.get("cpu_attn_gptoss_dflash_fp32")
    assert len(ours["drafts"]) == len(theirs["drafts"]) > 0
    differing = [(step, row, a, b) for step, (x, y) in enumerate(zip(ours["drafts"], theirs["drafts"]))
                 for row, (a, b) in enumerate(zip(x, y)) if a != b]
    assert not differing, f"draft rows (step, row, plugin, CPU_ATTN) that differ: {differing}"
    assert ours["drafts"] == theirs["drafts"]
    assert ours["outputs"] == theirs["outputs"]
    assert ours["metrics"] == theirs["metrics"]


def test_fp32_chunks_read_their_windowed_prefix_copies_on_the_dense_kernel(engine_runs):
    run = engine_runs.get("plugin_gptoss_chunked_fp32")
    assert run["outputs"] == engine_runs.get("cpu_attn_gptoss_long_prompt_fp32")["outputs"]
    assert run["schedule"]["chunked_prefill_chunks"] >= 3, run["schedule"]
    assert run["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert run["impl_calls"][PLUGIN_IMPL].get("windowed_past_a_block", 0) > 0
    poison = run["poison"]
    assert poison["null_block"] == 0 and poison["blocks_poisoned"] > 0, poison
    dense = run["ops_dense"]
    # Chunks 2 and 3 in both layers; the window layer's prefix copy is its last window - 1 keys.
    assert dense["chunks"] >= 2 * tc.GPTOSS_LAYERS and dense["chunks_windowed"] >= 2, dense
    assert dense["chunks_paged"] == 0, dense


def _hf_greedy(path, drop_sinks: bool):
    import torch
    from transformers import GptOssForCausalLM

    from tests.e2e_vllm_cpu.engine_run import PROMPTS
    from tests.e2e_vllm_cpu.conftest import MAX_TOKENS

    model = GptOssForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    if drop_sinks:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.fill_(-float("inf"))
    outs = []
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
        outs.append(out[0, len(prompt):].tolist())
    return outs


def test_fp32_outputs_equal_hugging_face_and_depend_on_the_sinks(engine_runs, checkpoints):
    outputs = engine_runs.get("plugin_gptoss_dflash_fp32")["outputs"]
    assert _hf_greedy(checkpoints["gptoss_target"], drop_sinks=False) == outputs
    without = _hf_greedy(checkpoints["gptoss_target"], drop_sinks=True)
    # ... already within the prefix the bf16 comparison reads
    assert [o[:BF16_SAME_PREFIX] for o in without] != [o[:BF16_SAME_PREFIX] for o in outputs]
