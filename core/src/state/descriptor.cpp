#include "aqmchain/state/descriptor.hpp"

#include <stdexcept>

#include "aqmchain/errors.hpp"

namespace aqm {

int StateSpace::add(std::string name, int32_t size, bool coarsen, bool in_block) {
  if (name.empty()) throw std::invalid_argument("state component needs a name");
  if (find(name) >= 0) throw std::invalid_argument("state component '" + name + "' added twice");
  if (size < 1) throw std::invalid_argument(detail::cat("state component '", name, "' must have size >= 1, got ", size));
  if (product_ > (int64_t{1} << 62) / size)
    throw std::invalid_argument(detail::cat("state component '", name, "' of size ", size,
                                            " makes the product of component sizes exceed 2^62"));
  components_.push_back({std::move(name), size, coarsen, in_block});
  product_ *= size;
  // strides: the last component varies fastest
  stride_.assign(components_.size(), 1);
  for (int i = count() - 2; i >= 0; --i) stride_[i] = stride_[i + 1] * components_[i + 1].size;
  return count() - 1;
}

int StateSpace::find(const std::string& name) const {
  for (int i = 0; i < count(); ++i)
    if (components_[i].name == name) return i;
  return -1;
}

int StateSpace::at(const std::string& name) const {
  const int i = find(name);
  if (i < 0) throw std::out_of_range("the state has no component '" + name + "'");
  return i;
}

int64_t StateSpace::encode_checked(const std::vector<int32_t>& values) const {
  if (static_cast<int>(values.size()) != count())
    throw std::out_of_range(detail::cat("a state has ", count(), " components, got ", values.size(), " values"));
  for (int i = 0; i < count(); ++i)
    if (values[i] < 0 || values[i] >= components_[i].size)
      throw std::out_of_range(detail::cat("state component '", components_[i].name, "' must be in [0, ",
                                          components_[i].size - 1, "], got ", values[i]));
  return encode(values.data());
}

}  // namespace aqm
