#!/usr/bin/env bash
# One prepared run for a lent GPU machine: build docqa's patched llama.cpp with CUDA there, make a
# random-weight Qwen3.5-27B-shaped GGUF with its MTP block, and measure docqa on it
# (bench/device/measure.py); one JSON and one markdown table under $OUT.
#
#   here, first:   python3 -m bench.device.pack       (makes .device/: the trimmed, patched sdist and
#                                                      the wheels the device lacks; prints the carried size)
#   on the device: bash bench/device/run.sh           (the device tool's run, carry [".device"],
#                                                      timeout_s 600: it ends within DEVICE_BUDGET_S)
#   here, to try:  bash bench/device/run.sh --cpu     (the tiny test model, the installed llama-cpp-python,
#                                                      the carried tree configured but not compiled)
#
# The lent machine (an H200, 16 cores, Python 3.12 with numpy and PyTorch's CUDA 13 wheels, nvcc 13,
# CMake and ninja, no network) starts bare each time; this script ends within DEVICE_BUDGET_S
# seconds (default 530: 9 minutes less a margin), taking the model's size from the time the build
# left. A command run that way is given 10 minutes at most; README.md ("A real model on a GPU") says
# what was measured where.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
mode=gpu
[ "${1:-}" = "--cpu" ] && mode=cpu
started=$(date +%s)
budget=${DEVICE_BUDGET_S:-530}
[ "$mode" = cpu ] && budget=${DEVICE_BUDGET_S:-420}
deadline=$((started + budget))
out=${OUT:-$root/bench/results/tmp/device-$mode}
work=${DEVICE_WORK:-${TMPDIR:-/tmp}/docqa-device-$mode}
py=${PYTHON:-python3}
arch=${CUDA_ARCH:-90}
sdist=llama_cpp_python-0.3.36
mkdir -p "$out" && rm -rf "$work" && mkdir -p "$work" || exit 1
log() { echo "[$(($(date +%s) - started)) s] $*"; }

if [ "$mode" = cpu ]; then
  "$py" -m bench.device.pack || exit 1  # (re)makes .device when stale; prints the carried size
else
  "$py" -m bench.device.pack --size
  log "installing the carried wheels"
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" .device/whl/*.whl \
    || exit 1
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

log "unpacking the carried sdist and checking docqa's patches are in (runtime/llama_build.py)"
cp ".device/$sdist.tar.gz" "$work/" && "$py" -m runtime.llama_build "$work" || exit 1
tree="$work/$sdist"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAVA_BUILD=OFF)
if [ "$mode" = gpu ]; then
  kit=$("$py" -m runtime.cuda_toolkit "$work/cuda") || exit 1
  echo "$kit"
  root_kit="$work/cuda"
  cmake_args+=(-DGGML_CUDA=on "-DCMAKE_CUDA_ARCHITECTURES=$arch-real" "-DCUDAToolkit_ROOT=$root_kit"
               "-DCMAKE_CUDA_COMPILER=$root_kit/bin/nvcc")
elif [ -x "$root/.cuda/toolkit/bin/nvcc" ]; then  # make cuda-check's toolkit: configure with CUDA as there
  root_kit="$root/.cuda/toolkit"
  cmake_args+=(-DGGML_CUDA=on "-DCMAKE_CUDA_ARCHITECTURES=$arch-real" "-DCUDAToolkit_ROOT=$root_kit"
               "-DCMAKE_CUDA_COMPILER=$root_kit/bin/nvcc")
fi
log "configuring: cmake ${cmake_args[*]}"
t0=$(date +%s)
cmake -S "$tree" -B "$work/build" "${cmake_args[@]}" > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
configure_s=$(($(date +%s) - t0))
build_json="{\"configure_s\": $configure_s, \"summary\": \"installed llama-cpp-python (CPU); carried tree configured in ${configure_s} s, not compiled\"}"

if [ "$mode" = gpu ]; then
  jobs=$(nproc)
  log "building libllama with CUDA for sm_$arch on $jobs jobs (ninja)"
  t0=$(date +%s)
  # Stopped while a minute is left, so that the run still ends within its budget with the log's tail.
  timeout $((deadline - $(date +%s) - 60)) cmake --build "$work/build" --target llama -j "$jobs" > "$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; log "build failed or ran out of time"; exit 1; }
  build_s=$(($(date +%s) - t0))
  log "built in $build_s s"
  mkdir -p "$work/lib" && cp -a "$work/build/bin/"lib*.so* "$work/lib/" || exit 1
  export LLAMA_CPP_LIB_PATH="$work/lib"
  export LD_LIBRARY_PATH="$work/lib:$root_kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PYTHONPATH="$tree:$PYTHONPATH"
  # The C++ runtime the build was compiled against: the lent image's compiler (/opt/gcc there) is not
  # the system's, and a library built by a newer g++ may crash against an older libstdc++ mapped first
  # (the first two runs there died inside the model load, at its first std::stringstream).
  # DEVICE_SYSTEM_STDCXX=1 keeps the loader's own choice.
  system_ld=$LD_LIBRARY_PATH
  stdcxx=$("${CXX:-c++}" -print-file-name=libstdc++.so.6)
  if [ "${DEVICE_SYSTEM_STDCXX:-0}" != 1 ] && [[ "$stdcxx" = /* ]] && [ -f "$stdcxx" ]; then
    export LD_LIBRARY_PATH="$(dirname "$(readlink -f "$stdcxx")"):$LD_LIBRARY_PATH"
    log "the compiler's libstdc++ first: $(readlink -f "$stdcxx")"
  fi
  ldd "$work/lib/libllama.so" | grep -E 'stdc\+\+|libgcc_s' | sed 's/^/  libllama: /'
  nvcc_v=$("$root_kit/bin/nvcc" --version | grep release | sed 's/.*release //')
  "$py" -m runtime.cuda_check --inspect > "$out/inspect.json" 2> "$out/inspect.log" || { cat "$out/inspect.log"; exit 1; }
  "$py" - "$out/inspect.json" <<'EOF' || exit 1
import json, sys
found = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f"ggml's backends: {found['registry']}; CUDA ARCHS {found['cuda_archs']}; gpu offload {found['gpu_offload']}")
if not found["registry"].get("CUDA") or not found["gpu_offload"]:
    sys.exit("the CUDA build found no GPU: not measuring on the CPU")
EOF
  tail -c 1500 "$out/inspect.json" && rm -f "$out/inspect.json" "$out/inspect.log" "$out/configure.log"
  tail -n 3 "$out/build.log" && rm -f "$out/build.log"
  build_json="{\"build_s\": $build_s, \"configure_s\": $configure_s, \"jobs\": $jobs, \"nvcc\": \"$nvcc_v\", \"summary\": \"libllama with CUDA (nvcc $nvcc_v, sm_$arch) built here in $build_s s on $jobs jobs\"}"
fi

# An attempt writes result.json, result.md and llama.log (llama.cpp's lines as they come) into its
# folder. A crash inside llama.cpp (a signal: no Python error to record) is followed, while time is
# left, by probes (bench/device/probe.py: the load alone, in variations, and once under cuda-gdb for
# the native backtrace; probes.txt, gdb.txt), then by the measurements without the MTP block.
# DEVICE_DIAGNOSE=1 runs the probes at once instead of the measurements.
attempt() {
  local dir=$1; shift
  mkdir -p "$dir"
  PYTHONFAULTHANDLER=1 "$py" -m bench.device.measure --mode "$mode" --out "$dir" --work "$work/measure" \
    --deadline "$deadline" --started "$started" --build "$build_json" --llama-log "$dir/llama.log" \
    ${DEVICE_LAYERS:+--layers "$DEVICE_LAYERS"} ${DEVICE_SIZES:+--sizes "$DEVICE_SIZES"} "$@"
}
left() { echo $((deadline - $(date +%s))); }
crashed() {  # $1: the attempt's exit status, $2: its folder
  [ "$1" -ge 128 ] || return 1
  log "measure died by signal $(($1 - 128)); llama.cpp's last lines:"
  tail -n 12 "$2/llama.log" 2>/dev/null
  rm -f "$2/result.md"  # the JSON holds what it had; the out folder takes 8 files at most
  rm -rf /dev/shm/docqa-device-*  # the crashed run's GGUF
}
probe() {  # a label, then bench.device.probe's arguments; one line each in probes.txt
  local label=$1 t0 rc; shift
  [ "$(left)" -gt 15 ] || { echo "probe $label: no time left" >> "$out/probes.txt"; return 1; }
  t0=$(date +%s)
  timeout $(($(left) - 5)) "$py" -m bench.device.probe "$@" > "$work/probe.txt" 2>&1
  rc=$?
  echo "probe $label: exit $rc in $(($(date +%s) - t0)) s: $(grep '^probe:' "$work/probe.txt" | tail -n 1)" \
    | tee -a "$out/probes.txt"
  [ $rc -eq 0 ] || tail -n 3 "$work/probe.txt" | tee -a "$out/probes.txt"
  return $rc
}
diagnose() {
  local small="$work/small.gguf" tiny="$work/tiny.gguf"
  "$py" -m bench.device.probe --write-27b "$small" --layers 4 && "$py" -m bench.device.probe --write-tiny "$tiny" \
    || return 1
  if command -v cuda-gdb > /dev/null && [ "$(left)" -gt 60 ]; then
    log "the load of Qwen3.5-27B's shapes at 4 blocks under cuda-gdb"
    timeout $(($(left) / 2)) cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info sharedlibrary" \
      --args "$py" -m bench.device.probe "$small" > "$out/gdb.txt" 2>&1
    grep -n -B2 -A30 "received signal" "$out/gdb.txt" | head -n 50
  fi
  probe "the tiny model, CUDA" "$tiny"
  probe "27B shapes at 4 blocks, CUDA" "$small"
  [ -n "${system_ld+set}" ] && LD_LIBRARY_PATH=$system_ld probe "27B shapes at 4 blocks, the loader's libstdc++" "$small"
  probe "27B shapes at 4 blocks, no MTP" "$small" --no-mtp
  probe "27B shapes at 4 blocks, llama.cpp's own logger" "$small" --no-callback
  probe "27B shapes at 4 blocks, no layer on the GPU" "$small" --ngl 0
}
log "measuring until $((deadline - started)) s"
if [ "${DEVICE_DIAGNOSE:-0}" = 1 ]; then
  diagnose
  rc=1
else
  attempt "$out"
  rc=$?
  if crashed $rc "$out" && [ "$(left)" -gt 60 ]; then
    diagnose
    if [ "$(left)" -gt 150 ] && grep -q "no MTP: exit 0" "$out/probes.txt"; then
      log "again without the MTP block"
      attempt "$out/no-mtp" --no-mtp
      rc=$?
      crashed $rc "$out/no-mtp"
    fi
  fi
fi
rm -rf "$work/measure"  # the GGUF and the snapshots (tens of GB on the device)
log "done (exit $rc): $out/result.json, $out/result.md"
exit $rc
