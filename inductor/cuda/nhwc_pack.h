// NHWC copies of several NCHW tensors in one kernel launch, into one buffer (an "arena").
//
// A channels-last graph (graph/passes/channels_last.h) takes its conv weights in NHWC. Keeping those
// copies between calls costs memory the size of the weights; converting each one inside its
// convolution costs a copy launch per convolution, which on a host-bound call (resnet18 b32) is a
// fifth of the time. This packs them all per call with one launch instead, into an arena that
// lives only from the first convolution that reads one to the last.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inductor/cuda/cuda_api.h"

namespace ff::cuda {

// One tensor of `o` x `c` x `hw` elements (NCHW contiguous, spatial dims flattened), copied to
// `dst` elements into the arena in NHWC order.
struct NhwcPiece {
  int64_t o = 0, c = 0, hw = 0;
  int64_t dst = 0;
  int64_t numel() const { return o * c * hw; }
};

// The CUDA source of the packing kernels (one per element size: 2, 4 and 8 bytes).
const std::string& nhwc_pack_source();

class NhwcPacker {
 public:
  // Pieces laid out one after another in the arena, each starting at a multiple of 256 bytes
  // (cuDNN's fastest kernels want aligned operands, as the caching allocator's blocks are).
  NhwcPacker(std::vector<NhwcPiece> pieces, int elem_size, std::string cubin);
  NhwcPacker(const NhwcPacker&) = delete;
  NhwcPacker& operator=(const NhwcPacker&) = delete;

  // Lays out pieces of these shapes: fills in each `dst`; returns the arena's size in elements.
  static int64_t layout(std::vector<NhwcPiece>& pieces, int elem_size);

  const std::vector<NhwcPiece>& pieces() const { return pieces_; }
  int64_t arena_elems() const { return arena_elems_; }
  // srcs[i]: piece i's NCHW data on `device`; arena: arena_elems() elements there. Launches on
  // `stream` (kMaxPieces pieces per launch).
  void launch(const std::vector<const void*>& srcs, void* arena, CUstream stream, int device);

  static constexpr int kMaxPieces = 32;
  static constexpr int64_t kTileBytes = 48 * 1024;  // shared memory per block for a row's transpose

 private:
  std::vector<NhwcPiece> pieces_;
  int elem_size_;
  int64_t arena_elems_ = 0;
  LoadedCubin cubin_;
};

}  // namespace ff::cuda
