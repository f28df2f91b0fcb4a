// Kernel origin (tinygrad's Metadata): each Tensor op names itself with TG_OP("relu") and every
// LazyBuffer it creates records that name, plus the source line of an enclosing tg::Origin.
// The scheduler lists the metadata of every op a kernel fuses; DEBUG=2, GRAPH, PROFILE and errors print it.
// The outermost op wins (x.softmax() is "softmax", not its max/exp/sum), as tinygrad's _METADATA.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

struct Metadata {
  std::string name;         // the Tensor method: "relu", "add", "softmax"
  std::string file;         // basename of the caller's file, "" when no Origin was in scope
  uint32_t line = 0;
  bool backward = false;    // made by backward() for this op
  std::string str() const;  // "relu", "relu @ train.cpp:42", "relu bw @ train.cpp:42"
};

// One object per distinct value, alive for the whole process: LazyBuffers keep plain pointers.
const Metadata* intern_metadata(const std::string& name, const std::string& file = "", uint32_t line = 0, bool backward = false);

// The metadata new LazyBuffers get on this thread (nullptr outside any op).
const Metadata* current_metadata();

// RAII: sets the current metadata unless an outer op already did.
class MetadataScope {
 public:
  explicit MetadataScope(const Metadata* md);   // md names an op; the Origin's line is added here
  MetadataScope(const Metadata* md, bool exact);   // exact: md as given (backward passes)
  ~MetadataScope();
  MetadataScope(const MetadataScope&) = delete;
  MetadataScope& operator=(const MetadataScope&) = delete;
 private:
  bool set_ = false;
};

// "[relu, add @ train.cpp:42]": names sharing a location are grouped before it; "" when empty.
std::string format_metadata(const std::vector<std::string>& md);

}  // namespace tg

// First statement of a Tensor method: TG_OP("relu"). The name is interned once per call site.
#define TG_OP(NAME)                                                                   \
  static const ::tg::Metadata* const tg_op_md_ = ::tg::intern_metadata(NAME);       \
  ::tg::MetadataScope tg_op_scope_(tg_op_md_)
