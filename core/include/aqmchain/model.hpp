// Model description (SPEC sections 2 and 4): what the queue is, not how it is solved.
//
// Every type validates on construction (factories) and again in Model::validate(),
// throwing aqm::ModelError with a message that names the parameter, the bound and
// the value.  Nothing here knows about state spaces or matrices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aqmchain/errors.hpp"

namespace aqm {

// ---------------------------------------------------------------- sources (2.1)

/// A slotted source with at most one arrival per slot.  Bernoulli is the
/// one-state case of MMBP; SSMP is an MMBP built from (n, q, a).
struct Source {
  enum class Kind { Bernoulli, MMBP, SSMP };
  Kind kind = Kind::Bernoulli;
  /// Row-stochastic modulator matrix (row-major, n x n).  1 x 1 [[1]] for Bernoulli.
  std::vector<std::vector<double>> matrix{{1.0}};
  /// Arrival probability in each modulator state.
  std::vector<double> arrival{0.5};
  // SSMP parameters (kind == SSMP only).
  int ssmp_n = 0;
  double ssmp_q = 0.0, ssmp_a = 0.0;

  static Source bernoulli(double alpha);
  static Source mmbp(std::vector<std::vector<double>> matrix, std::vector<double> arrival);
  /// SPEC 2.1: M[0][j] = a^-j, M[j][0] = (q/a)^j, M[j][j] = 1 - (q/a)^j.
  static Source ssmp(int n, double q, double a);
  /// SSMP with the given mean rate pi_0 = (1 - 1/q)/(1 - q^-n), solving for q.
  static Source ssmp_from_mean(double mean, double a, int n);

  int states() const { return static_cast<int>(arrival.size()); }
  /// Stationary vector of the modulator (unique for an irreducible modulator).
  std::vector<double> modulator_stationary() const;
  /// Mean arrival rate sum_i pi_i lam_i.
  double mean_rate() const;
  /// Throws ModelError unless the matrix is square, stochastic and matches `arrival`.
  void validate(const std::string& prefix = "source") const;
  std::string describe() const;
};

/// Solve pi_0(q) = mean for the SSMP (SPEC 2.1); throws if no q in (0, a] fits.
double ssmp_q_for_mean(double mean, double a, int n);

/// Hurst-parameter report of an SSMP / MMBP arrival process (SPEC 2.1).
struct HurstReport {
  double asymptotic = 0.0;        ///< 1 - ln q / (2 ln(a/q)); NaN-free: valid only if `asymptotic_valid`
  bool asymptotic_valid = false;  ///< q > 1 and a > q^2
  double variance_time = 0.0;     ///< least-squares slope estimate over the levels below
  std::vector<long long> levels;  ///< aggregation levels m used by the fit
  std::vector<double> variances;  ///< exact Var(X^(m)) at those levels
};
/// Exact variance-time estimate over aggregation levels 2^lo .. 2^hi.
HurstReport hurst(const Source& s, int log2_lo = 0, int log2_hi = 20);

// ---------------------------------------------------------------- service (2.2)

struct Service {
  double mu = 0.5;  ///< geometric completion probability per slot, in (0, 1]
  static Service geometric(double mu);
  void validate(const std::string& prefix = "service") const;
};

// ---------------------------------------------------------------- drop functions (2.4)

struct DropFunction {
  enum class Kind { None, RED, GentleRED, DSRED, SRED, NLRED, Polynomial, Table };
  Kind kind = Kind::None;
  double lo = 0.0, hi = 0.0;  ///< min_th / max_th (RED family), K_l / K_h (DSRED), min_th / q_max (SRED)
  double p_max = 0.0;         ///< RED, GentleRED, NLRED
  double gamma = 0.0;         ///< DSRED
  double seg = 0.0;           ///< SRED segment point (0 = default 0.6 q_max)
  std::vector<double> coeffs;                     ///< Polynomial
  std::vector<std::pair<double, double>> points;  ///< Table

  static DropFunction none();
  static DropFunction red(double min_th, double max_th, double p_max);
  static DropFunction gentle_red(double min_th, double max_th, double p_max);
  static DropFunction dsred(double k_l, double k_h, double gamma);
  /// q_max <= 0 means "the buffer size", resolved by Model::resolved_drop().
  static DropFunction sred(double min_th, double q_max = 0.0, double seg = 0.0);
  static DropFunction nlred(double min_th, double max_th, double p_max);
  static DropFunction polynomial(double min_th, double max_th, std::vector<double> coeffs);
  static DropFunction table(std::vector<std::pair<double, double>> points);

  /// p(avg) in [0, 1].
  double operator()(double avg) const;
  void validate(const std::string& prefix = "aqm") const;
  std::string name() const;
};

// ---------------------------------------------------------------- AQM (2.3, 2.5)

enum class UpdateRule { PerSlot, PerArrival };
enum class DropPolicy { Tail, Front, Random };

struct Aqm {
  DropFunction drop = DropFunction::none();
  double w = 0.002;  ///< EWMA weight in (0, 1]
  UpdateRule update = UpdateRule::PerSlot;
  DropPolicy policy = DropPolicy::Tail;
  double ecn = 0.0;  ///< probability an arrival is ECN-capable
  void validate(const std::string& prefix = "aqm") const;
};

// ---------------------------------------------------------------- grid (4)

enum class Mapping { Split, Nearest, Flags };

struct GridSpec {
  int k = 4;                   ///< uniform step 1/k on [0, N] (ignored when `points` given or Flags)
  std::vector<double> points;  ///< custom grid (0 = g_0 < ... < g_L = N); empty = uniform
  Mapping mapping = Mapping::Split;
  /// Grid points for buffer size N.
  std::vector<double> resolve(int buffer) const;
  void validate(int buffer, const std::string& prefix = "grid") const;
};

/// Where the continuous update value y lands: grid index `lo` with probability
/// `p_lo`, else `lo + 1` (p_lo == 1 means a single target).
struct GridTarget {
  int32_t lo;
  double p_lo;
};

/// A resolved grid with its mapping; `map` is SPEC 4 exactly.
class Grid {
 public:
  Grid(std::vector<double> points, Mapping mapping);
  GridTarget map(double y) const;
  const std::vector<double>& points() const { return pts_; }
  int size() const { return static_cast<int>(pts_.size()); }
  Mapping mapping() const { return mapping_; }

 private:
  std::vector<double> pts_;
  Mapping mapping_;
  double uniform_step_ = 0.0;  ///< > 0 when the points are uniform (fast path)
};

// ---------------------------------------------------------------- model

struct Model {
  int buffer = 250;  ///< N, counts the packet in service
  Source source = Source::bernoulli(0.5);
  Service service;
  Aqm aqm;
  GridSpec grid;

  void validate() const;
  /// The drop function with defaults that depend on N filled in (SRED q_max).
  DropFunction resolved_drop() const;
};

std::string to_string(UpdateRule);
std::string to_string(DropPolicy);
std::string to_string(Mapping);
UpdateRule update_rule_from(const std::string&);
DropPolicy drop_policy_from(const std::string&);
Mapping mapping_from(const std::string&);

}  // namespace aqm
