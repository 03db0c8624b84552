#pragma once

#include <string>
#include <vector>

#include "inductor/loop_ir.h"

namespace ff::inductor {

// An elementwise epilogue of an extern call (conv -> batch_norm -> relu, mm -> bias -> gelu) that
// reads the extern's fresh result at the very element it stores, where nothing reads that result
// afterwards, stores into it instead of into a new buffer (no allocation, no write-allocate
// traffic). Only after extern ops that always return new memory (convolutions, matrix products),
// and only for buffers the memory plan left on their own. Each rewrite is appended to `log`.
loop::Program write_epilogues_in_place(const loop::Program& p, std::vector<std::string>* log);

}  // namespace ff::inductor
