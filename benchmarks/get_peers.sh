#!/usr/bin/env bash
# Collect the peer kernels' Python sources that `dflash-rocm bench --peers` loads at run time.
# Nothing fetched here is committed: the folder is ignored and only travels to a GPU machine.
#
#   bash benchmarks/get_peers.sh [DEST] [AITER_GIT_DIR]
#
#   vLLM 0.33.0   vllm/v1/attention/ops/{triton_unified_attention,triton_attention_helpers,prefix_prefill}.py
#   SGLang 0.5.23 sglang/kernels/ops/attention/{extend_attention,decode_attention,score_mod}.py
#   AITER (git)   aiter/ops/triton/_triton_kernels/flash_attn_triton_amd/*.py  (the PyPI amd-aiter wheel is
#                 stale, so a git checkout is read; pass its .git dir or a clone path)
set -euo pipefail
DEST="${1:-$(dirname "$0")/.peers}"
AITER_GIT="${2:-}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$DEST"

python3 -m pip download -q --no-deps vllm==0.33.0 -d "$TMP/vllm"
python3 -m pip download -q --no-deps sglang==0.5.23 -d "$TMP/sglang"
(cd "$DEST" && unzip -o -q "$TMP"/vllm/vllm-*.whl \
    'vllm/v1/attention/ops/triton_unified_attention.py' \
    'vllm/v1/attention/ops/triton_attention_helpers.py' \
    'vllm/v1/attention/ops/prefix_prefill.py')
(cd "$DEST" && unzip -o -q "$TMP"/sglang/sglang-*.whl \
    'sglang/kernels/ops/attention/extend_attention.py' \
    'sglang/kernels/ops/attention/decode_attention.py' \
    'sglang/kernels/ops/attention/score_mod.py')
echo "vllm==0.33.0" > "$DEST/vllm/VERSION"
echo "sglang==0.5.23" > "$DEST/sglang/VERSION"

if [[ -n "$AITER_GIT" ]]; then
    FA=aiter/ops/triton/_triton_kernels/flash_attn_triton_amd
    mkdir -p "$DEST/aiter/flash_attn_triton_amd"
    for f in $(git --git-dir="$AITER_GIT" ls-tree --name-only HEAD "$FA/"); do
        [[ "$f" == *.py ]] || continue
        git --git-dir="$AITER_GIT" show "HEAD:$f" > "$DEST/aiter/flash_attn_triton_amd/$(basename "$f")"
    done
    git --git-dir="$AITER_GIT" log -1 --format='ROCm/aiter %H %cs' > "$DEST/aiter/VERSION"
else
    echo "no AITER git dir given: the AITER peer will be reported as absent" >&2
fi
echo "peer sources in $DEST"
