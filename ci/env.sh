#!/usr/bin/env bash
# Build (or reuse) one CI environment and print its path: bash ci/env.sh core|vllm|sglang|...
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"
env_dir "$1"
