// The cub pieces the kernels use, for the emulated CUDA runtime (docs/gpu_emulation.md).
#pragma once

#include "cub/block/block_reduce.cuh"
#include "cub/block/block_scan.cuh"
#include "cub/device/device_radix_sort.cuh"
