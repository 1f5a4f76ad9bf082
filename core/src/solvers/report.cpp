#include "aqmchain/solvers/report.hpp"

namespace aqm {

std::string to_string(Status s) {
  switch (s) {
    case Status::Converged: return "converged";
    case Status::NotConverged: return "not_converged";
    case Status::Stalled: return "stalled";
    case Status::NumericalIssue: return "numerical_issue";
    case Status::NotComputed: return "not_computed";
  }
  return "?";
}

}  // namespace aqm
