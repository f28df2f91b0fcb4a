// What Tensor::schedule() returns (tinygrad's ScheduleItem): the kernels and copies that realize
// a tensor, in order. A user prints them; the library lowers and runs them (src/engine/realize).
//   for (auto& si : t.schedule()) std::cout << si.str() << "\n";
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tg {

class Buffer;      // src/runtime/buffer.hpp
struct UOpNode;    // src/uop/uop.hpp

// What a LazyBuffer / ScheduleItem does besides computing: tinygrad's MetaOps.
enum class MetaOps : uint8_t { EMPTY, CONST, COPY, CONTIGUOUS, CUSTOM, ASSIGN, VIEW, KERNEL, EXT };

// A kernel's AST, a UOp graph (SINK of STOREs; src/engine/schedule.hpp describes it): opaque
// here, printable. Graphs are interned, so == is structural equality.
class Ast {
 public:
  std::string str() const;   // tinygrad's pretty-printed UOp tree; "None" when empty
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const Ast& a, const Ast& b) { return a.p_ == b.p_; }
 private:
  std::shared_ptr<const UOpNode> p_;
  friend struct Access;      // src/access.hpp
};

struct ScheduleItem {
  MetaOps kind = MetaOps::KERNEL;              // KERNEL, COPY, EMPTY, VIEW, CUSTOM
  Ast ast;                                     // KERNEL only
  std::vector<std::shared_ptr<Buffer>> bufs;   // outputs then inputs (COPY: dest, src)
  int n_outputs = 1;
  std::vector<std::string> metadata;           // names of the Tensor ops that made it (for DEBUG lines)
  // "ScheduleItem(ast=<the tree>, bufs=(<buf CPU 6 dtypes.float>, ...))"; COPY etc. print their kind
  std::string str() const;
};

}  // namespace tg
