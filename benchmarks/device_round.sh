#!/usr/bin/env bash
# One device call: variant sweep, split sweep, peer bench (JSON + PNG), GPU tests; logs into $OUT.
#   bash benchmarks/device_round.sh [sweep-parts] [bench: 1|0] [tests: 1|0]
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
PARTS="${1:-variants,splits}"; BENCH="${2:-1}"; TESTS="${3:-1}"
# Extra sweep.py arguments (cells, split counts, variant names); the default re-times 8 x 4K and 1 x 32K splits.
SWEEP_ARGS="${SWEEP_ARGS:---split-cells 8x4096x16,8x4096x1,1x32768x16 --splits 2,3,4,5,6,8}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
if [[ "$PARTS" != none ]]; then
    timeout 200 python3 benchmarks/sweep.py --out "$OUT/sweep.json" --deadline-s 170 --part "$PARTS" \
        $SWEEP_ARGS ${VARIANTS:+--variants "$VARIANTS"} 2>&1 | tee "$OUT/sweep.txt"
fi
if [[ "$BENCH" == 1 ]]; then
    timeout 240 python3 -m dflash_rocm_plugin.bench --targets-only --peers benchmarks/.peers --save --no-progress \
        2>&1 | tee "$OUT/bench.txt"
    cp $(ls -t benchmarks/results/*.json benchmarks/results/*.png | head -2) "$OUT/"
    ls -t benchmarks/results/ | head -3
fi
if [[ "$TESTS" == 1 ]]; then
    timeout 150 python3 -m pytest tests/gpu -q -x 2>&1 | tail -15 | tee "$OUT/gpu-tests.txt"
fi
