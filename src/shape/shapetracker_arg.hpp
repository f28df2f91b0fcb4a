// A ShapeTracker as a UOp arg: the SHAPETRACKER node of kernel ASTs (LOAD/STORE/CONST sources).
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "tg/shapetracker.hpp"
#include "uop/uop.hpp"

namespace tg {

struct STArg : ArgObj {
  ShapeTracker st;
  explicit STArg(ShapeTracker s) : st(std::move(s)) {}
  size_t hash() const override { return st.hash(); }
  bool equals(const ArgObj& o) const override {
    auto p = dynamic_cast<const STArg*>(&o);
    return p && p->st == st;
  }
  std::string str() const override { return st.str(); }
};

// int32, or int64 where one of st's views indexes past int32 (its offset plus strides times dims).
DType index_dtype(const ShapeTracker& st);
// (index, valid) as index_dtype(st) / bool UOps over idxs (default: DEFINE_VAR "idx<i>" in [0, shape[i]-1]).
// Not simplified: the lowerer's symbolic pass cleans them up. Wrong idxs count: tg::Error.
std::pair<UOp, UOp> to_indexed_uops(const ShapeTracker& st, const std::vector<UOp>& idxs = {});

inline UOp st_uop(const ShapeTracker& st) {
  return UOp(Ops::SHAPETRACKER, dtypes::void_, {}, ArgObjPtr(std::make_shared<const STArg>(st)));
}

inline const ShapeTracker& st_of(const UOp& u) {
  TG_ASSERT(u && u->op == Ops::SHAPETRACKER, "st_of: not a SHAPETRACKER uop");
  auto p = u->is<ArgObjPtr>() ? dynamic_cast<const STArg*>(u->as<ArgObjPtr>().get()) : nullptr;
  TG_ASSERT(p != nullptr, "st_of: SHAPETRACKER uop without a ShapeTracker arg");
  return p->st;
}

}  // namespace tg
