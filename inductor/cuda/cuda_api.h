// The CUDA driver and NVRTC, loaded with dlopen (DESIGN.md decision 7): the module imports and the
// CPU code generator works on machines with no GPU, no driver and no NVRTC.
//
// NB: the prototypes are declared here rather than taken from cuda.h / nvrtc.h, so the build needs
// no CUDA headers at all and CI compiles the same code as the GPU machines. Only the handful of
// entry points framefuse calls are listed; their ABI has been stable across CUDA 11-13.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <type_traits>
#include <string>
#include <vector>

namespace ff::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraphExec = struct CUgraphExec_st*;
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;

// Attribute numbers from cuda.h (stable ABI values).
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrL2CacheSize = 38;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrMaxSharedPerBlockOptin = 97;
constexpr int kFuncAttrMaxDynamicShared = 8;
constexpr int kCudaErrorNotInitialized = 3;

// X(field, symbol tried first, fallback symbol or nullptr, signature)
// clang-format off
#define FF_CUDA_DRIVER_FUNCS(X)                                                                         \
  X(cuInit, "cuInit", nullptr, CUresult (*)(unsigned))                                                 \
  X(cuDriverGetVersion, "cuDriverGetVersion", nullptr, CUresult (*)(int*))                             \
  X(cuDeviceGet, "cuDeviceGet", nullptr, CUresult (*)(CUdevice*, int))                                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", nullptr, CUresult (*)(int*, int, CUdevice))          \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", nullptr, CUresult (*)(CUcontext*, CUdevice)) \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", nullptr, CUresult (*)(CUcontext*))                             \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", nullptr, CUresult (*)(CUcontext))                              \
  X(cuModuleLoadData, "cuModuleLoadData", nullptr, CUresult (*)(CUmodule*, const void*))               \
  X(cuModuleUnload, "cuModuleUnload", nullptr, CUresult (*)(CUmodule))                                 \
  X(cuModuleGetFunction, "cuModuleGetFunction", nullptr, CUresult (*)(CUfunction*, CUmodule, const char*)) \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", nullptr, CUresult (*)(CUfunction, int, int))             \
  X(cuLaunchKernel, "cuLaunchKernel", nullptr,                                                          \
    CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                 CUstream, void**, void**))                                                             \
  X(cuGetErrorName, "cuGetErrorName", nullptr, CUresult (*)(CUresult, const char**))                   \
  X(cuGetErrorString, "cuGetErrorString", nullptr, CUresult (*)(CUresult, const char**))               \
  X(cuEventCreate, "cuEventCreate", nullptr, CUresult (*)(CUevent*, unsigned))                         \
  X(cuEventRecord, "cuEventRecord", nullptr, CUresult (*)(CUevent, CUstream))                          \
  X(cuEventSynchronize, "cuEventSynchronize", nullptr, CUresult (*)(CUevent))                          \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", CUresult (*)(float*, CUevent, CUevent)) \
  X(cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy", CUresult (*)(CUevent))                      \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", nullptr, CUresult (*)(CUstream, int*))                \
  X(cuGraphLaunch, "cuGraphLaunch", nullptr, CUresult (*)(CUgraphExec, CUstream))
// clang-format on

// clang-format off
#define FF_NVRTC_FUNCS(X)                                                                               \
  X(nvrtcVersion, "nvrtcVersion", nullptr, nvrtcResult (*)(int*, int*))                                \
  X(nvrtcGetErrorString, "nvrtcGetErrorString", nullptr, const char* (*)(nvrtcResult))                 \
  X(nvrtcCreateProgram, "nvrtcCreateProgram", nullptr,                                                  \
    nvrtcResult (*)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*)) \
  X(nvrtcCompileProgram, "nvrtcCompileProgram", nullptr, nvrtcResult (*)(nvrtcProgram, int, const char* const*)) \
  X(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", nullptr, nvrtcResult (*)(nvrtcProgram, size_t*))  \
  X(nvrtcGetProgramLog, "nvrtcGetProgramLog", nullptr, nvrtcResult (*)(nvrtcProgram, char*))           \
  X(nvrtcGetCUBINSize, "nvrtcGetCUBINSize", nullptr, nvrtcResult (*)(nvrtcProgram, size_t*))           \
  X(nvrtcGetCUBIN, "nvrtcGetCUBIN", nullptr, nvrtcResult (*)(nvrtcProgram, char*))                     \
  X(nvrtcDestroyProgram, "nvrtcDestroyProgram", nullptr, nvrtcResult (*)(nvrtcProgram*))
// clang-format on

struct DriverApi {
#define FF_API_FIELD(field, sym, alt, sig) std::type_identity_t<sig> field = nullptr;
  FF_CUDA_DRIVER_FUNCS(FF_API_FIELD)
  int version = 0;  // cuDriverGetVersion, e.g. 13000
};

struct NvrtcApi {
  FF_NVRTC_FUNCS(FF_API_FIELD)
#undef FF_API_FIELD
  int major = 0, minor = 0;
  std::string path;  // the library that was loaded
};

// Loaded on first use (thread-safe). Null when unavailable; *why then says what was tried and what
// to do. The driver is also initialized (cuInit) here.
const DriverApi* driver_api(std::string* why = nullptr);
const NvrtcApi* nvrtc_api(std::string* why = nullptr);

// As above, but throw ff::UserError with the explanation.
const DriverApi& driver();
const NvrtcApi& nvrtc();

// Extra directories searched for libnvrtc after the usual places. The Python layer registers a
// provider that asks for the `nvidia-cuda-nvrtc` wheel's library folder; it is called once, at the
// first load attempt, only when the usual places failed.
void set_nvrtc_dir_provider(std::function<std::vector<std::string>()> provider);

// "CUDA_ERROR_OUT_OF_MEMORY: out of memory" (or the number when the driver is absent).
std::string driver_error_string(CUresult r);

// Throws ff::InternalError naming `what` and the driver error when r != 0.
void check_driver(CUresult r, const char* what);

// The device's properties framefuse uses (the driver must be loaded).
struct DeviceInfo {
  int index = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int max_shared_optin = 0;
  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};
const DeviceInfo& device_info(int device);

// Makes device `device`'s primary context current on this thread (what torch uses).
void ensure_context(int device);

// A cubin of hand-written kernels (NHWC packing, attention), loaded on a device the first time one
// of its functions is asked for there. Thread-safe; the modules stay loaded for the process.
class LoadedCubin {
 public:
  explicit LoadedCubin(std::string cubin) : cubin_(std::move(cubin)) {}
  LoadedCubin(const LoadedCubin&) = delete;
  LoadedCubin& operator=(const LoadedCubin&) = delete;
  // Also makes the device's primary context current on this thread.
  CUfunction function(int device, const std::string& name);

 private:
  std::string cubin_;
  std::mutex mu_;
  std::map<int, CUmodule> modules_;
  std::map<std::pair<int, std::string>, CUfunction> functions_;
};

}  // namespace ff::cuda
