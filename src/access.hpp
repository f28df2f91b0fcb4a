// The library's way into the public classes' private parts. The public headers (include/tg/)
// show the API and nothing else; code in src/ and the white-box tests reach a Tensor's shared
// data and the UOp behind an Expr or an Ast through here.
#pragma once
#include <memory>
#include <optional>
#include <utility>

#include "tg/schedule.hpp"
#include "tg/symbolic.hpp"
#include "tg/tensor.hpp"
#include "uop/uop.hpp"

namespace tg {

class LazyBuffer;   // src/lazy/lazy.hpp

struct Access {
  // Tensor: the shared slots behind a handle (src/tensor/tensor_impl.hpp), and a handle to them
  static const std::shared_ptr<TensorData>& impl(const Tensor& t) { return t.d_; }
  static Tensor tensor(std::shared_ptr<TensorData> d) { return Tensor(std::move(d)); }
  // the LazyBuffer behind a Tensor, and a new Tensor around one (src/tensor/tensor.cpp)
  static std::shared_ptr<LazyBuffer> lazydata(const Tensor& t);
  static Tensor from_lazydata(std::shared_ptr<LazyBuffer> lb, std::optional<bool> requires_grad = {});
  // Expr: the simplified UOp behind it, and an Expr wrapping a UOp as is (no simplification)
  static const UOp& uop(const Expr& e) { return *e.u_; }
  static Expr expr(const UOp& u) {
    TG_ASSERT(u, "Expr of an empty UOp");
    Expr e;
    e.u_ = std::make_shared<const UOp>(u);
    return e;
  }
  // Ast: a kernel's SINK
  static UOp uop(const Ast& a) { return a.p_ ? a.p_->self() : UOp(); }
  static Ast ast(const UOp& u) {
    Ast a;
    if (u) a.p_ = u->shared_from_this();
    return a;
  }
};

// BIND(DEFINE_VAR, CONST v): a bound Variable as the scheduler and the JIT pass it (src/uop/expr.cpp).
// Throws tg::Error if v is not bound.
UOp bound_uop(const Variable& v);

}  // namespace tg
