# Sourced by the bench/*_device_run.sh scripts (one device-machine call each): the setup they share.
#   device_setup [torch]           OUT (made), J (default 16), the GPU in $OUT/gpu.txt, PREFIX for CMake:
#                                  GoogleTest built from $GTEST_SRC (the device image has none), and with
#                                  `torch` the Python package's libtorch (built with the C++11 ABI)
#   device_configure DIR [ARGS]    a Release Ninja configure of the repository into DIR ($OUT/configure.log)
#   device_build DIR TARGETS...    builds the targets ($OUT/build.log); prints the errors and fails otherwise
# The caller sets -u/-o pipefail and reads the functions' status.
device_setup() {
  OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
  J=${J:-16}
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.used --format=csv > "$OUT/gpu.txt" 2>&1
  cat "$OUT/gpu.txt"
  PREFIX=""
  [ "${1:-}" = torch ] && PREFIX=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  if [ -n "${GTEST_SRC:-}" ]; then
    cmake -S "$GTEST_SRC" -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX=/tmp/gtest >/dev/null &&
      cmake --build /tmp/gtest-build -j "$J" >/dev/null && cmake --install /tmp/gtest-build >/dev/null
    PREFIX="/tmp/gtest${PREFIX:+;$PREFIX}"
  fi
}

device_configure() {
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" "$@" > "$OUT/configure.log" 2>&1 ||
    { tail -30 "$OUT/configure.log"; return 1; }
}

device_build() {
  local dir=$1; shift
  cmake --build "$dir" -j "$J" --target "$@" > "$OUT/build.log" 2>&1 || { grep -E "error|Error" -A5 "$OUT/build.log" | head -60; return 1; }
}
