// The rows of a sparse matrix gathered from the rows of another by a counting sort over the
// threads (internal): the transposes of P (TransposedCsr, MarkovOperator::transpose) and the
// krylov system I - P^T in its block order (block_system).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "aqmchain/threads.hpp"

namespace aqm::detail {

/// Rows 0 .. n_out - 1 (rp, col, val) from source rows 0 .. n_in - 1, where row(i, sink, fill)
/// calls sink(j, value) for each entry of source row i bound for row j, in order (value() gives
/// the entry; the counting pass does not call it), and lead(j) slots are left free at the start
/// of row j.  fill is std::false_type in the counting pass, std::true_type in the filling one
/// (each source row is visited once in each, by one thread: a row's own results can be
/// computed in either).  Each row holds its entries in increasing source order (col = the source row).  The
/// source rows are split into consecutive ranges, one per thread, each counting into and
/// filling its own part of every row after the parts of the ranges before it: the same arrays,
/// bit for bit, on any thread count.
template <class Row, class Lead>
void gather_rows(int32_t n_in, int32_t n_out, Row row, Lead lead, std::vector<int32_t>& rp, std::vector<int32_t>& col,
                 std::vector<double>& val) {
  const int T = part_threads(n_in, 8);
  std::vector<int32_t> range(static_cast<size_t>(T) + 1);
  for (int t = 0; t <= T; ++t) range[t] = static_cast<int32_t>(static_cast<int64_t>(n_in) * t / T);
  // part[t n_out + j]: first range t's count of row j's entries, then where it writes the next
  std::vector<int32_t> part(static_cast<size_t>(T) * n_out, 0);
#pragma omp parallel for schedule(static, 1) num_threads(T)
  for (int t = 0; t < T; ++t) {
    int32_t* cnt = part.data() + static_cast<size_t>(t) * n_out;
    for (int32_t i = range[t]; i < range[t + 1]; ++i) row(i, [cnt](int32_t j, auto&&) { ++cnt[j]; }, std::false_type{});
  }
  rp.assign(static_cast<size_t>(n_out) + 1, 0);
  for (int32_t j = 0; j < n_out; ++j) {
    int32_t len = lead(j);
    for (int t = 0; t < T; ++t) len += part[static_cast<size_t>(t) * n_out + j];
    rp[j + 1] = rp[j] + len;
  }
#pragma omp parallel for schedule(static) num_threads(T)
  for (int32_t j = 0; j < n_out; ++j) {
    int32_t at = rp[j] + lead(j);
    for (int t = 0; t < T; ++t) {
      int32_t& p = part[static_cast<size_t>(t) * n_out + j];
      const int32_t c = p;
      p = at;
      at += c;
    }
  }
  col.resize(static_cast<size_t>(rp[n_out]));
  val.resize(static_cast<size_t>(rp[n_out]));
#pragma omp parallel for schedule(static, 1) num_threads(T)
  for (int t = 0; t < T; ++t) {
    int32_t* fill = part.data() + static_cast<size_t>(t) * n_out;
    for (int32_t i = range[t]; i < range[t + 1]; ++i)
      row(
          i,
          [&col, &val, fill, i](int32_t j, auto&& value) {
            col[fill[j]] = i;
            val[fill[j]++] = value();
          },
          std::true_type{});
  }
}

}  // namespace aqm::detail
