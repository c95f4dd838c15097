#!/usr/bin/env bash
# Runs a command with no C/C++/CUDA compiler, assembler or linker reachable: each PATH folder that holds
# one is replaced by a fresh folder of links to its other programs (folders without one, e.g. a venv's
# bin, stay as they are), and CC/CXX/CUDA_HOME are unset. Shows that an install from the wheel needs none.
set -euo pipefail
is_compiler() {
  case "$1" in
    gcc*|g++*|cc|c++|c89*|c99*|cpp*|clang*|nvcc*|ccache|ld|ld.*|as|tcc|icx|icpx|*-linux-gnu-*) return 0 ;;
  esac
  return 1
}
shadows="$(mktemp -d)"
trap 'rm -rf "$shadows"' EXIT
new_path=""
IFS=: read -ra dirs <<< "$PATH"
for i in "${!dirs[@]}"; do
  dir="${dirs[$i]}"
  [ -d "$dir" ] || continue
  has_compiler=0
  for prog in "$dir"/*; do
    if is_compiler "${prog##*/}" && [ -x "$prog" ]; then has_compiler=1; break; fi
  done
  if [ "$has_compiler" = 0 ]; then
    new_path="$new_path:$dir"
    continue
  fi
  shadow="$shadows/$i"
  mkdir "$shadow"
  for prog in "$dir"/*; do
    name="${prog##*/}"
    is_compiler "$name" && continue
    [ -x "$prog" ] && ln -s "$prog" "$shadow/$name"
  done
  new_path="$new_path:$shadow"
done
unset CC CXX CUDA_HOME CUDA_PATH
PATH="${new_path#:}" PADDLE_EXT_NO_COMPILER=1 "$@"
