#!/usr/bin/env bash
# Installs what is missing (as root, with apt; otherwise prints the one command to run), then
# configures and builds libslice in ./build. Used by scripts/demo.sh and scripts/test.sh.
#   scripts/setup.sh [--python]   --python also prepares build/venv with the PyPI test clients
set -euo pipefail
cd "$(dirname "$0")/.."

with_python=0
[ "${1:-}" = "--python" ] && with_python=1

# libFuzzer's runtime, for the configuration's fuzz test: Debian 12 has it as libclang-rt-dev (and
# the versioned libclang-rt-14-dev); take the first name this distribution knows.
fuzzer_runtime=libclang-rt-dev
for candidate in libclang-rt-dev libclang-rt-14-dev; do
  if apt-cache show "$candidate" >/dev/null 2>&1; then fuzzer_runtime=$candidate; break; fi
done

# Debian packages: the build, GoogleTest, spdlog and fmt (header-only use), libunwind, SQLite
# (slicectl's metering archive), Python, and clang with libFuzzer (for the fuzz test, which CMake
# leaves out where they are missing).
packages=(cmake g++ make python3 python3-venv libgtest-dev libspdlog-dev libfmt-dev libunwind-dev
          libsqlite3-dev clang "$fuzzer_runtime"
          # The tools' JSON (slicectl status --json, slice-cdi-gen), header-only.
          nlohmann-json3-dev
          # The layout check of the C++ sources (tests/tools/format_check.sh).
          clang-format
          # The simulated GPU's module parser: compressed fatbin entries (Zstandard, LZ4).
          libzstd-dev liblz4-dev
          # Kubernetes: slice-device-plugin (gRPC, protobuf) and the manifests' test (YAML).
          libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc pkg-config python3-yaml
          # slicectl metrics as its consumers read it: prometheus and promtool (one package on
          # Debian 12) for tests/slicectl/prometheus_grafana_test.py, which starts its own server on
          # 127.0.0.1. On a machine with systemd the package also enables a prometheus service
          # (port 9090): `systemctl disable --now prometheus` if it is not wanted.
          prometheus
          # The Debian packages (cpack -G DEB; packaging/): dpkg-shlibdeps (dpkg-dev) computes their
          # Depends and CPack reads the binaries with file; lintian checks them in the deb_packages
          # test, which is skipped without these.
          dpkg-dev file lintian
          # Containers as users run them, in tests/k8s (k8s_podman_cdi, k8s_podman_allocate,
          # k8s_plugin_image): podman with runc, as root, each test with a private store in its own
          # folder; skipped without them. On a machine with systemd, Debian's podman also enables
          # its API socket and services: `systemctl disable --now podman.socket podman.service
          # podman-restart.service podman-auto-update.timer` if they are not wanted.
          podman runc)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3-venv is only needed when python3 cannot make a venv by itself (a non-Debian python).
if [[ " ${missing[*]} " == *" python3-venv "* ]] && python3 -m venv --help >/dev/null 2>&1; then
  missing=("${missing[@]/python3-venv}")
fi
if [[ " ${missing[*]} " == *" python3 "* ]] && command -v python3 >/dev/null; then
  missing=("${missing[@]/python3}")
fi
read -r -a missing <<< "${missing[*]}"
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages. Run, as root:"
    echo "  apt-get update && apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

# The CUDA toolkit (driver API headers; nvcc for the sample kernels) is not a Debian package.
if [ -z "${CUDA_HOME:-}" ]; then
  if command -v nvcc >/dev/null; then CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else CUDA_HOME=/usr/local/cuda; fi
fi
if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
  echo "setup: the CUDA toolkit was not found (no $CUDA_HOME/include/cuda.h)."
  echo "  Install the CUDA toolkit, or set CUDA_HOME to where it is."
  exit 1
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON  # warnings are errors in CI
cmake_args=(-S . -B build -DCUDA_HOME="$CUDA_HOME" -DSLICE_WERROR=$werror)

if [ $with_python = 1 ]; then
  if [ ! -x build/venv/bin/python ]; then
    mkdir -p build
    python3 -m venv build/venv
  fi
  # Real clients that nobody here wrote, from PyPI: NVIDIA's cuda-bindings, nvidia-ml-py and nvitop;
  # prometheus-client reads slicectl metrics in its tests.
  build/venv/bin/python -m pip install -q --disable-pip-version-check cuda-bindings nvidia-ml-py nvitop pytest \
    prometheus-client
  cmake_args+=(-DSLICE_TEST_PYTHON="$PWD/build/venv/bin/python")
fi

mkdir -p build
if ! cmake "${cmake_args[@]}" > build/configure.log 2>&1; then
  cat build/configure.log
  echo "setup: configuring failed (log: build/configure.log)"
  exit 1
fi
echo "setup: building in build/ (log: build/build.log)"
if ! cmake --build build -j2 > build/build.log 2>&1; then
  grep -E "error|Error" build/build.log | head -40
  echo "setup: the build failed (full log: build/build.log)"
  exit 1
fi
