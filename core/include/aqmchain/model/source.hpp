// Arrival sources (SPEC 2.1): Bernoulli, MMBP, SSMP, and their Hurst report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"
#include "aqmchain/model/registry.hpp"

namespace aqm {

// ---------------------------------------------------------------- sources (2.1)

/// At most this many modulator states (SSMP n, MMBP matrix size): checked before
/// the n x n matrix is allocated or eliminated (GTH is O(n^3) on a dense matrix).
constexpr int kMaxModulatorStates = 1000;
/// At most this many SSMP modulator states (source.n): the SSMP's modulator is eliminated
/// in O(n^2) (its rows are sparse), so only the dense n x n matrix (128 MiB at 4096) bounds it.
constexpr int kMaxSsmpStates = 4096;
/// At most this many arrivals in one slot (the batch source's B): the chain's slot kernel
/// enumerates the admitted count of a batch in O(B^2) per transition branch.
constexpr int kMaxBatch = 64;

/// An arrival source.  Slotted kinds (at most one arrival per slot): Bernoulli is
/// the one-state case of MMBP; SSMP is an MMBP built from (n, q, a).
/// Continuous-time kinds (SPEC 6): Poisson is the one-state case of MMPP.
/// Batch: a slotted MMBP whose modulator state i brings k = 0..B arrivals in a slot with
/// probability batch[i][k] (docs/batch-arrivals.md); its one-state case is batch Bernoulli.
struct Source {
  enum class Kind { Bernoulli, MMBP, SSMP, Poisson, MMPP, Batch };
  Kind kind = Kind::Bernoulli;
  /// Slotted kinds: row-stochastic modulator matrix (n x n), [[1]] for Bernoulli.
  /// Continuous kinds: the modulator's generator (rows sum to 0), [[0]] for Poisson.
  std::vector<std::vector<double>> matrix{{1.0}};
  /// Slotted kinds: arrival probability in each modulator state (Batch: the mean number of
  /// arrivals in a slot, sum_k k batch[i][k]).
  /// Continuous kinds: arrival rate (per unit time) in each modulator state.
  std::vector<double> arrival{0.5};
  /// A kind with more than one arrival in a slot (Batch, or a new kind built through
  /// batch_mmbp): per modulator state the pmf of the number of arrivals, k = 0..B (every row
  /// B + 1 entries); max_batch(), count_pmf(), validate() and hurst() read this, not the kind.
  /// Empty for the one-arrival kinds (use count_pmf()).
  std::vector<std::vector<double>> batch;
  // SSMP parameters (kind == SSMP only).
  int ssmp_n = 0;
  double ssmp_q = 0.0, ssmp_a = 0.0;

  static Source bernoulli(double alpha);
  static Source mmbp(std::vector<std::vector<double>> matrix, std::vector<double> arrival);
  /// SPEC 2.1: M[0][j] = a^-j, M[j][0] = (q/a)^j, M[j][j] = 1 - (q/a)^j.  Refuses
  /// (ModelError naming source.n) an n whose a^-j or (q/a)^j underflow to 0 in double
  /// precision: those modulator states would be unreachable or absorbing.
  static Source ssmp(int n, double q, double a);
  /// SSMP with the given mean rate pi_0 = (1 - 1/q)/(1 - q^-n), solving for q.
  static Source ssmp_from_mean(double mean, double a, int n);
  /// Poisson arrivals with the given rate per unit time (continuous time).
  static Source poisson(double rate);
  /// Markov-modulated Poisson process: generator (rows sum to 0, off-diagonals
  /// >= 0) and the arrival rate in each modulator state (continuous time).
  static Source mmpp(std::vector<std::vector<double>> generator, std::vector<double> rates);
  /// Batch MMBP: row-stochastic modulator matrix and, per modulator state, the pmf of the
  /// number of arrivals in a slot (k = 0..B, B <= kMaxBatch; rows of equal length, each
  /// summing to 1 within 1e-12).  A 1 x 1 matrix [[1]] gives batch Bernoulli.
  static Source batch_mmbp(std::vector<std::vector<double>> matrix, std::vector<std::vector<double>> counts);

  /// True for the continuous-time kinds (Poisson, MMPP): the registry's flag.
  bool continuous() const;

  int states() const { return static_cast<int>(arrival.size()); }
  /// Most arrivals in one slot: B of a batch source, 1 for the other kinds.
  int max_batch() const { return !batch.empty() ? static_cast<int>(batch[0].size()) - 1 : 1; }
  /// Per modulator state the pmf of the number of arrivals in a slot, k = 0..max_batch():
  /// the batch rows, or {1 - lam_i, lam_i} for the slotted kinds with one arrival at most.
  std::vector<std::vector<double>> count_pmf() const;
  /// Stationary vector of the modulator (unique for an irreducible modulator).
  /// Irreducibility is decided on the graph of the positive entries (subnormal ones
  /// included); GTH is scaled so that tiny entries cannot overflow the ratios.
  std::vector<double> modulator_stationary() const;
  /// Mean arrival rate sum_i pi_i lam_i (per slot: the mean number of arrivals).
  double mean_rate() const;
  /// Throws ModelError unless the matrix is square, stochastic and matches `arrival`.
  void validate(const std::string& prefix = "source") const;
  std::string describe() const;
  /// The registry name of the kind ("bernoulli", "ssmp", ...).
  std::string kind_name() const;

  /// The source `kind` (a registry name) from its parameters by name, validated; ModelError
  /// names an unknown kind, a missing or an unexpected parameter.
  static Source make(const std::string& kind, const ParamValues& values);
  /// This source's parameters by name (the registry's, as a model file writes them).
  ParamValues args() const;
};

/// One kind of source: the registry entry.  Every member is given to the constructor.
struct SourceKindSpec {
  using Make = Source (*)(const ParamValues&);
  using Args = ParamValues (*)(const Source&);
  using Describe = std::string (*)(const Source&);

  Source::Kind kind;
  std::string name;
  std::string doc;     ///< one line
  bool continuous;     ///< a continuous-time kind (model.time = "continuous")
  std::vector<ParamSpec> params;
  Make make;           ///< from the values by name (absent optional ones: not given); validates
  Args args;           ///< the values back (what a model file writes)
  Describe describe;   ///< "Bernoulli(alpha=0.5)"

  SourceKindSpec(Source::Kind kind, std::string name, std::string doc, bool continuous,
                 std::vector<ParamSpec> params, Make make, Args args, Describe describe);
};

/// Every source kind, in the order of Source::Kind.
const std::vector<SourceKindSpec>& source_kinds();
const SourceKindSpec& source_kind(Source::Kind kind);
/// ModelError naming `param` for an unknown name.
const SourceKindSpec& source_kind(const std::string& name, const std::string& param = "source.kind");
/// The slotted (or continuous-time) kinds as "a, b or c" (error messages).
std::string source_kinds_named(bool continuous);

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

}  // namespace aqm
