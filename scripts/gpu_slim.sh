#!/usr/bin/env bash
# The working tree a GPU check sends (issue 46): the device tool sends every tracked and untracked-not-ignored file,
# 64 MiB in all per call, and this checkout is over that (results' jsonl, training data, three heads). `on` moves to a
# temporary detached commit without the paths scripts/gpu_pack.py's SLIM names (their files stay on disk, ignored
# through .git/info/exclude), so only code, tests and the EAGLE-3 head travel; `off` returns to the branch it left
# and forgets the exclusions. Refuses to start with uncommitted changes (they would travel, or be lost).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
SLIM=(docs data specdec/heads/smollm2-135m-instruct/eagle1 specdec/heads/smollm2-135m-instruct/hass)
MARK="# specdec gpu_slim"
exclude=.git/info/exclude
case "${1:?on or off}" in
on)
    git diff --quiet && git diff --cached --quiet || { echo "commit or stash your changes first" >&2; exit 1; }
    git rev-parse --abbrev-ref HEAD > .git/specdec-gpu-branch
    git checkout -q --detach
    git rm -r -q --cached "${SLIM[@]}"
    { echo "$MARK"; for p in "${SLIM[@]}"; do echo "/$p/"; done; } >> "$exclude"
    git -c user.name=gpu -c user.email=gpu@local commit -q -m "gpu_slim: temporary tree without ${SLIM[*]}"
    echo "slim: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes tracked; 'bash scripts/gpu_slim.sh off' to return"
    ;;
off)
    branch=$(cat .git/specdec-gpu-branch 2>/dev/null || echo main)
    git checkout -q "$branch"  # while the slimmed files are still ignored (git may overwrite ignored files)
    grep -v -x -F -f <(for p in "${SLIM[@]}"; do echo "/$p/"; done; echo "$MARK") "$exclude" > "$exclude.tmp" || true
    mv "$exclude.tmp" "$exclude"
    rm -f .git/specdec-gpu-branch
    echo "back on $branch"
    ;;
*)
    echo "usage: bash scripts/gpu_slim.sh on|off" >&2
    exit 2
    ;;
esac
