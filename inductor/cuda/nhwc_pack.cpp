#include "inductor/cuda/nhwc_pack.h"

#include <algorithm>

#include "src/base/errors.h"

namespace ff::cuda {
namespace {

// NB: the same layout on both sides of cuLaunchKernel (8-byte aligned fields, no padding inside).
struct PackPiece {
  const void* src;
  unsigned long long dst;    // element offset in the arena
  unsigned long long begin;  // first row (output channel) of this piece in the launch
  unsigned int c, hw;
};
struct PackTable {
  PackPiece piece[NhwcPacker::kMaxPieces];
  unsigned long long total;  // rows
  unsigned int n;
};
static_assert(sizeof(PackPiece) == 32 && sizeof(PackTable) == 32 * NhwcPacker::kMaxPieces + 16);

const char* kernel_name(int elem_size) {
  switch (elem_size) {
    case 2: return "ff_nhwc_pack2";
    case 4: return "ff_nhwc_pack4";
    case 8: return "ff_nhwc_pack8";
  }
  throw InternalError("NHWC packing of " + std::to_string(elem_size) + "-byte elements");
}

}  // namespace

const std::string& nhwc_pack_source() {
  static const std::string text = R"CUDA(// framefuse: NCHW -> NHWC copies of several tensors in one launch
struct FfPackPiece { const void* src; unsigned long long dst, begin; unsigned int c, hw; };
struct FfPackTable { FfPackPiece piece[)CUDA" +
                                  std::to_string(NhwcPacker::kMaxPieces) + R"CUDA(]; unsigned long long total; unsigned int n; };
extern __shared__ __align__(16) unsigned char ff_pack_smem[];

// One block per row (one output channel o of one tensor: c x hw elements). The row is read
// coalesced into shared memory, then written coalesced in NHWC order (an odd hw, 3x3 and 7x7
// kernels, reads shared memory without bank conflicts). Rows larger than `tile` elements are
// transposed straight from global memory; 1x1 kernels are plain copies.
template <typename T>
__device__ __forceinline__ void ff_nhwc_pack(const FfPackTable& t, T* __restrict__ arena, unsigned int tile) {
  T* sm = reinterpret_cast<T*>(ff_pack_smem);
  for (unsigned long long row = blockIdx.x; row < t.total; row += gridDim.x) {
    unsigned int k = 0;
    while (k + 1 < t.n && row >= t.piece[k + 1].begin) ++k;
    const FfPackPiece& p = t.piece[k];
    unsigned int n = p.c * p.hw;
    const T* src = static_cast<const T*>(p.src) + (row - p.begin) * n;
    T* dst = arena + p.dst + (row - p.begin) * n;
    if (p.hw == 1) {
      for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    } else if (n <= tile) {
      for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) sm[i] = src[i];
      __syncthreads();
      for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) dst[j] = sm[(j % p.c) * p.hw + j / p.c];
      __syncthreads();
    } else {
      for (unsigned int j = threadIdx.x; j < n; j += blockDim.x) dst[j] = src[(j % p.c) * p.hw + j / p.c];
    }
  }
}

extern "C" __global__ void ff_nhwc_pack2(const __grid_constant__ FfPackTable t, unsigned short* arena, unsigned int tile) { ff_nhwc_pack(t, arena, tile); }
extern "C" __global__ void ff_nhwc_pack4(const __grid_constant__ FfPackTable t, unsigned int* arena, unsigned int tile) { ff_nhwc_pack(t, arena, tile); }
extern "C" __global__ void ff_nhwc_pack8(const __grid_constant__ FfPackTable t, unsigned long long* arena, unsigned int tile) { ff_nhwc_pack(t, arena, tile); }
)CUDA";
  return text;
}

int64_t NhwcPacker::layout(std::vector<NhwcPiece>& pieces, int elem_size) {
  const int64_t align = 256 / elem_size;
  int64_t at = 0;
  for (NhwcPiece& p : pieces) {
    FF_CHECK(p.numel() < (int64_t{1} << 32), "an NHWC piece of 2^32 elements or more");
    p.dst = at;
    at += (p.numel() + align - 1) / align * align;
  }
  return at;
}

NhwcPacker::NhwcPacker(std::vector<NhwcPiece> pieces, int elem_size, std::string cubin)
    : pieces_(std::move(pieces)), elem_size_(elem_size), cubin_(std::move(cubin)) {
  kernel_name(elem_size);  // checks the size
  arena_elems_ = layout(pieces_, elem_size_);
}

void NhwcPacker::launch(const std::vector<const void*>& srcs, void* arena, CUstream stream, int device) {
  FF_CHECK(srcs.size() == pieces_.size(), "one source per NHWC piece");
  CUfunction fn = cubin_.function(device, kernel_name(elem_size_));
  for (size_t first = 0; first < pieces_.size(); first += kMaxPieces) {
    PackTable t{};
    size_t n = std::min(pieces_.size() - first, static_cast<size_t>(kMaxPieces));
    unsigned long long rows = 0;
    int64_t widest = 0;
    for (size_t k = 0; k < n; ++k) {
      const NhwcPiece& p = pieces_[first + k];
      t.piece[k] = PackPiece{srcs[first + k], static_cast<unsigned long long>(p.dst), rows, static_cast<unsigned int>(p.c),
                             static_cast<unsigned int>(p.hw)};
      rows += static_cast<unsigned long long>(p.o);
      widest = std::max(widest, p.c * p.hw);
    }
    t.total = rows;
    t.n = static_cast<unsigned int>(n);
    if (rows == 0) continue;
    // NB: within the 48 KB of shared memory a block may have without opting in.
    unsigned tile = static_cast<unsigned>(std::min<int64_t>(widest, kTileBytes / elem_size_));
    unsigned smem = tile * static_cast<unsigned>(elem_size_);
    unsigned grid = static_cast<unsigned>(std::min<unsigned long long>(rows, 1u << 16));
    void* args[] = {&t, &arena, &tile};
    check_driver(driver().cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, smem, stream, args, nullptr), "cuLaunchKernel ff_nhwc_pack");
  }
}

}  // namespace ff::cuda
