// LazyBuffer: the lazy graph between Tensor and the scheduler (tinygrad 0.9.2 lazy.py).
// A base buffer holds an op (or, once realized, a Buffer); a view holds a ShapeTracker over a base.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tg/dtype.hpp"
#include "tg/shapetracker.hpp"
#include "uop/ops.hpp"

namespace tg {

class Buffer;   // runtime/buffer.hpp
struct Metadata;   // lazy/metadata.hpp
class LazyBuffer;
using LazyBufferPtr = std::shared_ptr<LazyBuffer>;

// The op of a base LazyBuffer.
using LBOp = std::variant<std::monostate, MetaOps, UnaryOps, BinaryOps, TernaryOps, ReduceOps>;
// Its arg: CONST value, CAST/BITCAST target dtype, reduce axes (sorted), ASSIGN target view (only when the
// target view isn't contiguous), COPY byte count. CUSTOM carries no callable yet. A CONST may hold a
// sint of bound Variables instead of a number (tinygrad's Tensor.from_node): a mean's divisor over a
// symbolic axis; kernels read it as the Variable, so one kernel serves every value.
using LBArg = std::variant<std::monostate, ConstType, DType, std::vector<int64_t>, ShapeTracker, int64_t, sint>;

class LazyBuffer : public std::enable_shared_from_this<LazyBuffer> {
 public:
  std::string device;
  ShapeTracker st;
  DType dtype;

  // base properties (meaningless on views)
  LBOp op;
  LBArg arg;
  std::vector<LazyBufferPtr> srcs;          // cleared once realized, so the graph above is freed
  std::shared_ptr<Buffer> buffer;           // set by from_buffer, or by the scheduler (ensure_buffer)
  std::weak_ptr<LazyBuffer> contiguous_child;   // with contiguous_child_st: a contiguous copy of this base
  std::optional<ShapeTracker> contiguous_child_st;
  bool forced_realize = false;
  const Metadata* metadata = nullptr;      // the Tensor op that made this base (interned)

  // creation (tinygrad's create_lazybuffer / LazyBuffer.metaop); size-0 shapes become CONST 0
  static LazyBufferPtr create(const std::string& device, const ShapeTracker& st, DType dtype, LBOp op = {},
                              LBArg arg = {}, std::vector<LazyBufferPtr> srcs = {}, LazyBufferPtr base = nullptr);
  static LazyBufferPtr metaop(MetaOps op, const Shape& shape, DType dtype, const std::string& device,
                              LBArg arg = {}, std::vector<LazyBufferPtr> srcs = {});
  // a realized base over an existing Buffer (EMPTY op, no srcs); shape must have buf->size elements
  static LazyBufferPtr from_buffer(std::shared_ptr<Buffer> buf, const Shape& shape);

  const Shape& shape() const { return st.shape(); }   // symbolic dims at their bound value
  std::vector<sint> sym_shape() const { return st.sym_shape(); }
  ShapeTracker fresh_st() const;             // a contiguous tracker of this shape (symbolic dims kept)
  int64_t size() const;                      // elements of this shape, prod(shape()) (tinygrad 0.9.2's st.size)
  LazyBufferPtr base();                      // self when this is a base
  bool is_base() const { return base_ == nullptr; }
  bool realized() const;                     // base with a buffer and no pending srcs (tinygrad's `realized`)
  bool is_realized();                        // base().realized()
  bool is_unrealized_const();                // a CONST of a number (not a symbolic one)
  bool is_symbolic_const();                  // an unrealized CONST whose value is a sint of Variables
  bool is_unrealized_unmasked_const();
  bool can_view();
  std::string str() const;                   // "<LB CPU (3,) int (MetaOps.COPY, None)>"
  ~LazyBuffer();                             // drops its Buffer reference; frees deep graphs without recursion
  // the Buffer a scheduled base writes: a new one, the ASSIGN target's, or a view of the VIEW source's
  const std::shared_ptr<Buffer>& ensure_buffer();

  LazyBufferPtr const_(ConstType val, std::optional<Shape> shape = {});
  LazyBufferPtr assign(const LazyBufferPtr& x);
  LazyBufferPtr contiguous(bool allow_buffer_view = true);
  LazyBufferPtr cast(DType dtype, bool bitcast = false, bool allow_buffer_view = true);
  LazyBufferPtr copy_to_device(const std::string& device, bool force = false);
  // elementwise with const folding at construction (all-const ALU, x+0, x*1, x*0, x*-1, -(-x))
  LazyBufferPtr e(UnaryOps op);
  LazyBufferPtr e(BinaryOps op, const LazyBufferPtr& y);
  LazyBufferPtr e(TernaryOps op, const LazyBufferPtr& y, const LazyBufferPtr& z);
  LazyBufferPtr e(MetaOps op);               // CONTIGUOUS / VIEW of this
  // reduce with const folding and reduce splitting (REDUCEOP_SPLIT_THRESHOLD)
  LazyBufferPtr r(ReduceOps op, const std::vector<int64_t>& axis);

  // movement: zero-copy views
  LazyBufferPtr reshape(const Shape& arg);
  LazyBufferPtr pad(const std::vector<std::pair<int64_t, int64_t>>& arg);
  LazyBufferPtr expand(const Shape& arg);
  LazyBufferPtr reshape_sym(const std::vector<sint>& arg);
  LazyBufferPtr expand_sym(const std::vector<sint>& arg);
  LazyBufferPtr pad_sym(const SMask& arg);
  LazyBufferPtr shrink_sym(const SMask& arg);
  LazyBufferPtr permute(const std::vector<int>& arg);
  LazyBufferPtr shrink(const std::vector<std::pair<int64_t, int64_t>>& arg);
  LazyBufferPtr stride(const std::vector<int64_t>& arg);

  // op tests on a base: lb->op_is(MetaOps::CONST), lb->is_reduce()
  template <class T> bool op_is(T v) const { auto p = std::get_if<T>(&op); return p != nullptr && *p == v; }
  bool is_reduce() const { return std::holds_alternative<ReduceOps>(op); }

  LazyBufferPtr base_;                       // set on views only
 private:
  LazyBufferPtr view_(const ShapeTracker& new_st);
  LazyBufferPtr alu_(LBOp op, const std::vector<LazyBufferPtr>& in_srcs);
  LazyBufferPtr reduce_op_(ReduceOps op, const std::vector<int64_t>& axis);
  LazyBufferPtr copy_(const std::string& device);
};

}  // namespace tg
