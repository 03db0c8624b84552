// Running a kernel's parallel loop on several threads.
//
// NB: kernels share torch's OpenMP runtime instead of starting a pool of their own: two runtimes
// in one process busy-wait against each other (toolchain facts §3). The libgomp that torch loaded
// (the system one, or the copy a wheel bundles under another name) is found among the loaded
// objects and its GOMP_parallel drives our loops. Without one (a torch built with another OpenMP, a
// process without torch), a pool of our own runs them: threads started on first use and kept.
#pragma once

#include <cstdint>
#include <string>

#include "inductor/cpu_codegen.h"

namespace ff::inductor {

// Runs fn(buffers, begin, end) over [0, extent) split into `threads` contiguous ranges.
void parallel_run(KernelFn fn, void** buffers, int64_t extent, int threads);

// Which runtime parallel_run uses: "libgomp (<path>)" or "thread pool".
std::string parallel_backend();

// Threads the fallback pool has started in this process so far (0 where libgomp runs the loops).
int parallel_pool_threads();

}  // namespace ff::inductor
