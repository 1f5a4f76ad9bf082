// Internal: multilevel aggregation solver (see multilevel.cpp).
#pragma once

#include "aqmchain/solvers.hpp"

namespace aqm::detail {
/// Fills r.pi (not normalised residual accounting: the caller finishes), r.iterations,
/// r.matvecs, r.seconds and r.extra.
void solve_multilevel(const Chain& c, const StationaryOptions& o, StationaryResult& r);
}  // namespace aqm::detail
