#include "inductor/cuda/cuda_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "src/base/errors.h"

namespace ff::cuda {
namespace {

std::mutex g_mu;
std::function<std::vector<std::string>()> g_nvrtc_dirs;

template <class T>
bool resolve(void* lib, const char* sym, const char* alt, T* out, std::string* missing) {
  void* p = dlsym(lib, sym);
  if (!p && alt) p = dlsym(lib, alt);
  *out = reinterpret_cast<T>(p);
  if (!p) *missing += std::string(missing->empty() ? "" : ", ") + sym;
  return p != nullptr;
}

struct DriverState {
  bool tried = false;
  std::unique_ptr<DriverApi> api;
  std::string why;
};

struct NvrtcState {
  bool tried = false;
  std::unique_ptr<NvrtcApi> api;
  std::string why;
};

DriverState& driver_state() {
  static DriverState s;
  return s;
}
NvrtcState& nvrtc_state() {
  static NvrtcState s;
  return s;
}

void load_driver(DriverState& s) {
  s.tried = true;
  // NB: RTLD_NOLOAD first: when torch already loaded a driver, use exactly that one.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    s.why = std::string("the CUDA driver (libcuda.so.1) could not be loaded") + (err ? std::string(": ") + err : "") +
            ". CUDA kernels need an NVIDIA GPU with its driver installed.";
    return;
  }
  auto api = std::make_unique<DriverApi>();
  std::string missing;
#define FF_RESOLVE(field, sym, alt, sig) resolve(lib, sym, alt, &api->field, &missing);
  FF_CUDA_DRIVER_FUNCS(FF_RESOLVE)
  if (!missing.empty()) {
    s.why = "the CUDA driver is too old for framefuse (missing " + missing + "); update the NVIDIA driver.";
    return;
  }
  CUresult r = api->cuInit(0);
  if (r != 0) {
    s.why = "cuInit failed (" + std::to_string(r) + "): no usable GPU or driver.";
    return;
  }
  api->cuDriverGetVersion(&api->version);
  s.api = std::move(api);
}

std::vector<std::string> nvrtc_candidates() {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> out;
  if (const char* p = std::getenv("FRAMEFUSE_NVRTC_PATH"); p && *p) out.push_back(p);
  for (const auto& n : names) out.push_back(n);  // ld.so's search: LD_LIBRARY_PATH, ldconfig
  std::vector<std::string> dirs;
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* p = std::getenv(env); p && *p) dirs.push_back(std::string(p) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const auto& n : names) out.push_back(d + "/" + n);
  return out;
}

// NB: libnvrtc dlopens libnvrtc-builtins.so.MAJOR.MINOR by name at its first compile; when it came
// from a folder outside ld.so's search path (a pip wheel), load the builtins from that folder first
// so that lookup finds them already in the process.
void preload_builtins(const std::string& nvrtc_path, int major, int minor) {
  std::string dir;
  Dl_info info;
  void* self = dlopen(nvrtc_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  void* sym = self ? dlsym(self, "nvrtcVersion") : nullptr;
  if (sym && dladdr(sym, &info) && info.dli_fname) dir = info.dli_fname;
  if (self) dlclose(self);
  if (dir.empty()) dir = nvrtc_path;
  size_t slash = dir.rfind('/');
  if (slash == std::string::npos) return;  // found through ld.so: so will the builtins be
  dir.resize(slash);
  std::string name = "libnvrtc-builtins.so." + std::to_string(major) + "." + std::to_string(minor);
  dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_GLOBAL);
}

bool try_nvrtc(const std::string& path, NvrtcState& s, std::string* tried) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *tried += "\n  " + path;
    return false;
  }
  auto api = std::make_unique<NvrtcApi>();
  std::string missing;
  FF_NVRTC_FUNCS(FF_RESOLVE)
#undef FF_RESOLVE
  if (!missing.empty()) {
    *tried += "\n  " + path + " (missing " + missing + ")";
    return false;
  }
  api->nvrtcVersion(&api->major, &api->minor);
  api->path = path;
  preload_builtins(path, api->major, api->minor);
  s.api = std::move(api);
  return true;
}

void load_nvrtc(NvrtcState& s) {
  s.tried = true;
  std::string tried;
  for (const auto& c : nvrtc_candidates())
    if (try_nvrtc(c, s, &tried)) return;
  if (g_nvrtc_dirs) {
    std::vector<std::string> dirs;
    try {
      dirs = g_nvrtc_dirs();
    } catch (...) {
    }
    for (const auto& d : dirs)
      for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
        if (try_nvrtc(d + "/" + n, s, &tried)) return;
  }
  s.why = "NVRTC (libnvrtc) was not found; tried:" + tried +
          "\nInstall it with `pip install nvidia-cuda-nvrtc` (the CUDA 13 runtime compiler), or set "
          "FRAMEFUSE_NVRTC_PATH to the library's path.";
}

}  // namespace

const DriverApi* driver_api(std::string* why) {
  std::lock_guard<std::mutex> lock(g_mu);
  DriverState& s = driver_state();
  if (!s.tried) load_driver(s);
  if (!s.api && why) *why = s.why;
  return s.api.get();
}

const NvrtcApi* nvrtc_api(std::string* why) {
  std::lock_guard<std::mutex> lock(g_mu);
  NvrtcState& s = nvrtc_state();
  if (!s.tried) load_nvrtc(s);
  if (!s.api && why) *why = s.why;
  return s.api.get();
}

const DriverApi& driver() {
  std::string why;
  const DriverApi* api = driver_api(&why);
  if (!api) throw UserError(why);
  return *api;
}

const NvrtcApi& nvrtc() {
  std::string why;
  const NvrtcApi* api = nvrtc_api(&why);
  if (!api) throw UserError(why);
  return *api;
}

void set_nvrtc_dir_provider(std::function<std::vector<std::string>()> provider) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_nvrtc_dirs = std::move(provider);
  // A provider registered after a failed attempt gets its chance.
  NvrtcState& s = nvrtc_state();
  if (s.tried && !s.api) s.tried = false;
}

std::string driver_error_string(CUresult r) {
  const DriverApi* api = driver_state().api.get();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api) {
    api->cuGetErrorName(r, &name);
    api->cuGetErrorString(r, &text);
  }
  if (!name) return "CUDA driver error " + std::to_string(r);
  return std::string(name) + (text ? std::string(": ") + text : "");
}

void check_driver(CUresult r, const char* what) {
  if (r != 0) throw_internal(__FILE__, __LINE__, std::string(what) + " failed: " + driver_error_string(r));
}

const DeviceInfo& device_info(int device) {
  static std::mutex mu;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  const DriverApi& d = driver();
  CUdevice dev = 0;
  check_driver(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  DeviceInfo info;
  info.index = device;
  check_driver(d.cuDeviceGetAttribute(&info.cc_major, kAttrComputeCapabilityMajor, dev), "cuDeviceGetAttribute");
  check_driver(d.cuDeviceGetAttribute(&info.cc_minor, kAttrComputeCapabilityMinor, dev), "cuDeviceGetAttribute");
  check_driver(d.cuDeviceGetAttribute(&info.sm_count, kAttrMultiprocessorCount, dev), "cuDeviceGetAttribute");
  check_driver(d.cuDeviceGetAttribute(&info.l2_bytes, kAttrL2CacheSize, dev), "cuDeviceGetAttribute");
  check_driver(d.cuDeviceGetAttribute(&info.max_shared_optin, kAttrMaxSharedPerBlockOptin, dev), "cuDeviceGetAttribute");
  return cache.emplace(device, info).first->second;
}

void ensure_context(int device) {
  const DriverApi& d = driver();
  CUcontext cur = nullptr;
  d.cuCtxGetCurrent(&cur);
  static std::mutex mu;
  static std::map<int, CUcontext> primary;
  CUcontext want = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = primary.find(device);
    if (it == primary.end()) {
      CUdevice dev = 0;
      check_driver(d.cuDeviceGet(&dev, device), "cuDeviceGet");
      check_driver(d.cuDevicePrimaryCtxRetain(&want, dev), "cuDevicePrimaryCtxRetain");
      primary.emplace(device, want);
    } else {
      want = it->second;
    }
  }
  if (cur != want) check_driver(d.cuCtxSetCurrent(want), "cuCtxSetCurrent");
}

CUfunction LoadedCubin::function(int device, const std::string& name) {
  ensure_context(device);
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(device, name);
  if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  const DriverApi& d = driver();
  CUmodule& mod = modules_[device];
  if (!mod) check_driver(d.cuModuleLoadData(&mod, cubin_.data()), ("cuModuleLoadData (" + name + ")").c_str());
  CUfunction fn = nullptr;
  check_driver(d.cuModuleGetFunction(&fn, mod, name.c_str()), ("cuModuleGetFunction " + name).c_str());
  functions_.emplace(key, fn);
  return fn;
}

}  // namespace ff::cuda
