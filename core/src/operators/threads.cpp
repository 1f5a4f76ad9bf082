#include "aqmchain/threads.hpp"

#include "aqmchain/errors.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace aqm {

int set_num_threads(int n) {
  if (n < 1) fail_param("threads", ">= 1", n);
#ifdef _OPENMP
  const int old = omp_get_max_threads();
  omp_set_num_threads(n);
  return old;
#else
  return 1;
#endif
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace aqm
