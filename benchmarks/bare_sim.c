/* A minimal, independent slotted simulator of the RED queue, for comparison with aqmchain's.
 *
 * Written from the model's definition alone (it shares no code with the library):
 * Bernoulli(alpha) arrivals, geometric(mu) service with delayed access, buffer N counting
 * the packet in service, RED(min_th, max_th, p_max) on the EWMA of the number of waiting
 * packets q = max(n - 1, 0), tail drop.  Order of events in slot t:
 *   1. avg = (1 - w) avg + w q_{t-1}       (every slot)
 *   2. an arrival with probability alpha
 *   3. overflow if n_{t-1} = N; otherwise AQM drop with probability p(avg); otherwise admitted
 *   4. if n_{t-1} >= 1, a departure with probability mu
 *   5. n_t = n_{t-1} + admitted - departed
 * With k > 0 avg lives on the uniform grid of step 1/k on [0, N] instead (discretised
 * mode): the update value y between grid points g_i <= y < g_{i+1} goes to g_i with
 * probability (g_{i+1} - y) / (g_{i+1} - g_i), else to g_{i+1}.
 *
 * Statistics after the warm-up: mean queue (time average of q_t), loss (lost / arrived),
 * mean avg, each with a 95 % batch-means half-width (normal quantile; 20 batches).
 *
 * Two loops of the same model:
 *   plain        the obvious code: `if (uniform() < alpha)`, then `if (uniform() < p)`, then
 *                `if (n >= 1 && uniform() < mu)`; up to three draws per slot;
 *   branch-free  (-b) the decisions as 0/1 arithmetic: one uniform u per slot for the arrival
 *                and the RED decision (u < alpha p: arrival dropped; alpha p <= u < alpha:
 *                arrival without drop decision; the same law as two independent draws), one
 *                for the departure, drawn in every slot.
 *
 *   cc -O2 -o bare_sim bare_sim.c -lm
 *   ./bare_sim [-b] alpha mu N min_th max_th p_max w slots warmup seed [k]
 * prints one line: key=value pairs (slots_per_second, mean_queue, mean_queue_hw, loss, loss_hw, ...).
 *
 * Random numbers: xoshiro256** (Blackman and Vigna), seeded by splitmix64; a uniform
 * in [0, 1) is the top 53 bits of a draw.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t st[4];

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next(void) {
  const uint64_t result = rotl(st[1] * 5, 7) * 9;
  const uint64_t t = st[1] << 17;
  st[2] ^= st[0];
  st[3] ^= st[1];
  st[1] ^= st[2];
  st[0] ^= st[3];
  st[2] ^= t;
  st[3] = rotl(st[3], 45);
  return result;
}

static inline double uniform(void) { return (double)(next() >> 11) * 0x1.0p-53; }

static void seed_rng(uint64_t x) {
  for (int i = 0; i < 4; ++i) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    st[i] = z ^ (z >> 31);
  }
}

#define BATCHES 20

static double half_width(const double* x, int n) {
  double m = 0, s2 = 0;
  for (int i = 0; i < n; ++i) m += x[i];
  m /= n;
  for (int i = 0; i < n; ++i) s2 += (x[i] - m) * (x[i] - m);
  return 1.96 * sqrt(s2 / (n - 1) / n);
}

int main(int argc, char** argv) {
  int branch_free = 0;
  if (argc > 1 && strcmp(argv[1], "-b") == 0) {
    branch_free = 1;
    ++argv;
    --argc;
  }
  if (argc < 11) {
    fprintf(stderr, "usage: %s [-b] alpha mu N min_th max_th p_max w slots warmup seed [k]\n", argv[0]);
    return 2;
  }
  const double alpha = atof(argv[1]), mu = atof(argv[2]);
  const int N = atoi(argv[3]);
  const double min_th = atof(argv[4]), max_th = atof(argv[5]), p_max = atof(argv[6]), w = atof(argv[7]);
  const long long slots = atoll(argv[8]), warmup = atoll(argv[9]);
  seed_rng(strtoull(argv[10], NULL, 10));
  const int k = argc > 11 ? atoi(argv[11]) : 0;
  const long long per_batch = (slots - warmup) / BATCHES;
  if (N < 1 || per_batch < 1 || k < 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }

  double bq[BATCHES], bl[BATCHES], ba[BATCHES];
  long long tot_arr = 0, tot_lost = 0;
  double tot_q = 0, tot_avg = 0;
  int n = 0;
  double avg = 0.0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long long t = 0;
  for (int b = -1; b < BATCHES; ++b) {
    /* b = -1 is the warm-up; the last batch takes the slots left over */
    const long long len = b < 0 ? warmup : (b == BATCHES - 1 ? slots - warmup - (BATCHES - 1) * per_batch : per_batch);
    long long arrivals = 0, lost = 0, sum_q = 0;
    double sum_avg = 0.0;
    if (!branch_free) {
      for (long long i = 0; i < len; ++i, ++t) {
        const int q = n > 0 ? n - 1 : 0;
        const double y = (1.0 - w) * avg + w * q;
        if (k == 0) {
          avg = y;
        } else {
          const double pos = y * k; /* grid index coordinate */
          const long long lo = (long long)pos;
          if (lo >= (long long)N * k) avg = N;
          else avg = (double)(uniform() < (double)(lo + 1) - pos ? lo : lo + 1) / k;
        }
        int admitted = 0;
        if (uniform() < alpha) {
          ++arrivals;
          if (n == N) {
            ++lost;
          } else {
            double p = 0.0;
            if (avg >= max_th) p = 1.0;
            else if (avg >= min_th) p = p_max * (avg - min_th) / (max_th - min_th);
            if (p > 0.0 && uniform() < p) ++lost;
            else admitted = 1;
          }
        }
        const int departed = n >= 1 && uniform() < mu;
        n += admitted - departed;
        sum_q += n > 0 ? n - 1 : 0;
        sum_avg += avg;
      }
    } else {
      for (long long i = 0; i < len; ++i, ++t) {
        const int q = n > 0 ? n - 1 : 0;
        const double y = (1.0 - w) * avg + w * q;
        if (k == 0) {
          avg = y;
        } else {
          const double pos = y * k;
          const long long lo = (long long)pos;
          const double v = uniform();
          avg = lo >= (long long)N * k ? N : (double)(lo + (v >= (double)(lo + 1) - pos)) / k;
        }
        const double p = avg < min_th ? 0.0 : (avg < max_th ? p_max * (avg - min_th) / (max_th - min_th) : 1.0);
        const double u = uniform();
        const int arrival = u < alpha, full = n == N;
        const int dropped = !full & (u < alpha * p);
        const int departed = (n > 0) & (uniform() < mu);
        arrivals += arrival;
        lost += (arrival & full) | dropped;
        n += (arrival & !full & !dropped) - departed;
        sum_q += n > 0 ? n - 1 : 0;
        sum_avg += avg;
      }
    }
    if (b >= 0) {
      bq[b] = (double)sum_q / len;
      bl[b] = arrivals ? (double)lost / arrivals : 0.0;
      ba[b] = sum_avg / len;
      tot_arr += arrivals;
      tot_lost += lost;
      tot_q += (double)sum_q;
      tot_avg += sum_avg;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  const double measured = (double)(slots - warmup);
  printf("loop=%s slots=%lld seconds=%.6f slots_per_second=%.6e mean_queue=%.15g mean_queue_hw=%.15g loss=%.15g loss_hw=%.15g "
         "mean_avg=%.15g mean_avg_hw=%.15g\n",
         branch_free ? "branch-free" : "plain", slots, secs, (double)slots / secs, tot_q / measured, half_width(bq, BATCHES),
         tot_arr ? (double)tot_lost / tot_arr : 0.0, half_width(bl, BATCHES), tot_avg / measured,
         half_width(ba, BATCHES));
  return 0;
}
