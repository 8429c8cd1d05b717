"""ENGINE-HEAVY: bad input at vLLM's OpenAI server, with ``--attention-backend rocm_dflash`` and DFlash.

One real server (the distilled tiny pair, the plugin in the CPU engine) answers a prompt longer than
``--max-model-len`` with the host's HTTP 400 naming the limit, then keeps serving: the next
request's greedy tokens equal vLLM's own non-speculative ones.  Servers that must not start:
a malformed ``--speculative-config`` stops at argument parsing with the host's error -- broken JSON
names the flag; a misspelt draft backend is named, with ``ROCM_DFLASH`` among the valid options --
and a model the backend does not serve (head_dim 20) stops at engine start-up with the plugin's
reason.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.e2e_vllm_cpu import conditions, conftest
from tests.e2e_vllm_cpu.conftest import REPO_ROOT, EngineRuns, Run, engine_env

pytestmark = pytest.mark.slow

MAX_MODEL_LEN = 64
START_TIMEOUT_S = 600
GOOD = conditions.load_requests(3, 20, 6)[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_cmd(target, port, *extra) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
            "--served-model-name", "tiny", "--port", str(port), "--host", "127.0.0.1", "--dtype", "float32",
            "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN), "--block-size", str(conditions.BLOCK),
            "--max-num-seqs", "2", "--attention-backend", "rocm_dflash", "--uvicorn-log-level", "warning", *extra]


def _spec(draft, **extra) -> str:
    return json.dumps({"method": "dflash", "model": str(draft), "num_speculative_tokens": 7, **extra})


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


@pytest.fixture(scope="module")
def reference(distilled_checkpoints, tmp_path_factory):
    """vLLM's own CPU attention, no speculation: the expected tokens of the good requests."""
    waves = [[{"prompt": r["prompt"], "max_tokens": 6} for r in GOOD]]
    runs = EngineRuns({"server_reference": Run(False, target="target_distilled", requests=waves)},
                      distilled_checkpoints, tmp_path_factory.mktemp("server_reference"), 1)
    conftest._SESSION_RUNS.append(runs)
    yield dict(zip((tuple(r["prompt"]) for r in waves[0]), runs.get("server_reference")["outputs"]))
    runs.close()


@pytest.fixture(scope="module")
def server(distilled_checkpoints, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = _server_cmd(distilled_checkpoints["target_distilled"], port,
                      "--speculative-config", _spec(distilled_checkpoints["draft_distilled"]))
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=engine_env(plugin=True), stdout=f, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() - start > START_TIMEOUT_S:
                pytest.fail(f"the server did not come up in {START_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(2)
        yield base, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        conftest._OTHER_WALL_TIMES["OpenAI server (up, serving, down)"] = round(time.monotonic() - start, 1)


def _complete(base, prompt, max_tokens=6):
    return _post(base + "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                                            "temperature": 0.0, "ignore_eos": True, "return_token_ids": True})


def test_too_long_prompt_gets_the_hosts_400_and_the_server_keeps_serving(server, reference):
    base, log = server
    good = [r["prompt"] for r in GOOD]
    status, body = _complete(base, good[0])
    assert status == 200, body
    assert body["choices"][0]["token_ids"] == reference[tuple(good[0])]
    status, body = _complete(base, list(range(3, 3 + MAX_MODEL_LEN + 10)))
    assert status == 400, body
    message = json.dumps(body)
    assert "maximum context length is 64" in message, message
    for prompt in good[1:]:  # still serving, still right
        status, body = _complete(base, prompt)
        assert status == 200, body
        assert body["choices"][0]["token_ids"] == reference[tuple(prompt)]
    assert "CPU_ATTN slot now runs dflash_rocm_plugin.vllm.backend.RocmDFlashBackend" in log.read_text()
    # The DFlash draft ran: the server's stat logger reports it on its own interval (VLLM_LOG_STATS_INTERVAL,
    # 10 s), which may fall after the last request finished.
    deadline = time.monotonic() + 45
    while "SpecDecoding metrics" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(1)
    assert "SpecDecoding metrics" in log.read_text(), log.read_text()[-4000:]


def _must_not_start(name, cmd) -> tuple[int, str]:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=engine_env(plugin=True), capture_output=True, text=True,
                          timeout=START_TIMEOUT_S)
    conftest._OTHER_WALL_TIMES[f"server refusing {name}"] = round(time.monotonic() - start, 1)
    return proc.returncode, proc.stdout + proc.stderr


def test_malformed_speculative_config_is_refused_before_start_up(distilled_checkpoints):
    target, draft = distilled_checkpoints["target_distilled"], distilled_checkpoints["draft_distilled"]
    rc, out = _must_not_start("broken --speculative-config JSON",
                              _server_cmd(target, _free_port(), "--speculative-config", _spec(draft)[:-1]))
    assert rc != 0
    assert "error: argument --speculative-config/-sc: Value" in out and "cannot be converted" in out, out[-3000:]
    rc, out = _must_not_start("an unknown draft backend", _server_cmd(
        target, _free_port(), "--speculative-config", _spec(draft, attention_backend="rocm_dflsh")))
    assert rc != 0
    assert "Unknown attention backend: 'ROCM_DFLSH'. Valid options are: " in out, out[-3000:]
    assert "ROCM_DFLASH" in out.split("Valid options are: ")[1].split("[")[0]  # the right name is offered


def test_a_model_the_backend_refuses_stops_start_up_with_the_plugins_reason(tmp_path):
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 128, "hidden_size": 80,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 20, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    from tests.e2e_vllm_cpu.tiny_checkpoints import write_tokenizer
    write_tokenizer(tmp_path, 128)
    rc, out = _must_not_start("a head_dim-20 model", _server_cmd(tmp_path, _free_port(), "--load-format", "dummy"))
    assert rc != 0
    from dflash_rocm_plugin import ops
    assert f"rocm_dflash: {ops.supports(ops.AttentionSpec(head_dim=20, dtype=None))}" in out, out[-4000:]
