// The op enums of tinygrad 0.9.2 (ops.py and codegen/uops.py).
#pragma once
#include <cstdint>
#include <string>

#include "tg/schedule.hpp"

namespace tg {

// Order controls the linearizer's toposort priority, as in tinygrad.
enum class Ops : uint8_t {
  SINK, EXPAND, CONTRACT,
  DEFINE_GLOBAL, DEFINE_VAR, DEFINE_LOCAL, DEFINE_ACC,
  CONST, SPECIAL,
  NOOP, GEP,
  CAST, BITCAST, VECTORIZE,
  ALU, REDUCE, WMMA,
  LOAD, STORE, PHI,
  BARRIER, IF, RANGE,
  ENDRANGE, ENDIF,
  PREFETCH,       // src: (buffer, index): a cache hint for an address a later loop reads (CPU)
  // kernel AST only (the scheduler's output, removed by the lowerer)
  SHAPETRACKER,   // arg: the ShapeTracker of a LOAD/STORE/CONST
  REDUCE_AXIS,    // arg: ReduceArg{op, axes}
  BIND,           // src: (DEFINE_VAR, CONST value)
  COUNT_
};
constexpr int kNumOps = static_cast<int>(Ops::COUNT_);

enum class UnaryOps : uint8_t { EXP2, LOG2, CAST, BITCAST, SIN, SQRT, NEG, RECIP };
enum class BinaryOps : uint8_t { ADD, MUL, IDIV, MAX, MOD, CMPLT, CMPNE, XOR, SHL, SHR, OR, AND, THREEFRY,
                                 SHFL_XOR };   // SHFL_XOR(x, mask): x of the warp lane lane^mask (GPU renderers only)
enum class TernaryOps : uint8_t { WHERE, MULACC };
enum class ReduceOps : uint8_t { SUM, MAX, WMMA };
// MetaOps (EMPTY, CONST, COPY, ..., KERNEL) is public: include/tg/schedule.hpp

std::string to_string(Ops op);          // "UOps.ALU"
std::string to_string(UnaryOps op);     // "UnaryOps.EXP2"
std::string to_string(BinaryOps op);
std::string to_string(TernaryOps op);
std::string to_string(ReduceOps op);
std::string to_string(MetaOps op);

// do not preserve f(0) = 0, so a pad can't fuse through them
inline bool is_unsafe_pad_op(UnaryOps op) { return op == UnaryOps::RECIP || op == UnaryOps::LOG2 || op == UnaryOps::EXP2; }
inline bool is_unsafe_pad_op(BinaryOps op) { return op == BinaryOps::IDIV; }
inline bool is_commutative(BinaryOps op) {
  return op == BinaryOps::ADD || op == BinaryOps::MUL || op == BinaryOps::MAX || op == BinaryOps::CMPNE ||
         op == BinaryOps::XOR || op == BinaryOps::AND || op == BinaryOps::OR;
}

}  // namespace tg
