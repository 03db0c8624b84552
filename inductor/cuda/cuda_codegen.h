// Internals of the CUDA renderer shared by cuda_expr.cpp (expressions and statements as C++) and
// cuda_render.cpp (kernel strategies). Not a public interface.
#pragma once

#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inductor/cuda/cuda_render.h"
#include "inductor/loop_ir.h"
#include "inductor/loop_visitor.h"

namespace ff::cuda::detail {

const char* c_type(loop::ScalarType t);
const char* storage_type(DType t);  // throws InternalError for dtypes with no CUDA rendering

// Writes C++ for loop IR statements and expressions into `out`, one kernel at a time.
class Emitter {
 public:
  Emitter(const loop::Program& p, const loop::Kernel& k, std::ostringstream& out, bool wide_index)
      : p_(p), k_(k), out_(out), ix_(wide_index ? "long long" : "int") {}

  const char* ix() const { return ix_; }
  void line(int indent, const std::string& s) { out_ << std::string(static_cast<size_t>(indent) * 2, ' ') << s << "\n"; }

  // Name loop variable `var` as `expr` (a C++ expression) from now on.
  void bind_var(int var, std::string expr) { vars_[var] = std::move(expr); }

  // Vector lanes: while set, loads/stores in `vec_loads_`/`vec_stores_` use lane `lane` of their
  // register.
  void set_lane(int lane) { lane_ = lane; }
  std::map<const loop::ExprNode*, std::string> vec_loads;  // Load node -> register
  std::map<const loop::Stmt*, std::string> vec_stores;     // Store stmt -> register

  // Renders `e` as an expression; shared subexpressions become `const` temporaries emitted at
  // `indent` before the caller's line.
  std::string expr(const loop::Expr& e, int indent);
  // Loads converted to `type` / values converted for storage in buffer `buf`.
  std::string load_value(int buf, const std::string& element, loop::ScalarType type) const;
  std::string store_value(int buf, const std::string& value) const;

  // A statement rendered as sequential code (loops are plain for loops).
  void stmt(const loop::Stmt& s, int indent);
  // A size as a C++ expression of the index type: a literal, or arithmetic over the kernel's size
  // symbols (declare_locals).
  std::string size(const SymInt& s) const;
  // Kernel parameters (buffers, then the size symbols it reads) and local declarations.
  std::string params() const;
  void declare_locals(int indent);

  static std::string identity(loop::ReduceOp op, loop::ScalarType t);
  static int reduce_code(loop::ReduceOp op) { return static_cast<int>(op); }

 private:
  std::string render(const loop::Expr& e, const std::unordered_map<const loop::ExprNode*, int>& uses,
                     std::unordered_map<const loop::ExprNode*, std::string>& temps, int indent);
  bool nonneg(const loop::Expr& e) const;
  bool reads_data(const loop::Expr& e);  // holds a load or a local (not index arithmetic)

  const loop::Program& p_;
  const loop::Kernel& k_;
  std::ostringstream& out_;
  const char* ix_;
  std::map<int, std::string> vars_;
  int lane_ = -1;
  int temp_counter_ = 0;
  bool pair_sincos_ = false;
  std::map<std::string, std::pair<std::string, std::string>> sincos_;  // operand text -> (sin, cos)
  std::unordered_map<const loop::ExprNode*, bool> reads_data_;
};

using loop::for_each_expr;
using loop::for_each_expr_in;
using loop::for_each_stmt;

}  // namespace ff::cuda::detail
