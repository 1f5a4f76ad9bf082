// Arrival sources (SPEC 2.1): Bernoulli, MMBP, SSMP, and their Hurst report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "aqmchain/errors.hpp"

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
  /// Batch only: per modulator state the pmf of the number of arrivals in a slot, k = 0..B
  /// (every row B + 1 entries).  Empty for the other kinds (use count_pmf()).
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

  /// True for the continuous-time kinds (Poisson, MMPP).
  bool continuous() const { return kind == Kind::Poisson || kind == Kind::MMPP; }

  int states() const { return static_cast<int>(arrival.size()); }
  /// Most arrivals in one slot: B of a batch source, 1 for the other kinds.
  int max_batch() const { return kind == Kind::Batch && !batch.empty() ? static_cast<int>(batch[0].size()) - 1 : 1; }
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

}  // namespace aqm
