// The CPU renderer (see cpu_codegen.h). The one translation unit that includes LLVM.
//
// What makes the kernels fast (docs: toolchain facts):
//  - a vector-math mapping (libmvec, incl. the 16-wide AVX-512 entries) in TargetLibraryInfo, so
//    sin/cos/exp/tanh/erf... vectorize;
//  - reassoc on reduction adds/muls, nnan/nsz on float max/min reductions' own calls (NaNs are
//    tracked by an integer flag, so results still propagate NaN like torch; see set_attrs);
//  - alignstack(64), noalias buffer parameters, host cpu/features on every function;
//  - interleaving off in kernels with several inner loops (compile time);
//  - non-temporal stores for large graph outputs and written inputs (config cpu_streaming_store_mb):
//    a second body, run when their pointers are 64-byte aligned, whose one-level loop is split at
//    64-byte bounds so the optimizer proves its vector stores aligned; mark_streaming_stores marks those.
#include "inductor/cpu_codegen.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <set>

#include "inductor/cpu_libmvec.h"
#include "inductor/loop_visitor.h"
#include "inductor/math_library.h"
#include "src/base/errors.h"

#ifdef FRAMEFUSE_HAVE_LLVM
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#endif

namespace ff::inductor {

#ifndef FRAMEFUSE_HAVE_LLVM

bool cpu_codegen_available() { return false; }
std::string cpu_target_description() { return "none"; }
std::shared_ptr<CpuModule> compile_cpu(const loop::Program&, const CpuCompileOptions&) {
  throw Unsupported("framefuse was built without LLVM: no CPU code generator");
}

#else

namespace {

using namespace llvm;
using llvm::Value;  // NB: ff::Value is the graph IR operand
using loop::BinaryOp;
using loop::ExprKind;
using loop::ReduceOp;
using loop::ScalarType;
using loop::StmtKind;
using loop::UnaryOp;

// LLVM reports its own internal failures with report_fatal_error, which aborts the process; LLVM
// 14's x86 backend has some in instruction selection of rare AVX-512 mask patterns ("Cannot
// select: X86ISD::VBROADCAST of v8i1", a comparison of a stride-0 operand). The handler turns them
// into this exception, thrown through LLVM's frames (which have unwind tables) up to compile_cpu.
struct LlvmFatalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throw_llvm_fatal(void*, const char* reason, bool) { throw LlvmFatalError(reason); }

// The host's target features with AVX-512 off: the second try after LLVM failed on a kernel.
std::string without_avx512(const std::string& features) {
  std::string out, item;
  std::stringstream ss(features);
  while (std::getline(ss, item, ',')) {
    if (item.rfind("+avx512", 0) == 0) item[0] = '-';
    out += (out.empty() ? "" : ",") + item;
  }
  return out;
}

struct Jit {
  std::unique_ptr<orc::LLJIT> lljit;
  std::unique_ptr<TargetMachine> tm;
  std::string cpu, features;
  bool avx512 = false, avx2 = false;
  bool libmvec_235 = false;  // glibc >= 2.35's libmvec (asin, atan2...): in the object cache key
  std::mutex mu;
  int modules = 0;
};

Jit& jit() {
  static Jit* j = [] {
    InitializeNativeTarget();
    InitializeNativeTargetAsmPrinter();
    auto* s = new Jit;
    install_fatal_error_handler(throw_llvm_fatal, nullptr);
    sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1");
    sys::DynamicLibrary::LoadLibraryPermanently("libm.so.6");
    s->libmvec_235 = sys::DynamicLibrary::SearchForAddressOfSymbol("_ZGVbN4v_asinf") != nullptr;
    auto jtmb = cantFail(orc::JITTargetMachineBuilder::detectHost());
    jtmb.setCodeGenOptLevel(CodeGenOpt::Aggressive);
    jtmb.setRelocationModel(Reloc::PIC_);
    s->cpu = jtmb.getCPU();
    StringMap<bool> feats;
    sys::getHostCPUFeatures(feats);
    std::vector<std::string> fl;
    for (auto& kv : feats) fl.push_back((kv.second ? "+" : "-") + kv.first().str());
    std::sort(fl.begin(), fl.end());
    for (auto& f : fl) s->features += (s->features.empty() ? "" : ",") + f;
    s->avx512 = feats.lookup("avx512f");
    s->avx2 = feats.lookup("avx2") && feats.lookup("fma");
    s->tm = cantFail(jtmb.createTargetMachine());
    s->lljit = cantFail(orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create());
    return s;
  }();
  return *j;
}

// Unary ops without an LLVM intrinsic: libm's function of the op's own name (tanf / tan).
constexpr UnaryOp kLibmUnary[] = {UnaryOp::Tan, UnaryOp::Tanh, UnaryOp::Erf, UnaryOp::Log1p, UnaryOp::Expm1, UnaryOp::Exp2,
                                  UnaryOp::Log2, UnaryOp::Log10, UnaryOp::Asin, UnaryOp::Acos, UnaryOp::Atan, UnaryOp::Sinh,
                                  UnaryOp::Cosh, UnaryOp::Erfc, UnaryOp::Asinh, UnaryOp::Acosh, UnaryOp::Atanh};

// Vector variants in glibc's libmvec (x86_64): scalar name -> ISA letter + width + signature.
void add_vector_math(TargetLibraryInfoImpl& tlii, bool avx512, bool avx2) {
  static std::vector<std::string> names;  // VecDesc keeps StringRefs
  static std::vector<VecDesc> descs;
  if (descs.empty()) {
    names.reserve(512);
    bool optional = false;
    auto add = [&](const char* scalar, const std::string& vec, unsigned width) {
      if (optional && !sys::DynamicLibrary::SearchForAddressOfSymbol(vec)) return;
      names.push_back(vec);
      descs.push_back({scalar, names.back(), ElementCount::getFixed(width)});
    };
    for (const LibmvecFn& f : kLibmvecFns) {
      if (!f.scalar32) {
        optional = true;
        continue;
      }
      std::string b = f.base;
      std::string s = f.sig;
      add(f.scalar32, "_ZGVbN4" + s + "_" + b + "f", 4);
      add(f.scalar64, "_ZGVbN2" + s + "_" + b, 2);
      if (avx2) {
        add(f.scalar32, "_ZGVdN8" + s + "_" + b + "f", 8);
        add(f.scalar64, "_ZGVdN4" + s + "_" + b, 4);
      }
      if (avx512) {
        add(f.scalar32, "_ZGVeN16" + s + "_" + b + "f", 16);
        add(f.scalar64, "_ZGVeN8" + s + "_" + b, 8);
      }
    }
  }
  tlii.addVectorizableFunctions(descs);
}

class KernelEmitter {
 public:
  KernelEmitter(LLVMContext& ctx, Module& m, const loop::Program& p, const loop::Kernel& k, bool avx512)
      : ctx_(ctx), m_(m), p_(p), k_(k), b_(ctx), avx512_(avx512) {}

  // Emits `name` (the exported entry: unpacks the buffer array) and its body. With stream_bytes > 0,
  // stored buffers of at least that size get a second body that writes them with non-temporal
  // stores (see mark_streaming_stores), which the entry runs when their pointers are 64-byte aligned.
  void emit(const std::string& name, int64_t stream_bytes) {
    bufs_ = k_.buffers();
    int loops = 0;
    accumulators_.assign(k_.locals.size(), false);
    loop::for_each_stmt(k_.root, [&](const loop::Stmt& s) {
      loops += s.kind == StmtKind::Loop;
      if (s.kind == StmtKind::Reduce) accumulators_[static_cast<size_t>(s.local)] = true;
    });
    multi_loop_ = loops > 2;
    std::vector<int> streamed = k_.large_results(p_, stream_bytes);
    Function* body = emit_body(name + "_body", {});
    Function* stream_body = streamed.empty() ? nullptr : emit_body(name + "_stream", streamed);

    Type* i64 = b_.getInt64Ty();
    Type* i8p = b_.getInt8PtrTy();
    Function* entry_fn = Function::Create(FunctionType::get(b_.getVoidTy(), {i8p->getPointerTo(), i64, i64}, false),
                                          Function::ExternalLinkage, name, m_);
    set_attrs(entry_fn);
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", entry_fn));
    auto ea = entry_fn->arg_begin();
    Value* arr = &*ea++;
    Value* lo = &*ea++;
    Value* hi = &*ea++;
    std::vector<Value*> args{lo, hi};
    for (size_t i = 0; i < bufs_.size(); ++i)
      args.push_back(b_.CreateLoad(i8p, b_.CreateConstGEP1_64(i8p, arr, i)));
    // NB: a program with symbolic sizes passes the run's symbol values after the buffers.
    if (p_.symbolic) args.push_back(b_.CreateLoad(i8p, b_.CreateConstGEP1_64(i8p, arr, bufs_.size())));
    if (!stream_body) {
      b_.CreateCall(body, args);
      b_.CreateRetVoid();
      return;
    }
    Value* aligned = b_.getTrue();
    for (size_t i = 0; i < bufs_.size(); ++i)
      if (std::find(streamed.begin(), streamed.end(), bufs_[i]) != streamed.end())
        aligned = b_.CreateAnd(aligned, b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(args[2 + i], i64), 63), b_.getInt64(0)));
    BasicBlock* fast = BasicBlock::Create(ctx_, "streaming", entry_fn);
    BasicBlock* plain = BasicBlock::Create(ctx_, "plain", entry_fn);
    b_.CreateCondBr(aligned, fast, plain);
    b_.SetInsertPoint(fast);
    b_.CreateCall(stream_body, args);
    b_.CreateRetVoid();
    b_.SetInsertPoint(plain);
    b_.CreateCall(body, args);
    b_.CreateRetVoid();
  }

 private:
  // The kernel body over [begin, end) of its root loop. `streamed`: buffers whose pointers are
  // 64-byte aligned here (align attribute); a one-level root loop is then split at multiples of 64
  // bytes so that its vectorized stores are provably aligned.
  Function* emit_body(const std::string& name, const std::vector<int>& streamed) {
    Type* i64 = b_.getInt64Ty();
    Type* i8p = b_.getInt8PtrTy();
    std::vector<Type*> params{i64, i64};
    for (size_t i = 0; i < bufs_.size(); ++i) params.push_back(i8p);
    if (p_.symbolic) params.push_back(i8p);
    Function* body = Function::Create(FunctionType::get(b_.getVoidTy(), params, false), Function::InternalLinkage, name, m_);
    int min_elem = 8;
    for (size_t i = 0; i < bufs_.size(); ++i) {
      body->addParamAttr(static_cast<unsigned>(2 + i), Attribute::NoAlias);
      body->addParamAttr(static_cast<unsigned>(2 + i), Attribute::NoCapture);
      if (std::find(streamed.begin(), streamed.end(), bufs_[i]) != streamed.end()) {
        body->addParamAttr(static_cast<unsigned>(2 + i), Attribute::getWithAlignment(ctx_, Align(64)));
        min_elem = std::min(min_elem, dtype_size(p_.buffers[static_cast<size_t>(bufs_[i])].dtype));
      }
    }
    set_attrs(body);
    body->addFnAttr(Attribute::NoInline);
    fn_ = body;
    ptrs_.clear();
    locals_.clear();
    flags_.clear();
    nan_tracked_.clear();
    BasicBlock* entry = BasicBlock::Create(ctx_, "entry", body);
    b_.SetInsertPoint(entry);
    auto arg = body->arg_begin();
    begin_ = &*arg++;
    end_ = &*arg++;
    for (size_t i = 0; i < bufs_.size(); ++i) {
      int id = bufs_[i];
      Type* et = storage_type(p_.buffers[static_cast<size_t>(id)].dtype);
      ptrs_[id] = b_.CreateBitCast(&*arg++, et->getPointerTo());
    }
    if (p_.symbolic) {
      // Every symbol's value is loaded once, here in the entry block: loop invariants for the optimizer.
      Value* table = b_.CreateBitCast(&*arg++, i64->getPointerTo());
      for (SymbolId id : k_.symbols()) syms_[id] = b_.CreateLoad(i64, b_.CreateConstGEP1_64(i64, table, static_cast<uint64_t>(id)), "s" + std::to_string(id));
    }
    for (size_t l = 0; l < k_.locals.size(); ++l) {
      locals_.push_back(b_.CreateAlloca(compute_type(k_.locals[l]), nullptr, "t" + std::to_string(l)));
      flags_.push_back(b_.CreateAlloca(b_.getInt8Ty(), nullptr, "nan" + std::to_string(l)));
    }
    vars_.assign(static_cast<size_t>(k_.num_vars), nullptr);
    bool one_level = !streamed.empty() && std::none_of(k_.root.body.begin(), k_.root.body.end(),
                                                       [](const loop::Stmt& c) { return c.kind == StmtKind::Loop; });
    if (one_level) {
      // [begin, min(up, end)) and [max(down, up), end) around [up, max(down, up)): `up` and `down`
      // are begin and end rounded to 64 bytes, up computed by a mask so that the optimizer knows
      // the middle loop starts aligned (the loops run empty where the range is short).
      Value* mask = ConstantInt::get(i64, ~static_cast<uint64_t>(64 / min_elem - 1));
      Value* up = b_.CreateAnd(b_.CreateAdd(begin_, b_.getInt64(static_cast<int64_t>(64 / min_elem - 1))), mask);
      Value* down = b_.CreateAnd(end_, mask);
      Value* head_end = b_.CreateSelect(b_.CreateICmpSLT(up, end_), up, end_);
      Value* mid_end = b_.CreateSelect(b_.CreateICmpSGT(down, up), down, up);
      Value* lo = begin_;
      Value* hi = end_;
      for (auto [from, to] : {std::pair<Value*, Value*>{lo, head_end}, {up, mid_end}, {mid_end, hi}}) {
        begin_ = from;
        end_ = to;
        emit_stmt(k_.root, true);
      }
    } else {
      emit_stmt(k_.root, true);
    }
    b_.CreateRetVoid();
    return body;
  }

  // NB: no function-wide fast-math attributes ("no-nans-fp-math", "no-signed-zeros-fp-math"): they
  // hold for every instruction of the kernel, and the backend then folds 0.0 - x to -x and x - x
  // to 0. The float max/min reductions carry nnan/nsz on their own calls, which is all LLVM 14's
  // vectorizer needs (NaNs are tracked by flags, see reduce).
  void set_attrs(Function* f) {
    Jit& j = jit();
    f->addFnAttr("target-cpu", j.cpu);
    f->addFnAttr("target-features", avx512_ ? j.features : without_avx512(j.features));
    if (j.avx512 && avx512_) f->addFnAttr("prefer-vector-width", "512");
    f->addFnAttr(Attribute::NoUnwind);
    f->addFnAttr(Attribute::getWithStackAlignment(ctx_, Align(64)));
  }

  Type* compute_type(ScalarType t) {
    switch (t) {
      case ScalarType::Bool: return b_.getInt1Ty();
      case ScalarType::I32: return b_.getInt32Ty();
      case ScalarType::I64: return b_.getInt64Ty();
      case ScalarType::F32: return b_.getFloatTy();
      case ScalarType::F64: return b_.getDoubleTy();
    }
    return nullptr;
  }
  Type* storage_type(DType dt) {
    switch (dt) {
      case DType::Bool:
      case DType::UInt8:
      case DType::Int8: return b_.getInt8Ty();
      case DType::Int16:
      case DType::BFloat16: return b_.getInt16Ty();
      case DType::Float16: return b_.getHalfTy();
      case DType::Int32: return b_.getInt32Ty();
      case DType::Int64: return b_.getInt64Ty();
      case DType::Float32: return b_.getFloatTy();
      case DType::Float64: return b_.getDoubleTy();
      default: FF_CHECK(false, "no storage type for " + std::string(dtype_name(dt)));
    }
    return nullptr;
  }

  Value* is_nan_bits(Value* v) {
    if (v->getType()->isFloatTy()) {
      Value* bits = b_.CreateAnd(b_.CreateBitCast(v, b_.getInt32Ty()), 0x7fffffffu);
      return b_.CreateICmpUGT(bits, b_.getInt32(0x7f800000u));
    }
    Value* bits = b_.CreateAnd(b_.CreateBitCast(v, b_.getInt64Ty()), b_.getInt64(0x7fffffffffffffffull));
    return b_.CreateICmpUGT(bits, b_.getInt64(0x7ff0000000000000ull));
  }

  Value* address(int buf, Value* index) {
    Value* base = ptrs_.at(buf);
    Type* et = storage_type(p_.buffers[static_cast<size_t>(buf)].dtype);
    return b_.CreateInBoundsGEP(et, base, index);
  }

  Value* load(int buf, Value* index, ScalarType t) {
    DType dt = p_.buffers[static_cast<size_t>(buf)].dtype;
    Type* et = storage_type(dt);
    Value* raw = b_.CreateAlignedLoad(et, address(buf, index), MaybeAlign(dtype_size(dt)));
    switch (dt) {
      case DType::Bool: return b_.CreateICmpNE(raw, b_.getInt8(0));
      case DType::UInt8: return b_.CreateZExt(raw, b_.getInt32Ty());
      case DType::Int8:
      case DType::Int16: return b_.CreateSExt(raw, b_.getInt32Ty());
      case DType::BFloat16:
        return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(raw, b_.getInt32Ty()), 16), b_.getFloatTy());
      case DType::Float16: return b_.CreateFPExt(raw, b_.getFloatTy());
      default: (void)t; return raw;
    }
  }

  void store(int buf, Value* index, Value* v) {
    DType dt = p_.buffers[static_cast<size_t>(buf)].dtype;
    Value* raw = v;
    switch (dt) {
      case DType::Bool: raw = b_.CreateZExt(v, b_.getInt8Ty()); break;
      case DType::UInt8:
      case DType::Int8: raw = b_.CreateTrunc(v, b_.getInt8Ty()); break;
      case DType::Int16: raw = b_.CreateTrunc(v, b_.getInt16Ty()); break;
      case DType::Float16: raw = b_.CreateFPTrunc(v, b_.getHalfTy()); break;
      case DType::BFloat16: raw = b_.CreateTrunc(bf16_bits(v), b_.getInt16Ty()); break;
      default: break;
    }
    b_.CreateAlignedStore(raw, address(buf, index), MaybeAlign(dtype_size(dt)));
  }

  // The bf16 nearest to f32 v (ties to even) in the low 16 bits of an i32; NaN stays a quiet NaN.
  Value* bf16_bits(Value* v) {
    Value* bits = b_.CreateBitCast(v, b_.getInt32Ty());
    Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), 1);
    Value* rounded = b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(bits, b_.getInt32(0x7fff)), lsb), 16);
    return b_.CreateSelect(is_nan_bits(v), b_.getInt32(0x7fc0), rounded);
  }

  // f32 v rounded to the nearest f16 value (ties to even, f16's subnormals, inf beyond 65504),
  // staying an f32. NB: on the bits rather than fptrunc/fpext through half: InstCombine turns
  // fptrunc(op(fpext a, fpext b)) into an op on half, which x86 computes element by element
  // (a chain of f16 ops ran 9x slower).
  Value* f16_round(Value* v) {
    Type* i32 = b_.getInt32Ty();
    Value* bits = b_.CreateBitCast(v, i32);
    Value* mag = b_.CreateAnd(bits, 0x7fffffffu);
    Value* lsb = b_.CreateAnd(b_.CreateLShr(mag, 13), 1);
    Value* normal = b_.CreateAnd(b_.CreateAdd(b_.CreateAdd(mag, b_.getInt32(0xfff)), lsb), 0xffffe000u);
    normal = b_.CreateSelect(b_.CreateICmpUGT(normal, b_.getInt32(0x477fe000)), b_.getInt32(0x7f800000), normal);  // > 65504
    // below 2^-14 the quantum is 2^-24: x + 0.5 - 0.5 rounds to it (ties to even)
    Value* af = b_.CreateBitCast(mag, b_.getFloatTy());
    Value* sub = b_.CreateBitCast(b_.CreateFSub(b_.CreateFAdd(af, fconst(0.5, b_.getFloatTy())), fconst(0.5, b_.getFloatTy())), i32);
    Value* r = b_.CreateSelect(b_.CreateICmpULT(mag, b_.getInt32(0x38800000)), sub, normal);
    r = b_.CreateSelect(b_.CreateICmpUGE(mag, b_.getInt32(0x7f800000)), mag, r);  // inf and NaN as they are
    return b_.CreateBitCast(b_.CreateOr(r, b_.CreateAnd(bits, 0x80000000u)), b_.getFloatTy());
  }

  // loop::narrow: v (i32 or f32) as the store of dtype dt followed by a load would give it.
  Value* narrow(Value* v, DType dt, const loop::Expr& arg) {
    if (loop::holds_dtype_values(arg, dt, p_)) return v;
    switch (dt) {
      case DType::UInt8: return b_.CreateZExt(b_.CreateTrunc(v, b_.getInt8Ty()), b_.getInt32Ty());
      case DType::Int8: return b_.CreateSExt(b_.CreateTrunc(v, b_.getInt8Ty()), b_.getInt32Ty());
      case DType::Int16: return b_.CreateSExt(b_.CreateTrunc(v, b_.getInt16Ty()), b_.getInt32Ty());
      case DType::Float16: return f16_round(v);
      case DType::BFloat16: return b_.CreateBitCast(b_.CreateShl(bf16_bits(v), 16), b_.getFloatTy());
      default: return v;
    }
  }

  Value* fconst(double v, Type* t) { return ConstantFP::get(t, v); }

  Value* call_intrinsic(Intrinsic::ID id, std::vector<Value*> args) {
    Function* f = Intrinsic::getDeclaration(&m_, id, {args[0]->getType()});
    return b_.CreateCall(f, args);
  }
  Value* call_libm(const char* name, Value* x, Value* y = nullptr) {
    std::vector<Value*> args{x};
    if (y) args.push_back(y);
    std::vector<Type*> types(args.size(), x->getType());
    FunctionCallee fc = m_.getOrInsertFunction(name, FunctionType::get(x->getType(), types, false));
    if (auto* f = dyn_cast<Function>(fc.getCallee())) {
      f->setDoesNotAccessMemory();
      f->setDoesNotThrow();
      f->addFnAttr(Attribute::WillReturn);
    }
    CallInst* c = b_.CreateCall(fc, args);
    c->setDoesNotAccessMemory();
    return c;
  }

  Value* sign_bit(Value* v) {
    Type* it = v->getType()->isFloatTy() ? b_.getInt32Ty() : b_.getInt64Ty();
    return b_.CreateICmpSLT(b_.CreateBitCast(v, it), ConstantInt::get(it, 0));
  }

  Value* unary(UnaryOp op, Value* x) {
    Type* t = x->getType();
    bool fl = t->isFloatingPointTy();
    switch (op) {
      case UnaryOp::Neg: return fl ? b_.CreateFNeg(x) : b_.CreateNeg(x);
      case UnaryOp::Abs:
        if (fl) return call_intrinsic(Intrinsic::fabs, {x});
        return b_.CreateSelect(b_.CreateICmpSLT(x, ConstantInt::get(t, 0)), b_.CreateNeg(x), x);
      case UnaryOp::Not: return b_.CreateNot(x);
      case UnaryOp::Exp: return call_intrinsic(Intrinsic::exp, {x});
      case UnaryOp::Log: return call_intrinsic(Intrinsic::log, {x});
      case UnaryOp::Sin: return call_intrinsic(Intrinsic::sin, {x});
      case UnaryOp::Cos: return call_intrinsic(Intrinsic::cos, {x});
      case UnaryOp::Sqrt: return call_intrinsic(Intrinsic::sqrt, {x});
      case UnaryOp::Rsqrt: return b_.CreateFDiv(fconst(1.0, t), call_intrinsic(Intrinsic::sqrt, {x}));
      case UnaryOp::Floor: return call_intrinsic(Intrinsic::floor, {x});
      case UnaryOp::Ceil: return call_intrinsic(Intrinsic::ceil, {x});
      case UnaryOp::Reciprocal: return b_.CreateFDiv(fconst(1.0, t), x);
      case UnaryOp::Sigmoid:
        return b_.CreateFDiv(fconst(1.0, t), b_.CreateFAdd(fconst(1.0, t), call_intrinsic(Intrinsic::exp, {b_.CreateFNeg(x)})));
      case UnaryOp::IsNan: return is_nan_bits(x);
      case UnaryOp::SignBit: return sign_bit(x);
      // NB: nearbyint, not rint: the same result (ties to even), no inexact flag.
      case UnaryOp::Round: return call_intrinsic(Intrinsic::nearbyint, {x});
      case UnaryOp::Erf:
        return t->isFloatTy() ? erf_f32(x) : call_libm("erf", x);
      default:
        if (std::find(std::begin(kLibmUnary), std::end(kLibmUnary), op) != std::end(kLibmUnary))
          return call_libm((std::string(unary_name(op)) + (t->isFloatTy() ? "f" : "")).c_str(), x);
    }
    FF_CHECK(false, "unhandled unary op");
    return nullptr;
  }

  // erf for f32 from two polynomials fitted for this renderer (weighted least squares on
  // Chebyshev nodes against float64 erf): |x| < 1: x * P(x^2); 1 <= |x|: 1 - exp(Q(min(|x|, 4)
  // - 2.5)), Q fitted to log(erfc). At most 2.6 ulp from the exact value over all floats, tiny
  // inputs included; libmvec's erff cost about 14 cycles an element and made layer_norm + gelu
  // compute-bound.
  Value* erf_f32(Value* x) {
    static const double kSmall[] = {1.1283791670801047, -0.3761263855282758, 0.11283783443885603,
                                    -0.02686547551504577, 0.005221138696496533, -0.0008485438921544276,
                                    0.00011274737966242606, -9.689741149238891e-06};
    static const double kLarge[] = {-7.806815272428783, -5.352680740385491, -0.9438937430096846,
                                    -0.01085816553042549, 0.002165525597579107, -0.0004207069390565528,
                                    7.693984503663556e-05, -1.2976133189407243e-05, 1.8449596466209705e-06,
                                    -6.582858246603396e-08, -4.1048539233021445e-08};
    Type* t = x->getType();
    auto horner = [&](const double* c, int n, Value* z) {
      Value* r = fconst(c[n - 1], t);
      for (int i = n - 2; i >= 0; --i) r = call_intrinsic3(Intrinsic::fma, r, z, fconst(c[i], t));
      return r;
    };
    Value* ax = call_intrinsic(Intrinsic::fabs, {x});
    Value* small = b_.CreateFMul(ax, horner(kSmall, 8, b_.CreateFMul(ax, ax)));
    Value* clamped = b_.CreateSelect(b_.CreateFCmpOLT(ax, fconst(4.0, t)), ax, fconst(4.0, t));
    Value* q = horner(kLarge, 11, b_.CreateFSub(clamped, fconst(2.5, t)));
    Value* large = b_.CreateFSub(fconst(1.0, t), exp_f32_inline(q));
    Value* r = b_.CreateSelect(b_.CreateFCmpOLT(ax, fconst(1.0, t)), small, large);
    r = call_intrinsic2(Intrinsic::copysign, r, x);
    return b_.CreateSelect(is_nan_bits(x), x, r);
  }
  // exp(q) for f32 q, clamped to [-87, 0] (the callers only need that range): 2^n * e^r with
  // n = rint(q / ln 2), r = q - n ln 2 (two-part ln 2), e^r by its degree-7 Taylor polynomial
  // (relative error below 1e-8 on |r| <= ln 2 / 2). Inline, unlike a vector-math call, which
  // spills every live vector register around it.
  Value* exp_f32_inline(Value* q) {
    Type* t = q->getType();
    Value* c = b_.CreateSelect(b_.CreateFCmpOLT(q, fconst(0.0, t)), q, fconst(0.0, t));
    c = b_.CreateSelect(b_.CreateFCmpOGT(c, fconst(-87.0, t)), c, fconst(-87.0, t));
    Value* n = call_intrinsic(Intrinsic::rint, {b_.CreateFMul(c, fconst(1.4426950408889634, t))});
    Value* r = call_intrinsic3(Intrinsic::fma, n, fconst(-0.693145751953125, t), c);
    r = call_intrinsic3(Intrinsic::fma, n, fconst(-1.428606765330187e-06, t), r);
    static const double kTaylor[] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040};
    Value* pr = fconst(kTaylor[7], t);
    for (int i = 6; i >= 0; --i) pr = call_intrinsic3(Intrinsic::fma, pr, r, fconst(kTaylor[i], t));
    Type* it = b_.getInt32Ty();
    if (auto* vt = dyn_cast<VectorType>(t)) it = VectorType::get(it, vt->getElementCount());
    Value* bits = b_.CreateShl(b_.CreateAdd(b_.CreateFPToSI(n, it), ConstantInt::get(it, 127)), 23);
    return b_.CreateFMul(pr, b_.CreateBitCast(bits, t));
  }
  Value* call_intrinsic3(Intrinsic::ID id, Value* a, Value* c, Value* d) {
    Function* f = Intrinsic::getDeclaration(&m_, id, {a->getType()});
    return b_.CreateCall(f, {a, c, d});
  }
  Value* call_intrinsic2(Intrinsic::ID id, Value* a, Value* c) {
    Function* f = Intrinsic::getDeclaration(&m_, id, {a->getType()});
    return b_.CreateCall(f, {a, c});
  }

  Value* binary(BinaryOp op, Value* a, Value* c, ScalarType st) {
    Type* t = a->getType();
    bool fl = loop::is_float(st);
    bool is_bool = st == ScalarType::Bool;
    switch (op) {
      case BinaryOp::Add: return fl ? b_.CreateFAdd(a, c) : b_.CreateAdd(a, c);
      case BinaryOp::Sub: return fl ? b_.CreateFSub(a, c) : b_.CreateSub(a, c);
      case BinaryOp::Mul: return fl ? b_.CreateFMul(a, c) : b_.CreateMul(a, c);
      case BinaryOp::Div: return fl ? b_.CreateFDiv(a, c) : b_.CreateSDiv(a, c);
      case BinaryOp::FloorDiv:
      case BinaryOp::Mod: {
        if (fl && op == BinaryOp::Mod) {
          // eager's remainder: fmod, moved into the divisor's sign (exact, unlike a - floor(a / b) * b)
          Value* r = b_.CreateFRem(a, c);
          Value* zero = fconst(0.0, t);
          Value* adjust = b_.CreateAnd(b_.CreateFCmpUNE(r, zero),
                                       b_.CreateXor(b_.CreateFCmpOLT(c, zero), b_.CreateFCmpOLT(r, zero)));
          return b_.CreateSelect(adjust, b_.CreateFAdd(r, c), r);
        }
        if (fl) return call_intrinsic(Intrinsic::floor, {b_.CreateFDiv(a, c)});
        Value* q = b_.CreateSDiv(a, c);
        Value* r = b_.CreateSRem(a, c);
        Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, ConstantInt::get(t, 0)),
                                     b_.CreateICmpSLT(b_.CreateXor(r, c), ConstantInt::get(t, 0)));
        if (op == BinaryOp::FloorDiv) return b_.CreateSub(q, b_.CreateZExt(adjust, t));
        return b_.CreateSelect(adjust, b_.CreateAdd(r, c), r);
      }
      case BinaryOp::Max:
      case BinaryOp::Min: {
        bool mx = op == BinaryOp::Max;
        if (!fl) return b_.CreateSelect(mx ? b_.CreateICmpSGT(a, c) : b_.CreateICmpSLT(a, c), a, c);
        Value* m = call_intrinsic(mx ? Intrinsic::maxnum : Intrinsic::minnum, {a, c});
        return b_.CreateSelect(b_.CreateOr(is_nan_bits(a), is_nan_bits(c)), b_.CreateFAdd(a, c), m);
      }
      case BinaryOp::Pow: return call_intrinsic(Intrinsic::pow, {a, c});
      case BinaryOp::Eq: return fl ? b_.CreateFCmpOEQ(a, c) : b_.CreateICmpEQ(a, c);
      case BinaryOp::Ne: return fl ? b_.CreateNot(b_.CreateFCmpOEQ(a, c)) : b_.CreateICmpNE(a, c);
      case BinaryOp::Lt: return fl ? b_.CreateFCmpOLT(a, c) : is_bool ? b_.CreateICmpULT(a, c)
                                                                      : b_.CreateICmpSLT(a, c);
      case BinaryOp::Le: return fl ? b_.CreateFCmpOLE(a, c) : is_bool ? b_.CreateICmpULE(a, c)
                                                                      : b_.CreateICmpSLE(a, c);
      case BinaryOp::Gt: return fl ? b_.CreateFCmpOGT(a, c) : is_bool ? b_.CreateICmpUGT(a, c)
                                                                      : b_.CreateICmpSGT(a, c);
      case BinaryOp::Ge: return fl ? b_.CreateFCmpOGE(a, c) : is_bool ? b_.CreateICmpUGE(a, c)
                                                                      : b_.CreateICmpSGE(a, c);
      case BinaryOp::And:
      case BinaryOp::BitAnd: return b_.CreateAnd(a, c);
      case BinaryOp::Or:
      case BinaryOp::BitOr: return b_.CreateOr(a, c);
      case BinaryOp::BitXor: return b_.CreateXor(a, c);
      case BinaryOp::Shl:
      case BinaryOp::Shr: {
        Value* count = b_.CreateAnd(c, ConstantInt::get(t, t->getScalarSizeInBits() - 1));  // NB: a splat for vectors
        return op == BinaryOp::Shl ? b_.CreateShl(a, count) : b_.CreateAShr(a, count);
      }
      case BinaryOp::Fmod: return fl ? b_.CreateFRem(a, c) : b_.CreateSRem(a, c);
      case BinaryOp::Atan2: return call_libm(t->isFloatTy() ? "atan2f" : "atan2", a, c);
      case BinaryOp::NextAfter: return call_libm(t->isFloatTy() ? "nextafterf" : "nextafter", a, c);
    }
    return nullptr;
  }

  Value* convert(Value* v, ScalarType from, ScalarType to) {
    if (from == to) return v;
    Type* tt = compute_type(to);
    bool ff = loop::is_float(from), ft = loop::is_float(to);
    if (to == ScalarType::Bool)  // NB: NaN is true (unordered or not equal)
      return ff ? b_.CreateFCmpUNE(v, fconst(0.0, v->getType())) : b_.CreateICmpNE(v, ConstantInt::get(v->getType(), 0));
    if (ff && ft) return from == ScalarType::F32 ? b_.CreateFPExt(v, tt) : b_.CreateFPTrunc(v, tt);
    if (ff) return b_.CreateFPToSI(v, tt);
    if (ft) return from == ScalarType::Bool ? b_.CreateUIToFP(v, tt) : b_.CreateSIToFP(v, tt);
    if (from == ScalarType::Bool) return b_.CreateZExt(v, tt);
    return b_.CreateSExtOrTrunc(v, tt);
  }

  Value* expr(const loop::Expr& e) {
    switch (e->kind) {
      case ExprKind::Const:
        if (loop::is_float(e->type)) return fconst(e->f, compute_type(e->type));
        return ConstantInt::get(compute_type(e->type), static_cast<uint64_t>(e->i), true);
      case ExprKind::Var: return vars_.at(static_cast<size_t>(e->id));
      case ExprKind::Sym: return syms_.at(e->id);
      case ExprKind::Local: {
        Value* v = b_.CreateLoad(compute_type(e->type), locals_[static_cast<size_t>(e->id)]);
        if (nan_tracked_.count(e->id)) {
          Value* flag = b_.CreateICmpNE(b_.CreateLoad(b_.getInt8Ty(), flags_[static_cast<size_t>(e->id)]), b_.getInt8(0));
          v = b_.CreateSelect(flag, fconst(NAN, v->getType()), v);
        }
        return v;
      }
      case ExprKind::Load: return load(e->id, expr(e->args[0]), e->type);
      case ExprKind::Unary: return unary(static_cast<UnaryOp>(e->op), expr(e->args[0]));
      case ExprKind::Binary: {
        const loop::Expr& d = e->args[1];
        if (static_cast<BinaryOp>(e->op) == BinaryOp::Div && loop::is_float(e->type) && d->kind == ExprKind::Const && d->f == 0.0) {
          // NB: x / ±0.0 is x * ±inf in every case (0 and NaN give NaN, the rest a signed inf). LLVM
          // 14 folds `uitofp(u8) / -0.0 < -2.0` to false, where the quotient is -inf (codegen fuzz
          // case 11064237: hardtanh of it kept -inf); a product it reasons about correctly.
          Value* x = expr(e->args[0]);
          return b_.CreateFMul(x, ConstantFP::getInfinity(x->getType()->getScalarType(), std::signbit(d->f)));
        }
        Value* r = binary(static_cast<BinaryOp>(e->op), expr(e->args[0]), expr(e->args[1]), e->args[0]->type);
        if (static_cast<BinaryOp>(e->op) == BinaryOp::Div && loop::is_float(e->type) && e->args[1]->kind == ExprKind::Local &&
            accumulators_[static_cast<size_t>(e->args[1]->id)])
          if (auto* inst = dyn_cast<Instruction>(r)) {
            // NB: a division by a row's sum (softmax) is one reciprocal per row, as in torch's own
            // kernels. Only by a reduction's result: an element's reciprocal overflows for a denormal.
            FastMathFlags f;
            f.setAllowReciprocal();
            inst->setFastMathFlags(f);
          }
        return r;
      }
      case ExprKind::Select: {
        Value* c = expr(e->args[0]);
        Value* a = select_arm(e->args[1]);
        Value* d = select_arm(e->args[2]);
        return b_.CreateSelect(c, a, d);
      }
      case ExprKind::Fma: return call_intrinsic3(Intrinsic::fma, expr(e->args[0]), expr(e->args[1]), expr(e->args[2]));
      case ExprKind::Cast: return convert(expr(e->args[0]), e->args[0]->type, e->type);
      case ExprKind::Narrow: return narrow(expr(e->args[0]), static_cast<DType>(e->i), e->args[0]);
      case ExprKind::Call: return math_call(e);
    }
    return nullptr;
  }

  // A math library function (inductor/math_library.h): double(double[, double]), or an integer one
  // on int64. NB: the conversions are no-ops on f64 and i64.
  Value* math_call(const loop::Expr& e) {
    auto fn = static_cast<loop::MathFn>(e->op);
    bool ints = loop::math_fn_int(fn);
    Type* wide = ints ? b_.getInt64Ty() : b_.getDoubleTy();
    std::vector<Value*> a;
    for (const loop::Expr& x : e->args) a.push_back(ints ? b_.CreateSExt(expr(x), wide) : b_.CreateFPExt(expr(x), wide));
    Value* r = call_libm(inductor::math_fn_symbol(fn).c_str(), a[0], a.size() > 1 ? a[1] : nullptr);
    return ints ? b_.CreateTrunc(r, compute_type(e->type)) : b_.CreateFPTrunc(r, compute_type(e->type));
  }

  // A select's operand. NB: a float zero constant goes through llvm.arithmetic.fence: LLVM 14's
  // InstCombine rewrites select(x > 0.0, -0.0, x) into select(x >= 0.0, -0.0, x), equal only up to
  // the sign of zero (llvm-project issue 57357), and cannot see through the fence.
  Value* select_arm(const loop::Expr& e) {
    Value* v = expr(e);
    if (e->kind == ExprKind::Const && loop::is_float(e->type) && e->f == 0.0)
      return b_.CreateArithmeticFence(v, v->getType());
    return v;
  }

  Value* identity(ReduceOp op, ScalarType t) {
    Type* ty = compute_type(t);
    bool fl = loop::is_float(t);
    switch (op) {
      case ReduceOp::Sum: return fl ? fconst(0.0, ty) : ConstantInt::get(ty, 0);
      case ReduceOp::Prod: return fl ? fconst(1.0, ty) : ConstantInt::get(ty, 1);
      case ReduceOp::Max:
        if (fl) return fconst(-INFINITY, ty);
        return ConstantInt::get(ty, t == ScalarType::I32 ? APInt::getSignedMinValue(32) : APInt::getSignedMinValue(64));
      case ReduceOp::Min:
        if (fl) return fconst(INFINITY, ty);
        return ConstantInt::get(ty, t == ScalarType::I32 ? APInt::getSignedMaxValue(32) : APInt::getSignedMaxValue(64));
    }
    return nullptr;
  }

  void reduce(const loop::Stmt& s) {
    ScalarType t = k_.locals[static_cast<size_t>(s.local)];
    Type* ty = compute_type(t);
    Value* slot = locals_[static_cast<size_t>(s.local)];
    Value* v = expr(s.value);
    Value* acc = b_.CreateLoad(ty, slot);
    bool fl = loop::is_float(t);
    Value* r = nullptr;
    FastMathFlags fmf;
    fmf.setAllowReassoc();
    switch (s.rop) {
      case ReduceOp::Sum:
        r = fl ? b_.CreateFAdd(acc, v) : b_.CreateAdd(acc, v);
        break;
      case ReduceOp::Prod:
        r = fl ? b_.CreateFMul(acc, v) : b_.CreateMul(acc, v);
        break;
      case ReduceOp::Max:
      case ReduceOp::Min: {
        bool mx = s.rop == ReduceOp::Max;
        if (fl) {
          r = call_intrinsic(mx ? Intrinsic::maxnum : Intrinsic::minnum, {acc, v});
          FastMathFlags mf = fmf;
          mf.setNoNaNs();
          mf.setNoSignedZeros();
          cast<Instruction>(r)->setFastMathFlags(mf);
          Value* fslot = flags_[static_cast<size_t>(s.local)];
          Value* flag = b_.CreateOr(b_.CreateLoad(b_.getInt8Ty(), fslot), b_.CreateZExt(is_nan_bits(v), b_.getInt8Ty()));
          b_.CreateStore(flag, fslot);
        } else {
          r = b_.CreateSelect(mx ? b_.CreateICmpSGT(v, acc) : b_.CreateICmpSLT(v, acc), v, acc);
        }
        break;
      }
    }
    if (fl && (s.rop == ReduceOp::Sum || s.rop == ReduceOp::Prod)) cast<Instruction>(r)->setFastMathFlags(fmf);
    b_.CreateStore(r, slot);
  }

  void emit_stmt(const loop::Stmt& s, bool root) {
    switch (s.kind) {
      case StmtKind::Loop: return emit_loop(s, root);
      case StmtKind::Store:
        return store(s.buf, expr(s.index), expr(loop::stored_value(s.value, p_.buffers[static_cast<size_t>(s.buf)].dtype)));
      case StmtKind::Let: {
        Value* v = expr(s.value);
        b_.CreateStore(v, locals_[static_cast<size_t>(s.local)]);
        nan_tracked_.erase(s.local);
        return;
      }
      case StmtKind::Init: {
        ScalarType t = k_.locals[static_cast<size_t>(s.local)];
        b_.CreateStore(identity(s.rop, t), locals_[static_cast<size_t>(s.local)]);
        if ((s.rop == ReduceOp::Max || s.rop == ReduceOp::Min) && loop::is_float(t)) {
          b_.CreateStore(b_.getInt8(0), flags_[static_cast<size_t>(s.local)]);
          nan_tracked_.insert(s.local);
        } else {
          nan_tracked_.erase(s.local);
        }
        return;
      }
      case StmtKind::Reduce: return reduce(s);
    }
  }

  void emit_loop(const loop::Stmt& s, bool root) {
    Type* i64 = b_.getInt64Ty();
    Value* lo = root ? begin_ : ConstantInt::get(i64, 0);
    Value* hi = root ? end_ : expr(loop::size_expr(s.extent));  // a constant, or read from the symbols
    BasicBlock* pre = b_.GetInsertBlock();
    BasicBlock* header = BasicBlock::Create(ctx_, "loop", fn_);
    BasicBlock* bodyb = BasicBlock::Create(ctx_, "body", fn_);
    BasicBlock* exit = BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    PHINode* iv = b_.CreatePHI(i64, 2, "v" + std::to_string(s.var));
    iv->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(iv, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    vars_[static_cast<size_t>(s.var)] = iv;
    for (const loop::Stmt& c : s.body) emit_stmt(c, false);
    Value* next = b_.CreateAdd(iv, ConstantInt::get(i64, 1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    BranchInst* br = b_.CreateBr(header);
    iv->addIncoming(next, b_.GetInsertBlock());
    if (multi_loop_) {
      // NB: interleaving doubles codegen time of kernels with several inner loops for no speed.
      MDNode* il = MDNode::get(ctx_, {MDString::get(ctx_, "llvm.loop.interleave.count"),
                                      ConstantAsMetadata::get(b_.getInt32(1))});
      auto tmp = MDNode::getTemporary(ctx_, None);
      MDNode* self = MDNode::get(ctx_, {tmp.get(), il});
      self->replaceOperandWith(0, self);
      br->setMetadata(LLVMContext::MD_loop, self);
    }
    b_.SetInsertPoint(exit);
    vars_[static_cast<size_t>(s.var)] = nullptr;
  }

  LLVMContext& ctx_;
  Module& m_;
  const loop::Program& p_;
  const loop::Kernel& k_;
  std::vector<bool> accumulators_;  // local id -> set by a Reduce (a row's sum, max ...)
  IRBuilder<> b_;
  Function* fn_ = nullptr;
  Value* begin_ = nullptr;
  Value* end_ = nullptr;
  std::vector<int> bufs_;
  std::map<int, Value*> ptrs_;
  std::map<int, Value*> syms_;  // size symbol -> its value, loaded in the entry block
  std::vector<Value*> locals_, flags_, vars_;
  std::set<int> nan_tracked_;
  bool multi_loop_ = false;
  bool avx512_ = true;  // false: the host's AVX-512 left unused (the retry after an LLVM failure)
};

// In the streaming bodies (name ending in "_stream"), vector stores that the optimizer proved
// aligned to their whole width, into a buffer argument with the align attribute, become
// non-temporal; an sfence before each return orders them before whatever reads the buffer next
// (another thread after the parallel loop's barrier).
void mark_streaming_stores(Module& m) {
  const DataLayout& dl = m.getDataLayout();
  for (Function& f : m) {
    if (f.isDeclaration() || !f.getName().endswith("_stream")) continue;
    bool any = false;
    for (BasicBlock& bb : f)
      for (Instruction& in : bb) {
        auto* st = dyn_cast<StoreInst>(&in);
        if (!st || !st->getValueOperand()->getType()->isVectorTy()) continue;
        uint64_t bytes = dl.getTypeStoreSize(st->getValueOperand()->getType());
        if (bytes < 16 || st->getAlign().value() < bytes) continue;
        auto* base = dyn_cast<Argument>(getUnderlyingObject(st->getPointerOperand()));
        if (!base || base->getParamAlign().valueOrOne().value() < 64) continue;
        st->setMetadata(LLVMContext::MD_nontemporal, MDNode::get(m.getContext(), ConstantAsMetadata::get(
                                                                                     ConstantInt::get(Type::getInt32Ty(m.getContext()), 1))));
        any = true;
      }
    if (!any) continue;
    Function* sfence = Intrinsic::getDeclaration(&m, Intrinsic::x86_sse_sfence);
    for (BasicBlock& bb : f)
      if (auto* ret = dyn_cast<ReturnInst>(bb.getTerminator())) CallInst::Create(sfence, "", ret);
  }
}

void optimize(Module& m, TargetMachine& tm, bool avx512) {
  Jit& j = jit();
  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  PassBuilder pb(&tm, pto);
  TargetLibraryInfoImpl tlii(Triple(m.getTargetTriple()));
  add_vector_math(tlii, j.avx512 && avx512, j.avx2);
  // NB: must be registered before registerFunctionAnalyses: the first registration wins.
  fam.registerPass([&] { return TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(OptimizationLevel::O3);
  mpm.run(m, mam);
}

std::string emit_object(Module& m, TargetMachine& tm) {
  SmallVector<char, 0> buf;
  raw_svector_ostream os(buf);
  legacy::PassManager pm;
  TargetLibraryInfoImpl tlii(Triple(m.getTargetTriple()));
  pm.add(new TargetLibraryInfoWrapperPass(tlii));
  FF_CHECK(!tm.addPassesToEmitFile(pm, os, nullptr, CGFT_ObjectFile), "the target cannot emit object files");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}

}  // namespace

bool cpu_codegen_available() { return true; }

std::string cpu_target_description() {
  Jit& j = jit();
  return j.cpu + " " + j.features;
}

std::shared_ptr<CpuModule> compile_cpu(const loop::Program& p, const CpuCompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mu);
  auto mod = std::make_shared<CpuModule>();
  // NB: non-temporal stores are x86's (sfence); elsewhere the option does nothing.
  int64_t stream_bytes = j.tm->getTargetTriple().isX86() ? options.streaming_store_bytes : 0;
  // NB: the build's time stands for this file's code: an object compiled by an earlier emitter
  // (one with a bug fixed since) is never loaded by a later one.
  std::string text = "framefuse-cpu-v11 " __DATE__ " " __TIME__ "\nllvm " LLVM_VERSION_STRING "\n" + j.cpu + "\n" + j.features +
                     "\nstreaming " + std::to_string(stream_bytes) + "\nlibmvec " + (j.libmvec_235 ? "2.35" : "old") + "\n" + loop::program_str(p);
  mod->cache_key = cache_key_hash(text);
  std::string object;
  auto build = [&](bool avx512) {
    LLVMContext ctx;
    Module m("ff_" + mod->cache_key, ctx);
    m.setTargetTriple(j.tm->getTargetTriple().str());
    m.setDataLayout(j.tm->createDataLayout());
    for (size_t k = 0; k < p.kernels.size(); ++k)
      KernelEmitter(ctx, m, p, p.kernels[k], avx512).emit("ff_kernel_" + std::to_string(k), stream_bytes);
    std::string err;
    raw_string_ostream es(err);
    FF_CHECK(!verifyModule(m, &es), "invalid LLVM IR: " + es.str());
    optimize(m, *j.tm, avx512);
    if (stream_bytes > 0) mark_streaming_stores(m);
    if (options.want_llvm_ir) {
      mod->llvm_ir.clear();
      raw_string_ostream os(mod->llvm_ir);
      m.print(os, nullptr);
    }
    object = emit_object(m, *j.tm);
  };
  bool cached = !options.want_llvm_ir && disk_cache_load(options.cache_dir, mod->cache_key, &object);
  if (!cached) {
    try {
      build(true);
    } catch (const LlvmFatalError& e) {
      // NB: the program compiles again without AVX-512 (kept under a key of its own); where that
      // fails too, the graph runs on the reference runner.
      mod->cache_key = cache_key_hash(text + "\nwithout avx512");
      cached = !options.want_llvm_ir && disk_cache_load(options.cache_dir, mod->cache_key, &object);
      try {
        if (!cached) build(false);
      } catch (const LlvmFatalError& again) {
        throw Unsupported(std::string("LLVM could not compile a kernel of this graph: ") + again.what());
      }
    }
    if (!cached) disk_cache_store(options.cache_dir, mod->cache_key, object);
  }
  mod->from_disk_cache = cached;
  auto& jd = cantFail(j.lljit->createJITDylib("ff_module_" + std::to_string(j.modules++)));
  jd.addGenerator(cantFail(orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(j.lljit->getDataLayout().getGlobalPrefix())));
  orc::SymbolMap math;  // NB: the math library's functions are hidden symbols of framefuse: by address
  for (auto& [name, address] : inductor::math_fn_symbols())
    math[j.lljit->mangleAndIntern(name)] = JITEvaluatedSymbol(pointerToJITTargetAddress(address), JITSymbolFlags::Exported);
  cantFail(jd.define(orc::absoluteSymbols(std::move(math))));
  std::string failure;
  if (auto e = j.lljit->addObjectFile(jd, MemoryBuffer::getMemBufferCopy(object, "ff_" + mod->cache_key)))
    failure = "cannot load kernel object: " + toString(std::move(e));
  for (size_t k = 0; k < p.kernels.size() && failure.empty(); ++k) {
    auto sym = j.lljit->lookup(jd, "ff_kernel_" + std::to_string(k));
    if (!sym) failure = "cannot resolve kernel: " + toString(sym.takeError());
    else mod->kernels.push_back(reinterpret_cast<KernelFn>(sym->getAddress()));
  }
  if (!failure.empty()) {
    consumeError(j.lljit->getExecutionSession().removeJITDylib(jd));
    FF_CHECK(false, failure);
  }
  // NB: removed when the last graph holding the module lets it go (each JITDylib keeps a few
  // memory mappings: a process with ~27,000 of them reached the kernel's limit of 65,530).
  mod->jit_code = std::shared_ptr<void>(&jd, [](void* d) {
    Jit& j = jit();
    std::lock_guard<std::mutex> lock(j.mu);
    consumeError(j.lljit->getExecutionSession().removeJITDylib(*static_cast<orc::JITDylib*>(d)));
  });
  mod->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return mod;
}

#endif  // FRAMEFUSE_HAVE_LLVM

}  // namespace ff::inductor
