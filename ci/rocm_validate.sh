#!/usr/bin/env bash
# Validate dflash-rocm-plugin on an AMD Instinct box (MI300X / MI355X), natively (no interpreter):
#
#   1. dflash-rocm doctor
#   2. the kernel tests on the GPU:            pytest tests/core
#      and the GPU suite (bf16, graph capture/replay, large shapes): pytest tests/gpu
#   3. the kernel benchmark:                   dflash-rocm bench
#      over fp8 caches in this GPU's format, with the default launch and each other fp8 launch
#      and the launch sweep that checks the gfx942/gfx950 choices: benchmarks/sweep.py
#      the launch tuner, which writes this GPU's tuned file: dflash-rocm tune -> OUT/tuned/<arch>.json
#      (gfx942 on MI300X, gfx950 on MI355X; README: contribute it as dflash_rocm_plugin/ops/tuned/<arch>.json),
#      and the benchmark again with that file in force
#   4. the demo on the GPU (tiny models):      dflash-rocm demo --json
#   5. given --model and --draft: vLLM and SGLang servers with DFlash on rocm_dflash, DFlash on the
#      host's default ROCm backend, and no speculation; tau and throughput at concurrency 1 and 32
#      measured with `dflash benchmark openai` (pip install dflash), all in one report.
#
# Usage: bash ci/rocm_validate.sh [--dry-run] [--model PATH] [--draft PATH] [--out DIR]
#                                 [--hosts "vllm sglang"] [--concurrency "1 32"] [--port N]
#                                 [--dataset gsm8k] [--num-prompts 128] [--max-new-tokens 512]
# Environment equivalents: DFLASH_MODEL, DFLASH_DRAFT, DFLASH_OUT.
# --dry-run prints every command it would run, exactly, and runs none.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
MODEL="${DFLASH_MODEL:-}"
DRAFT="${DFLASH_DRAFT:-}"
OUT="${DFLASH_OUT:-rocm-validate-$(date +%Y%m%d-%H%M%S)}"
HOSTS="vllm sglang"
CONCURRENCY="1 32"
PORT=30123
DATASET=gsm8k
NUM_PROMPTS=128
MAX_NEW_TOKENS=512
PYTHON="${PYTHON:-python3}"

usage() { awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dry-run) DRY_RUN=1 ;;
        --model) MODEL="$2"; shift ;;
        --draft) DRAFT="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --hosts) HOSTS="$2"; shift ;;
        --concurrency) CONCURRENCY="$2"; shift ;;
        --port) PORT="$2"; shift ;;
        --dataset) DATASET="$2"; shift ;;
        --num-prompts) NUM_PROMPTS="$2"; shift ;;
        --max-new-tokens) MAX_NEW_TOKENS="$2"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "rocm_validate.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

REPORT="$OUT/report.md"
FAILURES=()

# run CMD...: print it (shell-quoted, copy-pasteable); execute it unless --dry-run.
run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    [[ $DRY_RUN -eq 1 ]] && return 0
    "$@"
}

# step NAME LOG CMD...: run, tee into LOG, record a failure without stopping the rest.
step() {
    local name="$1" log="$2"; shift 2
    echo "== $name"
    if [[ $DRY_RUN -eq 1 ]]; then run "$@"; return 0; fi
    if ! run "$@" > >(tee "$log") 2>&1; then FAILURES+=("$name"); fi
}

note() { [[ $DRY_RUN -eq 1 ]] || printf '%s\n' "$*" >> "$REPORT"; }

wait_for_server() {
    local url="http://127.0.0.1:$PORT/v1/models"
    [[ $DRY_RUN -eq 1 ]] && { echo "+ (wait until $url answers)"; return 0; }
    for _ in $(seq 1 360); do
        curl -sf "$url" > /dev/null 2>&1 && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 5
    done
    return 1
}

SERVER_PID=""
stop_server() {
    if [[ -n "$SERVER_PID" ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap stop_server EXIT

# server_cmd HOST VARIANT -> the server command line in the array SERVER
server_cmd() {
    local host="$1" variant="$2"
    local spec="{\"method\":\"dflash\",\"model\":\"$DRAFT\",\"num_speculative_tokens\":15}"
    case "$host/$variant" in
        vllm/dflash-rocm_dflash)
            SERVER=(vllm serve "$MODEL" --port "$PORT" --attention-backend rocm_dflash --speculative-config "$spec") ;;
        vllm/dflash-default)
            SERVER=(vllm serve "$MODEL" --port "$PORT" --speculative-config "$spec") ;;
        vllm/no-spec)
            SERVER=(vllm serve "$MODEL" --port "$PORT") ;;
        sglang/dflash-rocm_dflash)
            SERVER=("$PYTHON" -m sglang.launch_server --model-path "$MODEL" --port "$PORT"
                    --speculative-algorithm DFLASH --speculative-draft-model-path "$DRAFT"
                    --attention-backend rocm_dflash) ;;
        sglang/dflash-default)
            SERVER=("$PYTHON" -m sglang.launch_server --model-path "$MODEL" --port "$PORT"
                    --speculative-algorithm DFLASH --speculative-draft-model-path "$DRAFT") ;;
        sglang/no-spec)
            SERVER=("$PYTHON" -m sglang.launch_server --model-path "$MODEL" --port "$PORT") ;;
    esac
}

serve_and_measure() {
    local host="$1" variant="$2" c log
    server_cmd "$host" "$variant"
    log="$OUT/$host-$variant"
    echo "== $host / $variant: server"
    if [[ $DRY_RUN -eq 1 ]]; then
        run "${SERVER[@]}"
        echo "+ (in the background, output to $log.server.log)"
    else
        printf '+'; printf ' %q' "${SERVER[@]}"; printf '\n'
        "${SERVER[@]}" > "$log.server.log" 2>&1 &
        SERVER_PID=$!
    fi
    if ! wait_for_server; then
        FAILURES+=("$host/$variant: server did not start (see $log.server.log)")
        note "| $host | $variant | - | server failed to start | - |"
        stop_server; return 0
    fi
    for c in $CONCURRENCY; do
        step "$host / $variant: benchmark at concurrency $c" "$log.c$c.log" \
            dflash benchmark openai --base-url "http://127.0.0.1:$PORT" --model "$MODEL" \
            --dataset "$DATASET" --num-prompts "$NUM_PROMPTS" --concurrency "$c" \
            --max-new-tokens "$MAX_NEW_TOKENS" --temperature 0 --reasoning off
        if [[ $DRY_RUN -eq 0 ]]; then
            note "| $host | $variant | $c | $(summary_of "$log.c$c.log") |"
        fi
    done
    stop_server
}

# The benchmark's own summary lines (throughput; tau where the server reports it).
summary_of() {
    grep -iE "throughput|tok/s|accept|tau" "$1" | tr '\n' ' ' | cut -c1-200 || echo "no summary (see $1)"
}

[[ $DRY_RUN -eq 1 ]] || mkdir -p "$OUT"
note "# dflash-rocm-plugin ROCm validation, $(date -u +%Y-%m-%dT%H:%MZ)"
note ""

step "doctor" "$OUT/doctor.log" dflash-rocm doctor
step "kernel tests (native)" "$OUT/tests-core.log" env -u TRITON_INTERPRET "$PYTHON" -m pytest tests/core -q
step "GPU suite (bf16, graph capture/replay, large shapes)" "$OUT/tests-gpu.log" \
    env -u TRITON_INTERPRET "$PYTHON" -m pytest tests/gpu -q
step "kernel benchmark" "$OUT/bench.log" dflash-rocm bench
# The target's other calls (prefill, chunked prefill, decode; q16 with GQA-8 heads) beside torch SDPA
# on this GPU (its flash backend; cuDNN, an NVIDIA backend, reports itself failed here).
for workload in prefill chunked decode gqa8; do
    step "kernel benchmark, $workload" "$OUT/bench-$workload.log" \
        dflash-rocm bench --workload "$workload" --peers benchmarks/.peers --peer-names sdpa_flash,sdpa_cudnn \
        --json "$OUT/bench-$workload.json"
done
# Whole prompts read their own K/V in the dense kernel (the bench passes them); the same prompts from the
# pages, and the dense path's windows and sinks: gpt-oss (sinks; window 128 on alternate layers) and Gemma-4's
# sliding layers (256 wide, window 512), each beside its pages-only twin.
step "kernel benchmark, prefill from the pages only" "$OUT/bench-prefill-paged-only.log" \
    dflash-rocm bench --workload prefill --paged-only --json "$OUT/bench-prefill-paged-only.json"
for spec in "gpt-oss-120b --sinks" "gpt-oss-120b --sinks --window 128" "gemma-4-sliding --window 512"; do
    name=$(echo "$spec" | sed 's/ --/-/g; s/ /-/g')
    for pages in "" "--paged-only"; do
        # shellcheck disable=SC2086  # spec and pages are word lists
        step "kernel benchmark, prefill, $spec${pages:+ $pages}" "$OUT/bench-prefill-$name${pages:+-paged-only}.log" \
            dflash-rocm bench --workload prefill --models $spec $pages \
            --json "$OUT/bench-prefill-$name${pages:+-paged-only}.json"
    done
done
# Gemma-4 (26B-A4B layouts): global layers' 512-wide heads (taller tiles of 8 warps), sliding layers' 256-wide
# with window 1024; Qwen3-Next / Qwen3.5 full-attention layers (16 q / 2 kv heads of 256), q16 and decode.
step "kernel benchmark, Qwen3-Next / Qwen3.5 full-attention layers (head_dim 256)" "$OUT/bench-qwen3-next.log" \
    dflash-rocm bench --models qwen3-next --targets-only --pages 16 --json "$OUT/bench-qwen3-next.json"
step "kernel benchmark, Qwen3-Next decode" "$OUT/bench-qwen3-next-decode.log" \
    dflash-rocm bench --models qwen3-next --modes verify --q-len 1 --shapes 64x8K,16x16K,1x32K --pages 16 \
    --json "$OUT/bench-qwen3-next-decode.json"
# On the H200 256-wide heads ran 1.4-2x faster in 64-key tiles than in 32 (benchmarks/NOTES.md "v7 -> v8");
# AMD's 256-wide tiles (32 keys) against 64 and 16.
for force in block_n=64 block_n=16; do
    step "kernel benchmark, Qwen3-Next, --force $force" "$OUT/bench-qwen3-next-${force/=/-}.log" \
        dflash-rocm bench --models qwen3-next --targets-only --pages 16 --force "$force" \
        --json "$OUT/bench-qwen3-next-${force/=/-}.json"
done
step "kernel benchmark, Gemma-4 global layers (head_dim 512)" "$OUT/bench-gemma4-global.log" \
    dflash-rocm bench --models gemma-4-global --targets-only --pages 16 --json "$OUT/bench-gemma4-global.json"
step "kernel benchmark, Gemma-4 sliding layers (head_dim 256, window 1024)" "$OUT/bench-gemma4-sliding.log" \
    dflash-rocm bench --models gemma-4-sliding --window 1024 --targets-only --pages 16 \
    --json "$OUT/bench-gemma4-sliding.json"
step "kernel benchmark, fp8 caches in this GPU's format" "$OUT/bench-fp8.log" \
    dflash-rocm bench --kv fp8 --pages 16 --json "$OUT/bench-fp8.json"
# The target's calls over an fp8 cache: whole prompts read their own rows, rounded as the write stored them,
# in the dense kernel (beside their pages-only twin), chunks read a copy of their fp8 prefix there too,
# decodes read the pages.
for workload in prefill chunked decode; do
    step "kernel benchmark, $workload over an fp8 cache" "$OUT/bench-fp8-$workload.log" \
        dflash-rocm bench --workload "$workload" --kv fp8 --json "$OUT/bench-fp8-$workload.json"
done
step "kernel benchmark, prefill over an fp8 cache from the pages only" "$OUT/bench-fp8-prefill-paged-only.log" \
    dflash-rocm bench --workload prefill --kv fp8 --paged-only --json "$OUT/bench-fp8-prefill-paged-only.json"
# The fp8 launches beside the default (benchmarks/NOTES.md), whose Q K^T takes q as two fp8 parts in tiles of
# 64 rows and more: fp16 dots for both products (what that default replaced on this GPU's timing alone),
# the default forced everywhere, Q K^T in fp8 for every call (DFLASH_ROCM_FP8_QK=all; =draft is its draft
# rows), both products on fp8 MFMAs with q and P each as two fp8 parts (no tile converted; the default's
# error), fp8 MFMA dots for both products, for P V alone, and P V transposed with fp16 dots; their relative
# error is in the table and in tests-fp8-launches.log.
for force in fp8_dots=none fp8_dots=qk_split fp8_dots=qk fp8_dots=qk_pv_split fp8_dots=qk_pv fp8_dots=pv \
        pv_transposed=true; do
    step "kernel benchmark, fp8 caches, --force $force" "$OUT/bench-fp8-${force%%=*}-${force#*=}.log" \
        dflash-rocm bench --kv fp8 --pages 16 --force "$force" --tolerance 0.06 \
        --json "$OUT/bench-fp8-${force%%=*}-${force#*=}.json"
done
step "opt-in fp8 launches: error against the float64 reference" "$OUT/tests-fp8-launches.log" \
    env -u TRITON_INTERPRET "$PYTHON" -m pytest tests/gpu/test_fp8_opt_in_launches.py -q -s
step "launch sweep (stages, tiles, KV splits)" "$OUT/sweep.log" \
    "$PYTHON" benchmarks/sweep.py --out "$OUT/sweep.json" --deadline-s 900 --part variants,splits \
    --variants "amd S=1,amd S=2,amd BN32 S=2,amd W8 S=1,amd ovl S=2,amd M32 S=1,amd M32 S=2,amd M16 S=1"
# Chunks over a prefix in the dense kernel (a copy of the prefix first) against the same chunks from the pages.
for kv in bf16 fp8; do
    step "chunked prefill over a $kv cache: dense chunks against paged ones" "$OUT/ab-dense-chunks-$kv.log" \
        env -u TRITON_INTERPRET "$PYTHON" benchmarks/launch_ab.py --workload chunked --kv "$kv" \
        --force-dense chunks=false --json "$OUT/ab-dense-chunks-$kv.json"
done
# ... under a window, whose chunks copy only their prefix's last window - 1 keys: gpt-oss (128, sinks), and
# Gemma-4's sliding layers (512), whose 256-wide windowed tiles stay paged on gfx94x (one register would
# spill): there chunks=true is the A/B, on gfx950 chunks=false.
step "chunked prefill, gpt-oss heads (window 128, sinks): dense chunks against paged ones" \
    "$OUT/ab-dense-chunks-gpt-oss.log" env -u TRITON_INTERPRET "$PYTHON" benchmarks/launch_ab.py --workload chunked \
    --model gpt-oss-120b --window 128 --sinks --force-dense chunks=false --json "$OUT/ab-dense-chunks-gpt-oss.json"
for chunks in true false; do
    step "chunked prefill, Gemma-4 sliding heads (window 512): chunks=$chunks against the chosen launch" \
        "$OUT/ab-dense-chunks-gemma-4-sliding-$chunks.log" env -u TRITON_INTERPRET "$PYTHON" benchmarks/launch_ab.py \
        --workload chunked --model gemma-4-sliding --window 512 --force-dense chunks=$chunks \
        --json "$OUT/ab-dense-chunks-gemma-4-sliding-$chunks.json"
done
# Over a cache in this GPU's fp8 format Gemma-4's sliding layers stay paged (the pages multiply the codes on
# fp8 MFMAs; ops/extend_launch.py): the dense kernel forced at its own launch (AMD loads by pointers) beside them.
for workload in prefill chunked; do
    step "$workload, Gemma-4 sliding heads over an fp8 cache: the dense kernel against the chosen pages" \
        "$OUT/ab-gemma-4-sliding-fp8-dense-$workload.log" env -u TRITON_INTERPRET "$PYTHON" benchmarks/launch_ab.py \
        --workload "$workload" --model gemma-4-sliding --window 512 --kv fp8 --force-dense use_desc=false \
        --json "$OUT/ab-gemma-4-sliding-fp8-dense-$workload.json"
done
for workload in prefill chunked; do
    step "$workload: query tiles in reverse grid order (heavy_first) against the chosen order" \
        "$OUT/ab-heavy-first-$workload.log" env -u TRITON_INTERPRET "$PYTHON" benchmarks/launch_ab.py \
        --workload "$workload" --force heavy_first=true --json "$OUT/ab-heavy-first-$workload.json"
done
echo "== the launch tuner writes this GPU's tuned file into $OUT/tuned/ (<arch>.json: gfx942 on MI300X, gfx950 on MI355X)"
step "launch tuning (Qwen3-8B heads, with prefill)" "$OUT/tune.log" \
    env -u TRITON_INTERPRET dflash-rocm tune --out "$OUT/tuned" --prefill --budget-min 60 \
    --json "$OUT/tune.json" --no-progress
step "launch tuning (Qwen3-32B heads, GQA 8)" "$OUT/tune-qwen3-32b.log" \
    env -u TRITON_INTERPRET dflash-rocm tune --model qwen3-32b --out "$OUT/tuned" --budget-min 30 \
    --json "$OUT/tune-qwen3-32b.json" --no-progress
step "kernel benchmark with the tuned launches" "$OUT/bench-tuned.log" \
    env -u TRITON_INTERPRET DFLASH_ROCM_TUNED_CONFIGS="$OUT/tuned" dflash-rocm bench --json "$OUT/bench-tuned.json"
for tuned_file in "$OUT"/tuned/*.json; do
    if [[ -e "$tuned_file" ]]; then
        note "tuned launch file: $tuned_file (README, \"Tuning launches on your GPU\": how to contribute it)"
    fi
done
step "demo (tiny models, GPU)" "$OUT/demo.json" dflash-rocm demo --json --no-progress

if [[ -n "$MODEL" && -n "$DRAFT" ]]; then
    step "demo (real checkpoints, GPU)" "$OUT/demo-real.json" \
        dflash-rocm demo --target "$MODEL" --draft "$DRAFT" --json --no-progress --batch 4
    note "| host | variant | concurrency | result |"
    note "|---|---|---|---|"
    for host in $HOSTS; do
        for variant in dflash-rocm_dflash dflash-default no-spec; do
            serve_and_measure "$host" "$variant"
        done
    done
else
    echo "== servers: skipped (give --model and --draft, or DFLASH_MODEL and DFLASH_DRAFT)"
    note "servers: skipped (no --model/--draft given)"
fi

if [[ $DRY_RUN -eq 1 ]]; then
    echo "(dry run: nothing was executed)"
    exit 0
fi
note ""
note "failures: ${FAILURES[*]:-none}"
echo "report: $REPORT"
[[ ${#FAILURES[@]} -eq 0 ]]
