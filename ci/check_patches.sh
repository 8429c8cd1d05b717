#!/usr/bin/env bash
# Every diff under patches/<host>/<version>/ must apply cleanly to that host release's
# published source (the wheel from the package registry; neither sglang nor vllm ships an
# sdist for these releases).
#
#   bash ci/check_patches.sh              all diffs
#   bash ci/check_patches.sh sglang/0.5.14 vllm   only these host[/version] directories
#
# Wheels are downloaded with `pip download --no-deps` into $DFLASH_WHEEL_CACHE
# (default ~/.cache/dflash-rocm-plugin/wheels) and reused; only the files a diff touches are
# unpacked.  When the registry cannot be reached and a wheel is not cached, that release is
# skipped with a message saying so; any other failure fails the check.
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # set -Eeuo pipefail and the loud ERR trap
ROOT="$REPO_ROOT"
CACHE="${DFLASH_WHEEL_CACHE:-$HOME/.cache/dflash-rocm-plugin/wheels}"
mkdir -p "$CACHE"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say() { printf '[patches] %s\n' "$*" >&2; }

cached_wheel() {  # host version -> path of a cached wheel, or nothing; always succeeds
    local f
    for f in "$CACHE/$1-$2-"*.whl; do [[ -f "$f" ]] && { echo "$f"; return 0; }; done
    return 0
}

registry_reachable() {
    timeout 120 "$PYTHON" -m pip index versions "$1" >/dev/null 2>&1
}

checked=0 failed=0 skipped=0
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(sglang vllm)

for target in "${targets[@]}"; do
    for dir in "$ROOT/patches/$target" "$ROOT/patches/$target"/*; do
        [[ -d "$dir" ]] || continue
        ls "$dir"/*.diff >/dev/null 2>&1 || continue
        version="$(basename "$dir")"; host="$(basename "$(dirname "$dir")")"
        wheel="$(cached_wheel "$host" "$version")"
        if [[ -z "$wheel" ]]; then
            if ! "$PYTHON" -m pip download -q --no-deps "$host==$version" -d "$CACHE" 2>"$work/pip.err"; then
                if registry_reachable "$host"; then
                    say "FAIL $host $version: pip download failed:"; grep -v "is ignored" "$work/pip.err" >&2 || true
                    failed=$((failed + 1)); continue
                fi
                say "SKIP $host $version: the package registry is unreachable and the wheel is not cached in $CACHE"
                skipped=$((skipped + 1)); continue
            fi
            wheel="$(cached_wheel "$host" "$version")"
            if [[ -z "$wheel" ]]; then
                say "FAIL $host $version: pip download succeeded but no $host-$version-*.whl is in $CACHE"
                failed=$((failed + 1)); continue
            fi
        fi
        src="$work/$host-$version"; mkdir -p "$src"
        for diff in "$dir"/*.diff; do
            mapfile -t files < <(sed -n 's#^+++ b/##p' "$diff" | cut -f1)
            "$PYTHON" - "$wheel" "$src" "${files[@]}" <<'PY'
import sys, zipfile
wheel, dest, *names = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        z.extract(name, dest)  # KeyError: the diff names a file this release does not have
PY
            if patch --dry-run -p1 -s -d "$src" <"$diff" >"$work/patch.out" 2>&1; then
                say "ok   $host $version $(basename "$diff")"
                checked=$((checked + 1))
            else
                say "FAIL $host $version $(basename "$diff") does not apply:"; cat "$work/patch.out" >&2
                failed=$((failed + 1))
            fi
        done
    done
done

say "$checked diffs apply, $failed failed, $skipped releases skipped"
[[ $failed -eq 0 ]]
