#!/usr/bin/env bash
# The main job on a fresh machine: build (or reuse) a small venv with the plugin and run
# `dflash-rocm demo` in it.  Extra arguments go to the demo (e.g. --json, --batch 4).
# On a machine that already has a ROCm/CUDA torch, `pip install dflash-rocm-plugin` and
# `dflash-rocm demo` is all you need; this script exists for a bare machine.
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"
venv="$(env_dir core)"
exec "$venv/bin/dflash-rocm" demo "$@"
