#!/usr/bin/env bash
# CI as a new machine runs it: a fresh clone of HEAD, empty environment, wheel and pip caches,
# then `.ci/run` (= bash ci/test.sh).  Run it whenever ci/, ci/envs/ or pyproject.toml change:
# a warm cache once hid a red cold run.  Takes about 45 minutes and ~45 GB of free disk on 2 cores; the
# scratch directory is deleted afterwards unless --keep is given.
#
#   bash ci/cold_check.sh [--keep] [suite ...]      (suites as for ci/test.sh; default: all)
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
keep=0
if [[ "${1:-}" == "--keep" ]]; then keep=1; shift; fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/dflash-cold-XXXXXX")"
[[ $keep -eq 1 ]] || trap 'rm -rf "$scratch"' EXIT
git -C "$REPO_ROOT" diff --quiet HEAD -- || log "note: uncommitted changes are NOT part of the cold check (it clones HEAD)"
git clone -q "$REPO_ROOT" "$scratch/repo"
log "cold check of $(git -C "$scratch/repo" rev-parse --short HEAD) in $scratch"
start=$SECONDS
set +e
(cd "$scratch/repo" && env DFLASH_CI_CACHE="$scratch/envs" DFLASH_WHEEL_CACHE="$scratch/wheels" \
    PIP_CACHE_DIR="$scratch/pip-cache" CI=true bash .ci/run "$@")
rc=$?
set -e
log "cold check finished in $(( (SECONDS - start) / 60 )) min with exit status $rc"
exit $rc
