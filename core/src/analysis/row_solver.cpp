#include "analysis/row_solver.hpp"

#include "aqmchain/operators/operator.hpp"

namespace aqm::analysis_detail {

SubMatrix restrict_matrix(const Chain& c, const std::vector<int32_t>& local, const std::vector<int32_t>& states,
                          bool continuous) {
  SubMatrix S;
  S.n = static_cast<int32_t>(states.size());
  S.states = states;
  S.rowptr.assign(static_cast<size_t>(S.n) + 1, 0);
  size_t bound = continuous ? states.size() : 0;  // no regrowth while filling: at most the rows' entries
  for (const int32_t i : states) bound += static_cast<size_t>(c.rowptr[i + 1] - c.rowptr[i]);
  S.col.reserve(bound);
  S.val.reserve(bound);
  for (int32_t li = 0; li < S.n; ++li) {
    const int32_t i = states[static_cast<size_t>(li)];
    double out = 0.0;
    for (int32_t e = c.rowptr[i]; e < c.rowptr[i + 1]; ++e) {
      const int32_t j = c.col[e];
      if (continuous && j == i) continue;
      if (continuous) out += c.val[e];
      const int32_t lj = local[static_cast<size_t>(j)];
      if (lj < 0) continue;
      S.col.push_back(lj);
      S.val.push_back(c.val[e]);
    }
    if (continuous) {
      S.col.push_back(li);
      S.val.push_back(-out);
    }
    S.rowptr[static_cast<size_t>(li) + 1] = static_cast<int32_t>(S.col.size());
  }
  return S;
}

std::vector<int32_t> blocks_of(const Chain& c, const std::vector<int32_t>& states) {
  std::vector<std::vector<int32_t>> labels(c.labels.size());
  for (size_t k = 0; k < c.labels.size(); ++k) {
    labels[k].resize(states.size());
    for (size_t i = 0; i < states.size(); ++i) labels[k][i] = c.labels[k][static_cast<size_t>(states[i])];
  }
  return in_block_partition(c.space, labels, static_cast<int32_t>(states.size()));
}

SubMatrix transposed_without(const SubMatrix& F, int32_t k) {
  return transposed_without(F.n, F.rowptr.data(), F.col.data(), F.val.data(), F.states, k);
}

SubMatrix transposed_without(int32_t n, const int32_t* rowptr, const int32_t* col, const double* val,
                             const std::vector<int32_t>& states, int32_t k) {
  SubMatrix T;
  T.n = n - 1;
  T.rowptr.assign(static_cast<size_t>(n), 0);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e)
      if (i != k && col[e] != k) ++T.rowptr[static_cast<size_t>(col[e] - (col[e] > k)) + 1];
  for (int32_t i = 0; i < T.n; ++i) T.rowptr[static_cast<size_t>(i) + 1] += T.rowptr[static_cast<size_t>(i)];
  T.col.resize(static_cast<size_t>(T.rowptr.back()));
  T.val.resize(T.col.size());
  std::vector<int32_t> next(T.rowptr.begin(), T.rowptr.end() - 1);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = rowptr[i]; e < rowptr[i + 1]; ++e) {
      const int32_t j = col[e];
      if (i == k || j == k) continue;
      const int32_t at = next[static_cast<size_t>(j - (j > k))]++;
      T.col[static_cast<size_t>(at)] = i - (i > k);
      T.val[static_cast<size_t>(at)] = val[e];
    }
  T.states.reserve(static_cast<size_t>(T.n));
  for (int32_t i = 0; i < n; ++i)
    if (i != k) T.states.push_back(states.empty() ? i : states[static_cast<size_t>(i)]);
  return T;
}

}  // namespace aqm::analysis_detail
