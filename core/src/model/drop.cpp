// Drop functions (SPEC 2.4).
#include "aqmchain/model/drop.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "model/validate.hpp"

namespace aqm {

using namespace detail;

// ---------------------------------------------------------------- drop functions

DropFunction DropFunction::none() { return DropFunction{}; }

#define AQM_MAKE(KIND, ...)  \
  DropFunction f;            \
  f.kind = Kind::KIND;       \
  __VA_ARGS__;               \
  f.validate();              \
  return f

DropFunction DropFunction::red(double min_th, double max_th, double p_max) {
  AQM_MAKE(RED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::gentle_red(double min_th, double max_th, double p_max) {
  AQM_MAKE(GentleRED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::dsred(double k_l, double k_h, double gamma) {
  AQM_MAKE(DSRED, f.lo = k_l, f.hi = k_h, f.gamma = gamma);
}
DropFunction DropFunction::sred(double min_th, double q_max, double seg) {
  AQM_MAKE(SRED, f.lo = min_th, f.hi = q_max, f.seg = seg);
}
DropFunction DropFunction::nlred(double min_th, double max_th, double p_max) {
  AQM_MAKE(NLRED, f.lo = min_th, f.hi = max_th, f.p_max = p_max);
}
DropFunction DropFunction::polynomial(double min_th, double max_th, std::vector<double> coeffs) {
  AQM_MAKE(Polynomial, f.lo = min_th, f.hi = max_th, f.coeffs = std::move(coeffs));
}
DropFunction DropFunction::table(std::vector<std::pair<double, double>> points) {
  AQM_MAKE(Table, f.points = std::move(points));
}
#undef AQM_MAKE

void DropFunction::validate(const std::string& p) const {
  switch (kind) {
    case Kind::None: return;
    case Kind::RED:
    case Kind::GentleRED:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      require_prob(p + ".p_max", p_max);
      return;
    case Kind::NLRED:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      require_prob(p + ".p_max", p_max);
      if (1.5 * p_max > 1.0) fail_param(p + ".p_max", "<= 2/3 (NLRED reaches 1.5 p_max at max_th)", p_max);
      return;
    case Kind::DSRED:
      require_ordered(p + ".k_l", lo, p + ".k_h", hi);
      require_prob(p + ".gamma", gamma);
      return;
    case Kind::SRED: {
      require_nonneg(p + ".min_th", lo);
      // q_max = 0 and seg = 0 mean the defaults (the buffer, 0.6 q_max); a negative one is an error
      require_finite(p + ".q_max", hi);
      if (hi < 0.0) fail_param(p + ".q_max", "> 0 (or 0: the buffer)", hi);
      require_finite(p + ".seg", seg);
      if (seg < 0.0) fail_param(p + ".seg", "> 0 (or 0: 0.6 q_max)", seg);
      if (hi == 0.0) return;  // q_max not resolved yet (defaults to the buffer)
      require_ordered(p + ".min_th", lo, p + ".q_max", hi);
      const double s = seg > 0.0 ? seg : 0.6 * hi;
      if (seg != 0.0) require_finite(p + ".seg", seg);
      if (!(s > lo && s < hi))
        fail_param(p + ".seg", detail::cat("in (min_th, q_max) = (", lo, ", ", hi, ")"), s);
      return;
    }
    case Kind::Polynomial:
      require_ordered(p + ".min_th", lo, p + ".max_th", hi);
      if (coeffs.empty()) fail_param(p + ".coeffs", "a non-empty list", "[]");
      for (size_t i = 0; i < coeffs.size(); ++i) require_finite(detail::cat(p, ".coeffs[", i, "]"), coeffs[i]);
      return;
    case Kind::Table:
      if (points.empty()) fail_param(p + ".points", "a non-empty list of [avg, p]", "[]");
      for (size_t i = 0; i < points.size(); ++i) {
        require_finite(detail::cat(p, ".points[", i, "][0]"), points[i].first);
        require_prob(detail::cat(p, ".points[", i, "][1]"), points[i].second);
        if (i > 0 && !(points[i].first > points[i - 1].first))
          fail_param(detail::cat(p, ".points[", i, "][0]"),
                     detail::cat("> the previous avg ", points[i - 1].first, " (strictly increasing)"),
                     points[i].first);
      }
      return;
  }
}

double DropFunction::operator()(double avg) const {
  switch (kind) {
    case Kind::None: return 0.0;
    case Kind::RED:
      if (avg < lo) return 0.0;
      if (avg < hi) return p_max * (avg - lo) / (hi - lo);
      return 1.0;
    case Kind::GentleRED:
      if (avg < lo) return 0.0;
      if (avg < hi) return p_max * (avg - lo) / (hi - lo);
      if (avg < 2.0 * hi) return p_max + (1.0 - p_max) * (avg - hi) / hi;
      return 1.0;
    case Kind::DSRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double km = 0.5 * (lo + hi);
      if (avg < km) return 2.0 * (1.0 - gamma) / (hi - lo) * (avg - lo);
      return 1.0 - gamma + 2.0 * gamma / (hi - lo) * (avg - km);
    }
    case Kind::SRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double s = seg > 0.0 ? seg : 0.6 * hi;
      if (avg < s) {
        const double x = (avg - lo) / (hi - lo);
        return x * x;
      }
      const double xs = (s - lo) / (hi - lo), pseg = xs * xs;
      const double x = (avg - s) / (hi - s);
      return pseg + (1.0 - pseg) * x * x;
    }
    case Kind::NLRED: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double x = (avg - lo) / (hi - lo);
      return 1.5 * p_max * x * x;
    }
    case Kind::Polynomial: {
      if (avg < lo) return 0.0;
      if (avg >= hi) return 1.0;
      const double x = (avg - lo) / (hi - lo);
      double v = 0.0;
      for (size_t k = coeffs.size(); k-- > 0;) v = v * x + coeffs[k];
      return std::clamp(v, 0.0, 1.0);
    }
    case Kind::Table: {
      if (avg <= points.front().first) return points.front().second;
      if (avg >= points.back().first) return points.back().second;
      const auto it = std::upper_bound(points.begin(), points.end(), avg,
                                       [](double a, const std::pair<double, double>& pt) { return a < pt.first; });
      const auto& b = *it;
      const auto& a = *(it - 1);
      return a.second + (b.second - a.second) * (avg - a.first) / (b.first - a.first);
    }
  }
  return 0.0;
}

std::vector<double> DropFunction::breakpoints(int buffer) const {
  std::vector<double> b;
  switch (kind) {
    case Kind::None: break;
    case Kind::RED:
    case Kind::NLRED:
    case Kind::Polynomial: b = {lo, hi}; break;
    case Kind::GentleRED: b = {lo, hi, 2.0 * hi}; break;
    case Kind::DSRED: b = {lo, 0.5 * (lo + hi), hi}; break;
    case Kind::SRED: {
      const double top = hi > 0.0 ? hi : buffer;
      b = {lo, seg > 0.0 ? seg : 0.6 * top, top};
      break;
    }
    case Kind::Table:
      for (const auto& pt : points) b.push_back(pt.first);
      break;
  }
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  b.erase(std::remove_if(b.begin(), b.end(), [&](double x) { return !(x > 0.0 && x < buffer); }), b.end());
  return b;
}

std::string DropFunction::name() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::RED: return "red";
    case Kind::GentleRED: return "gentle_red";
    case Kind::DSRED: return "dsred";
    case Kind::SRED: return "sred";
    case Kind::NLRED: return "nlred";
    case Kind::Polynomial: return "polynomial";
    case Kind::Table: return "table";
  }
  return "?";
}

}  // namespace aqm
