// The C interface through which framefuse._torch_replay (src/torch_replay.cpp) launches CUDA graphs
// with _C's driver loader (cuda_api.h), so that the driver is loaded, and contexts made current,
// in one place. Published by _C as the capsule named below, in framefuse._C.cuda.
//
// Plain C types only: the two modules share no C++ type (see graph/python/torch_native_api.h).
#pragma once

#include <stddef.h>
#include <stdint.h>

#define FF_GRAPH_LAUNCH_ABI 1
#define FF_GRAPH_LAUNCH_CAPSULE "framefuse._C.cuda._GRAPH_LAUNCH"

typedef struct {
  uint32_t abi;   // FF_GRAPH_LAUNCH_ABI
  uint32_t size;  // sizeof(ff_graph_launch_api)
  // Launches the instantiated CUDA graph `exec` (a cudaGraphExec_t) on `stream` (a cudaStream_t)
  // of `device`, with that device's primary context made current. 0 on success; otherwise a
  // message in `err` (NUL-terminated, at most err_len bytes). Never raises, needs no GIL.
  int (*graph_launch)(int device, void* exec, void* stream, char* err, size_t err_len);
} ff_graph_launch_api;
