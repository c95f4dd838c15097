#!/usr/bin/env bash
# Runs a command with no C/C++/CUDA compiler, assembler or linker reachable: PATH is a fresh folder of
# links to every other program of the current PATH, and CC/CXX/CUDA_HOME are unset. Shows that an
# install from the wheel needs none of them.
set -euo pipefail
shadow="$(mktemp -d)"
trap 'rm -rf "$shadow"' EXIT
IFS=: read -ra dirs <<< "$PATH"
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] || continue
  for prog in "$dir"/*; do
    name="${prog##*/}"
    case "$name" in
      gcc*|g++*|cc|c++|c89*|c99*|cpp*|clang*|nvcc*|ccache|ld|ld.*|as|tcc|icx|icpx|*-linux-gnu-*) continue ;;
    esac
    [ -x "$prog" ] && [ ! -e "$shadow/$name" ] && ln -s "$prog" "$shadow/$name"
  done
done
unset CC CXX CUDA_HOME CUDA_PATH
PATH="$shadow" PADDLE_EXT_NO_COMPILER=1 "$@"
