# Shared helpers for ci/*.sh.  Source it; do not run it.
#
# Each test environment is a venv under $DFLASH_CI_CACHE, named after its spec
# and a hash of the spec's files, so a changed pin builds a fresh venv and an
# unchanged one is reused.  Specs live in ci/envs/: NAME.txt (pip requirements)
# and optionally NAME.post.sh (run inside the venv after the install).

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DFLASH_CI_CACHE="${DFLASH_CI_CACHE:-$HOME/.cache/dflash-rocm-plugin/ci}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

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

# env_dir NAME -> path of the venv (built or reused), on stdout.
env_dir() {
    local name="$1" dir
    dir="$DFLASH_CI_CACHE/$name-$(env_hash "$name")"
    if [[ ! -f "$dir/.complete" ]]; then
        log "building environment '$name' in $dir"
        rm -rf "$dir"
        mkdir -p "$DFLASH_CI_CACHE"
        "$PYTHON" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --upgrade pip >&2
        "$dir/bin/python" -m pip install -q -r "$REPO_ROOT/ci/envs/$name.txt" >&2
        if [[ -f "$REPO_ROOT/ci/envs/$name.post.sh" ]]; then
            (source "$dir/bin/activate" && cd "$REPO_ROOT" && bash "$REPO_ROOT/ci/envs/$name.post.sh") >&2
        fi
        touch "$dir/.complete"
        log "environment '$name' ready"
    fi
    # The plugin itself is installed on every run: the cached venv may have seen another checkout.
    "$dir/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$REPO_ROOT" >&2
    echo "$dir"
}
