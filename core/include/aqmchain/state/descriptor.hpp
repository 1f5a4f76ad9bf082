// State descriptor: a state is a tuple of named integer components, each with a
// range 0..size-1, packed into one 64-bit key in mixed radix (the first
// component is the most significant, so keys sort lexicographically by the
// components in the order they were added).  The builder explores keys and
// never names a component; models, metrics, the multilevel solver and the
// response-time chain read components through the descriptor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aqm {

struct Component {
  std::string name;     ///< e.g. "n", "avg", "modulator"
  int32_t size = 1;     ///< values 0 .. size - 1
  bool coarsen = true;  ///< multilevel aggregation may merge neighbouring values (false: categorical, e.g. a modulator)
  bool in_block = false;  ///< inside the preconditioner's diagonal block (set by the generator: for the queue models level, s_index, modulator)
};

class StateSpace {
 public:
  /// Append a component; returns its position.  Throws std::invalid_argument on an
  /// empty or duplicate name, size < 1, or a product of sizes above 2^62.
  int add(std::string name, int32_t size, bool coarsen = true, bool in_block = false);

  int count() const { return static_cast<int>(components_.size()); }
  /// Same components (names, sizes, coarsen and in_block flags) in the same order.
  bool operator==(const StateSpace& o) const {
    if (count() != o.count()) return false;
    for (int i = 0; i < count(); ++i) {
      const Component &a = component(i), &b = o.component(i);
      if (a.name != b.name || a.size != b.size || a.coarsen != b.coarsen || a.in_block != b.in_block) return false;
    }
    return true;
  }
  const Component& component(int i) const { return components_.at(static_cast<size_t>(i)); }
  const std::vector<Component>& components() const { return components_; }
  /// Position of the component called `name`, or -1.
  int find(const std::string& name) const;
  /// Position of `name`; throws std::out_of_range naming it when absent.
  int at(const std::string& name) const;
  /// Number of tuples (product of the sizes).
  int64_t product() const { return product_; }
  int64_t stride(int i) const { return stride_.at(static_cast<size_t>(i)); }

  /// Key of a tuple (values[i] in 0..size_i-1, unchecked on the hot path).
  int64_t encode(const int32_t* values) const {
    int64_t k = 0;
    for (size_t i = 0; i < components_.size(); ++i) k += stride_[i] * values[i];
    return k;
  }
  /// Tuple of a key.
  void decode(int64_t key, int32_t* values) const {
    for (size_t i = 0; i < components_.size(); ++i) {
      values[i] = static_cast<int32_t>(key / stride_[i]);
      key -= stride_[i] * values[i];
    }
  }
  /// One component of a key.
  int32_t value(int64_t key, int i) const {
    return static_cast<int32_t>((key / stride_[static_cast<size_t>(i)]) % components_[static_cast<size_t>(i)].size);
  }
  /// encode() with range checks (std::out_of_range naming the component).
  int64_t encode_checked(const std::vector<int32_t>& values) const;

 private:
  std::vector<Component> components_;
  std::vector<int64_t> stride_;
  int64_t product_ = 1;
};

}  // namespace aqm
