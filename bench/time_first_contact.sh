#!/usr/bin/env bash
# Times README command 1 (install, quickstart, report) and command 2 (install with the test
# tools, the test suite) as a newcomer meets them: each from a fresh clone, with empty pip, wheel
# and verdict caches, printing each step's time and the install's own step times; then, in
# command 2's clone, `pytest -m "not slow"` (the quick suite), and both reports read in headless
# Chromium (bench/read_report.py). Command 2 takes most of an hour on 2 cores.
#
#   bench/time_first_contact.sh [--only 1|2] [--apt] [--repo PATH_OR_URL] [--branch NAME] [--keep]
#
#   --only 1|2   time one command (default: both, each in its own fresh clone)
#   --apt        also time the apt steps on their own: `apt-get update` and a reinstall of what
#                install.sh would install (bubblewrap; with command 2 chromium, chromium-driver,
#                iproute2, runsc). Off by default: a reinstall under other users' feet can fail
#                their browser or sandbox tests for a moment. On a fresh machine install.sh runs
#                them itself, and its own step times include them.
#   --repo/--branch  what to clone (default: this checkout, its current branch)
#   --keep       keep the work folder (printed) instead of removing it
#
# The machine's load average is printed beside every figure: on a shared machine read ratios,
# not absolute times. Figures for the README come from a quiet machine of the project's kind.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
only="" apt=0 keep=0 repo="$here" branch="$(git -C "$here" rev-parse --abbrev-ref HEAD)"
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --apt) apt=1; shift ;;
    --repo) repo="$2"; shift 2 ;;
    --branch) branch="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: bench/time_first_contact.sh [--only 1|2] [--apt] [--repo R] [--branch B] [--keep]" >&2
       exit 2 ;;
  esac
done
case "$only" in ""|1|2) ;; *) echo "--only takes 1 or 2" >&2; exit 2 ;; esac

work="$(mktemp -d /tmp/envduels-first-contact.XXXXXX)"
[ "$keep" = 1 ] || trap 'rm -rf "$work"' EXIT
summary="$work/summary.txt"
: > "$summary"

load() { cut -d' ' -f1 /proc/loadavg; }
# step NAME COMMAND...: runs COMMAND, prints and records its wall time and the load around it.
step() {
  local name="$1"; shift
  local l0 t0 t1 rc=0
  l0="$(load)"; t0="$(date +%s.%N)"
  "$@" || rc=$?
  t1="$(date +%s.%N)"
  local line
  line="$(printf '%-44s %7.1f s   load %s -> %s%s' "$name" "$(awk "BEGIN{print $t1 - $t0}")" "$l0" \
          "$(load)" "$([ "$rc" = 0 ] || echo "   FAILED (exit $rc)")")"
  echo "== $line"
  echo "$line" >> "$summary"
  return "$rc"
}

fresh_clone() {  # fresh_clone DIR: a new clone and empty caches for it
  git clone -q -b "$branch" "$repo" "$1"
  mkdir -p "$1.cache/wheels" "$1.cache/envduels"
}

# The caches a newcomer does not have: pip's, the llama wheel cache, the verdict cache.
in_clone() {  # in_clone DIR COMMAND...
  local dir="$1"; shift
  (cd "$dir" && PIP_NO_CACHE_DIR=1 ENVDUELS_WHEEL_CACHE="$dir.cache/wheels" \
     ENVDUELS_CACHE_DIR="$dir.cache/envduels" "$@")
}

install_steps() {  # the install's own step lines ("[install   12s] ..."), from its log
  grep -E '^\[install +[0-9]+s\]' "$1" | sed 's/^/    /' | tee -a "$summary"
}

if [ "$apt" = 1 ]; then
  pkgs=(bubblewrap)
  [ "$only" = 1 ] || pkgs+=(chromium chromium-driver iproute2 runsc)
  step "apt-get update" apt-get update -qq
  step "apt-get install --reinstall ${pkgs[*]}" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "${pkgs[@]}"
fi

if [ "$only" != 2 ]; then
  c1="$work/command1"
  fresh_clone "$c1"
  echo "README command 1 in $c1" | tee -a "$summary"
  t0="$(date +%s.%N)"
  step "scripts/install.sh" in_clone "$c1" bash -c 'scripts/install.sh > install.log 2>&1' \
    || { tail -20 "$c1/install.log"; exit 1; }
  install_steps "$c1/install.log"
  step "envduels run examples/quickstart.yaml" \
    in_clone "$c1" bash -c '.venv/bin/envduels run examples/quickstart.yaml -q > run.log 2>&1'
  step "envduels report runs/quickstart --html" \
    in_clone "$c1" bash -c '.venv/bin/envduels report runs/quickstart --html quickstart.html > report.log 2>&1'
  step "envduels demo --html demo.html" \
    in_clone "$c1" bash -c '.venv/bin/envduels demo --html demo.html > demo.log 2>&1'
  printf '%-44s %7.1f s\n' "README command 1 in all" "$(awk "BEGIN{print $(date +%s.%N) - $t0}")" \
    | tee -a "$summary"
  grep '^•' "$c1/report.log" | head -3 | sed 's/^/    quickstart says: /' | tee -a "$summary" || true
fi

if [ "$only" != 1 ]; then
  c2="$work/command2"
  fresh_clone "$c2"
  echo "README command 2 in $c2" | tee -a "$summary"
  t0="$(date +%s.%N)"
  step "scripts/install.sh --test --embed" \
    in_clone "$c2" bash -c 'scripts/install.sh --test --embed > install.log 2>&1' \
    || { tail -20 "$c2/install.log"; exit 1; }
  install_steps "$c2/install.log"
  step ".venv/bin/pytest -q" in_clone "$c2" bash -c '.venv/bin/pytest -q > pytest.log 2>&1' || true
  tail -1 "$c2/pytest.log" | sed 's/^/    pytest: /' | tee -a "$summary"
  printf '%-44s %7.1f s\n' "README command 2 in all" "$(awk "BEGIN{print $(date +%s.%N) - $t0}")" \
    | tee -a "$summary"
  # Not part of command 2: the quick suite a contributor runs, timed in the same clone after it.
  step '.venv/bin/pytest -q -m "not slow"' \
    in_clone "$c2" bash -c '.venv/bin/pytest -q -m "not slow" > pytest-not-slow.log 2>&1' || true
  tail -1 "$c2/pytest-not-slow.log" | sed 's/^/    pytest -m "not slow": /' | tee -a "$summary"
fi

# The quickstart's and the demo's reports read in headless Chromium (bench/read_report.py): what
# each section says, and no blank one. It needs selenium: command 2's venv has it.
reader=""
for py in "${c2:-}/.venv/bin/python" "$here/.venv/bin/python"; do
  [ -x "$py" ] && "$py" -c "import selenium" 2>/dev/null && { reader="$py"; break; }
done
if [ -n "${c1:-}" ] && [ -n "$reader" ] && [ -x /usr/bin/chromium ]; then
  step "read both reports in headless Chromium" \
    "$reader" "$here/bench/read_report.py" "$c1/quickstart.html" "$c1/demo.html" || true
else
  echo "(reports not read: needs command 1's reports, Chromium and a venv with selenium)" | tee -a "$summary"
fi

echo
echo "== summary ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(git -C "$repo" rev-parse --short "$branch"))"
cat "$summary"
