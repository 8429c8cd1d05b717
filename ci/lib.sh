# shellcheck shell=bash
# Shared helpers for ci/*.sh.  Source it; do not run it.
#
# Each test environment is a venv under $DFLASH_CI_CACHE, named after its spec
# and a hash of the spec's files, so a changed pin builds a fresh venv and an
# unchanged one is reused.  Specs live in ci/envs/: NAME.txt (pip requirements),
# optionally NAME.post.sh (run inside the venv after the install) and NAME.local
# (test distributions of this checkout, installed editable on every run).

set -Eeuo pipefail
# No step may end a run silently: whatever command set -e stops on is named, with where it ran.
# (-E carries the trap into functions and command substitutions.)
# shellcheck disable=SC2154  # rc is assigned inside the trap
trap 'rc=$?; printf "[ci %s] FAILED (exit %s) at %s:%s: %s\n" "$(date +%H:%M:%S)" "$rc" "${BASH_SOURCE[0]##*/}" "$LINENO" "$BASH_COMMAND" >&2' ERR

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DFLASH_CI_CACHE="${DFLASH_CI_CACHE:-$HOME/.cache/dflash-rocm-plugin/ci}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

# pip inside a venv, without the local index's "Location ... is ignored" noise.
quiet_pip() {
    local dir="$1"; shift
    "$dir/bin/python" -m pip -q "$@" 2> >(grep -vE "is ignored: it is neither|BuildBackendWarning|^ *(!!|\*+|Please|By 20|See https|corresp|return|with strategy|name as your|\*\*\*)|^\s*$" >&2 || true)
}

log() { printf '[ci %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

env_hash() {
    local name="$1"
    local f
    {
        for f in "$REPO_ROOT/ci/envs/$name.txt" "$REPO_ROOT/ci/envs/$name.post.sh"; do
            [[ -f "$f" ]] && cat "$f"
        done
        "$PYTHON" -c 'import sys; print(sys.version_info[:2])'
    } | sha256sum | cut -c1-12
}

# fail MESSAGE: say what failed and return non-zero (for `step || fail "..."` chains, which set -e
# cannot see inside functions called from an `if`).
fail() { log "FAILED: $*"; return 1; }

# env_dir NAME -> path of the venv (built or reused), on stdout.  Every step is checked
# explicitly: a half-built environment is never marked complete.
env_dir() {
    local name="$1" dir
    dir="$DFLASH_CI_CACHE/$name-$(env_hash "$name")"
    if [[ ! -f "$dir/.complete" ]]; then
        log "building environment '$name' in $dir"
        rm -rf "$dir"
        mkdir -p "$DFLASH_CI_CACHE" || fail "cannot create $DFLASH_CI_CACHE" || return 1
        "$PYTHON" -m venv "$dir" || fail "environment '$name': python -m venv" || return 1
        quiet_pip "$dir" install --upgrade pip || fail "environment '$name': pip upgrade" || return 1
        quiet_pip "$dir" install -r "$REPO_ROOT/ci/envs/$name.txt" \
            || fail "environment '$name': pip install -r ci/envs/$name.txt" || return 1
        if [[ -f "$REPO_ROOT/ci/envs/$name.post.sh" ]]; then
            (source "$dir/bin/activate" && cd "$REPO_ROOT" && bash "$REPO_ROOT/ci/envs/$name.post.sh") >&2 \
                || fail "environment '$name': ci/envs/$name.post.sh" || return 1
        fi
        touch "$dir/.complete"
        log "environment '$name' ready"
        # Environments of older pins of this spec are dead weight (several GB each).
        local old
        for old in "$DFLASH_CI_CACHE/$name"-*; do
            [[ "$old" != "$dir" && -f "$old/.complete" ]] && rm -rf "$old"
        done
    fi
    # The plugin itself is installed on every run: the cached venv may have seen another checkout.
    # A leftover egg-info in the checkout would shadow the fresh metadata (entry points, extras).
    rm -rf "$REPO_ROOT"/*.egg-info
    quiet_pip "$dir" install --no-deps --no-build-isolation -e "$REPO_ROOT" \
        || fail "environment '$name': installing the plugin (pip install -e)" || return 1
    # Test-only distributions of this checkout that one environment needs (ci/envs/NAME.local:
    # repo-relative paths, one per line), likewise reinstalled on every run.
    if [[ -f "$REPO_ROOT/ci/envs/$name.local" ]]; then
        local extra
        while read -r extra; do
            [[ -z "$extra" || "$extra" == \#* ]] && continue
            quiet_pip "$dir" install --no-deps --no-build-isolation -e "$REPO_ROOT/$extra" \
                || fail "environment '$name': installing $extra (pip install -e)" || return 1
        done < "$REPO_ROOT/ci/envs/$name.local"
    fi
    echo "$dir"
}
