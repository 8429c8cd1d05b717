#!/usr/bin/env bash
# One device call: variant sweep, split sweep, peer bench (JSON + PNG), GPU tests; logs into $OUT.
#   bash benchmarks/device_round.sh [sweep-parts] [bench: 1|0] [tests: 1|a|b|0]
# tests: 1 the whole GPU suite (it needs close to a call's 10 minutes), a / b its first / second half.
# Extra parts, each switched on by its variable (=1):
#   WINDOW    DFlash2 windows (2048, q 8 and 16) against the same keys without a window over as many pages
#   FP8       fp8 caches: the default launch, then each opt-in fp8 launch (time and error)
#   HOSTCOST  host cost of one eager call (benchmarks/host_cost.py), direct relaunch on and off
#   WORKLOADS the target's prefill, chunked prefill and decode, and GQA-8 q16, beside SDPA and vLLM
#   WIDE      256- and 512-wide heads (Qwen3-Next / Qwen3.5, Gemma-4 layouts): q16 and decode beside vLLM
#   PARITY    the windowed draft against the same keys, interleaved in one process (window_parity.py)
#   AB        one launch choice against the chosen launch, interleaved in one process (launch_ab.py): AB_FORCE
#             (e.g. "heavy_first=false"; space-separated for several fields) and/or AB_FORCE_DENSE (the dense-K/V
#             prefill kernel's fields, e.g. "block_n=64": its prompts then carry their own K/V) over AB_RUNS (workload[:model], ...),
#             on AB_KV caches (bf16 or fp8; default bf16); AB_OTHER=FILE: that version of
#             kernels/paged_attention.py against this tree's instead (AB_FORCE then optional)
#   DENSE     the dense-K/V prefill kernel's launch fields (DENSE_FORCES: sets of --force-dense items, one set
#             per word, items joined by '+'; default 2 stages, 64-key tiles, and pointer loads instead of TMA)
#             on the prefill workload of Qwen3-8B, Qwen3-Next and gpt-oss heads, cuDNN in each process
#   CHUNKS    chunks over a prefix on the dense path against the pages (launch_ab.py --force-dense chunks=false),
#             bf16 and fp8: Qwen3-8B heads, gpt-oss (window 128, sinks), Gemma-4 sliding (window 512); Gemma-4
#             sliding over fp8 (paged by choice) against the dense kernel; then the dense-path GPU tests of
#             chunks, windows and sinks
#   WHY_SPLIT_P  P as two fp8 parts past NVIDIA's refusal, with and without DISABLE_MMA_V3=1 (split_p_probe.py)
#   NCU       Nsight Compute stall samples of that pair (q16, 32 x 16K window 2048 against 32 x 2064 keys)
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PARTS="${1:-variants,splits}"; BENCH="${2:-1}"; TESTS="${3:-1}"
# Extra sweep.py arguments (cells, split counts, variant names); the default re-times 8 x 4K and 1 x 32K splits.
SWEEP_ARGS="${SWEEP_ARGS:---split-cells 8x4096x16,8x4096x1,1x32768x16 --splits 2,3,4,5,6,8}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
B="python3 -m dflash_rocm_plugin.bench --no-progress"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [[ "$PARTS" != none ]]; then
    timeout 200 python3 benchmarks/sweep.py --out "$OUT/sweep.json" --deadline-s 170 --part "$PARTS" \
        $SWEEP_ARGS ${VARIANTS:+--variants "$VARIANTS"} 2>&1 | tee "$OUT/sweep.txt"
fi
if [[ "$BENCH" == 1 ]]; then
    timeout 240 $B --targets-only --peers benchmarks/.peers --save 2>&1 | tee "$OUT/bench.txt"
    cp $(ls -t benchmarks/results/*.json benchmarks/results/*.png | head -2) "$OUT/"
    ls -t benchmarks/results/ | head -3
fi
if [[ "${WINDOW:-0}" == 1 ]]; then
    for q in 8 16; do
        timeout 90 $B --pages 16 --modes draft --window 2048 --q-len "$q" --shapes 32x16K,64x8K,8x4K \
            --peers benchmarks/.peers --peer-names vllm_unified --peer-shapes 32x16K,64x8K,8x4K \
            --json "$OUT/window-q$q.json" 2>&1 | tee "$OUT/window-q$q.txt"
        for pc in 32x16K 64x8K 8x4K; do
            timeout 60 $B --pages 16 --modes draft --q-len "$q" --shapes "${pc%x*}x2064" --pool-context "${pc#*x}" \
                --json "$OUT/window-q$q-same-keys-$pc.json" 2>&1 | grep plugin | tee -a "$OUT/window-q$q.txt"
        done
    done
fi
if [[ "${FP8:-0}" == 1 ]]; then
    timeout 120 $B --kv fp8 --targets-only --pages 16 --peers benchmarks/.peers --peer-names vllm_unified \
        --json "$OUT/fp8.json" 2>&1 | tee "$OUT/fp8.txt"
    for force in pv_transposed=true fp8_dots=qk fp8_dots=qk_pv_split fp8_dots=pv fp8_dots=qk_pv; do
        timeout 80 $B --kv fp8 --targets-only --pages 16 --force "$force" --tolerance 0.06 \
            --json "$OUT/fp8-${force%%=*}-${force#*=}.json" 2>&1 | tee "$OUT/fp8-${force%%=*}-${force#*=}.txt"
    done
    timeout 150 python3 -m pytest tests/gpu/test_fp8_opt_in_launches.py -q -s 2>&1 | grep -E "rel err|passed|failed" \
        | tee "$OUT/fp8-errors.txt"
fi
if [[ "${WORKLOADS:-0}" == 1 ]]; then
    for w in prefill:150 chunked:80 decode:100 gqa8:110; do
        timeout "${w#*:}" $B --workload "${w%:*}" --peers benchmarks/.peers --peer-names vllm_unified,sdpa_flash,sdpa_cudnn \
            --json "$OUT/workload-${w%:*}.json" 2>&1 | tee -a "$OUT/workloads.txt"
    done
fi
if [[ "${AB:-0}" == 1 ]]; then
    forces=(); for f in ${AB_FORCE:-}; do forces+=(--force "$f"); done
    for f in ${AB_FORCE_DENSE:-}; do forces+=(--force-dense "$f"); done
    [[ -n "${AB_OTHER:-}" ]] && forces+=(--other-kernel "$AB_OTHER")
    [[ ${#forces[@]} -gt 0 ]] || { echo "AB needs AB_FORCE, AB_FORCE_DENSE or AB_OTHER" >&2; exit 2; }
    tag="${AB_FORCE:-}${AB_FORCE_DENSE:+${AB_FORCE:+-}dense-$AB_FORCE_DENSE}"; tag="${tag:-other-kernel}"
    tag="${tag// /-}"; tag="${tag//=/-}${AB_KV:+-$AB_KV}"
    for run in ${AB_RUNS:-prefill chunked decode gqa8 gqa8:qwen3-8b}; do
        w="${run%%:*}"; m=""; [[ "$run" == *:* ]] && m="${run#*:}"
        timeout 200 python3 benchmarks/launch_ab.py --workload "$w" ${m:+--model "$m"} ${AB_KV:+--kv "$AB_KV"} "${forces[@]}" \
            --json "$OUT/ab-$tag-$w${m:+-$m}.json" 2>&1 | tee -a "$OUT/ab-$tag.txt"
    done
fi
if [[ "${CHUNKS:-0}" == 1 ]]; then
    for spec in "qwen3-8b" "gpt-oss-120b --window 128 --sinks" "gemma-4-sliding --window 512"; do
        for kv in bf16 fp8; do
            [[ "$spec" == gemma* && "$kv" == fp8 ]] && continue  # paged by choice there: timed below
            # shellcheck disable=SC2086
            timeout 140 python3 benchmarks/launch_ab.py --workload chunked --model $spec --kv "$kv" \
                --force-dense chunks=false --json "$OUT/ab-chunks-${spec%% *}-$kv.json" 2>&1 \
                | tee -a "$OUT/ab-chunks.txt"
        done
    done
    # Gemma-4's sliding layers over fp8 read the pages by choice: the dense kernel forced at its own tiles beside them.
    for w in prefill chunked; do
        timeout 100 python3 benchmarks/launch_ab.py --workload "$w" --model gemma-4-sliding --window 512 --kv fp8 \
            --force-dense use_desc=true --rounds 3 --json "$OUT/ab-gemma-4-sliding-fp8-dense-$w.json" 2>&1 \
            | tee -a "$OUT/ab-chunks.txt"
    done
    timeout 280 python3 -m pytest tests/gpu/test_dense_kv_prefill.py -q -rs -k "chunk or window or sinks" 2>&1 \
        | tail -15 | tee "$OUT/gpu-tests-dense-chunks.txt"
fi
if [[ "${DENSE:-0}" == 1 ]]; then
    for m in qwen3-8b qwen3-next gpt-oss-120b; do
        timeout 110 $B --workload prefill --models "$m" --peers benchmarks/.peers --peer-names sdpa_cudnn \
            --json "$OUT/dense-$m-chosen.json" 2>&1 | tee -a "$OUT/dense.txt"
        for set in ${DENSE_FORCES:-num_stages=2 block_n=64 use_desc=false+qo_desc=false}; do
            forces=(); for f in ${set//+/ }; do forces+=(--force-dense "$f"); done
            timeout 80 $B --workload prefill --models "$m" "${forces[@]}" --json "$OUT/dense-$m-${set//[=+]/-}.json" \
                2>&1 | tee -a "$OUT/dense.txt"
        done
    done
fi
if [[ "${HOSTCOST:-0}" == 1 ]]; then
    timeout 120 python3 benchmarks/host_cost.py --json "$OUT/host-cost.json" 2>&1 | tee "$OUT/host-cost.txt"
    timeout 120 python3 benchmarks/host_breakdown.py --pin --json "$OUT/host-breakdown.json" 2>&1 \
        | tee "$OUT/host-breakdown.txt"
fi
if [[ "${WIDE:-0}" == 1 ]]; then
    timeout 120 $B --models qwen3-next,gemma-4-global --targets-only --pages 16 --peers benchmarks/.peers \
        --peer-names vllm_unified --json "$OUT/wide-q16.json" 2>&1 | grep -v "^  " | tee "$OUT/wide.txt"
    timeout 100 $B --models gemma-4-sliding --window 1024 --targets-only --pages 16 --peers benchmarks/.peers \
        --peer-names vllm_unified --json "$OUT/wide-sliding.json" 2>&1 | grep -v "^  " | tee -a "$OUT/wide.txt"
    timeout 120 $B --models qwen3-next,gemma-4-sliding,gemma-4-global --modes verify --q-len 1 \
        --shapes 64x8K,16x16K,1x32K --pages 16 --peers benchmarks/.peers --peer-names vllm_unified \
        --json "$OUT/wide-decode.json" 2>&1 | grep -v "^  " | tee -a "$OUT/wide.txt"
    timeout 120 $B --models qwen3-next,gemma-4-global --modes verify --q-len 4096 --shapes 1x4K,2x8K --pages 16 \
        --peers benchmarks/.peers --peer-names vllm_unified --json "$OUT/wide-prefill.json" 2>&1 \
        | grep -v "^  " | tee -a "$OUT/wide.txt"
fi
if [[ "${PARITY:-0}" == 1 ]]; then
    timeout 120 python3 benchmarks/window_parity.py --json "$OUT/window-parity.json" 2>&1 | tee "$OUT/window-parity.txt"
fi
if [[ "${WHY_SPLIT_P:-0}" == 1 ]]; then
    # Two Triton caches: the in-memory kernel cache's key leaves DISABLE_MMA_V3 out, so each run is a process.
    for mma in "" 1; do
        env ${mma:+DISABLE_MMA_V3=1} TRITON_CACHE_DIR="/tmp/split-p-cache-${mma:-0}" timeout 100 \
            python3 benchmarks/split_p_probe.py 2>&1 | tee -a "$OUT/split-p-probe.txt"
    done
fi
if [[ "${NCU:-0}" == 1 ]]; then
    # The per-instruction CSVs are large: only their summary comes back.
    for c in 16:window=2048 16:context=2064; do
        timeout 150 ncu -k regex:paged_attention_kernel -c 1 --section SourceCounters --section WarpStateStats \
            --page source --print-source sass --csv python3 benchmarks/profile_one.py "$c" \
            > "/tmp/ncu-${c//[:=]/-}.csv" 2>>"$OUT/ncu-stderr.txt"
    done
    python3 benchmarks/ncu_stalls.py /tmp/ncu-16-window-2048.csv /tmp/ncu-16-context-2064.csv 2>&1 \
        | tee "$OUT/ncu-stalls-window-vs-same-keys.txt"
fi
GPU_TESTS_A="tests/gpu/test_dense_kv_prefill.py tests/gpu/test_direct_launch.py tests/gpu/test_fp8_opt_in_launches.py tests/gpu/test_fp8_sinks_window.py"
GPU_TESTS_B="tests/gpu/test_graph_replay.py tests/gpu/test_numerics_bf16.py tests/gpu/test_tune_on_gpu.py tests/gpu/test_window_drafts.py"
case "$TESTS" in
    1) tests=tests/gpu ;;
    a) tests=$GPU_TESTS_A ;;
    b) tests=$GPU_TESTS_B ;;
    *) tests= ;;
esac
if [[ -n "$tests" ]]; then
    # shellcheck disable=SC2086
    timeout 560 python3 -m pytest $tests -q -rs 2>&1 | tail -25 | tee "$OUT/gpu-tests-$TESTS.txt"
fi
