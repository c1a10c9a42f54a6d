#!/usr/bin/env bash
# Build llama.cpp's own llama-server and llama-bench from the llama.cpp sources vendored in the
# llama-cpp-python 0.3.36 sdist (the same engine docqa runs on), CPU backend, into bench/.build/.
# Takes ~10 minutes on 2 cores. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")"
BUILD=.build
mkdir -p "$BUILD"
if [ ! -x "$BUILD/bin/llama-server" ] || [ ! -x "$BUILD/bin/llama-bench" ]; then
    if [ ! -d "$BUILD/src" ]; then
        ../.venv/bin/pip download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$BUILD/sdist"
        mkdir -p "$BUILD/src"
        tar xzf "$BUILD"/sdist/llama_cpp_python-0.3.36.tar.gz -C "$BUILD/src" --strip-components=1
    fi
    cmake -S "$BUILD/src/vendor/llama.cpp" -B "$BUILD/cmake" -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
        -DBUILD_SHARED_LIBS=OFF > "$BUILD/cmake.log"
    cmake --build "$BUILD/cmake" --target llama-server llama-bench -j "$(nproc)" > "$BUILD/build.log"
    mkdir -p "$BUILD/bin"
    cp "$BUILD/cmake/bin/llama-server" "$BUILD/cmake/bin/llama-bench" "$BUILD/bin/"
fi
"$BUILD/bin/llama-server" --version 2>&1 | head -n 2
