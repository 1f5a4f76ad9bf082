// The class chains (docs/classes.md): traffic classes, seed 004's modified RED for mice
// and ECN-capable packets, seed 003's flow comparison, on top of one slot of SPEC 3, or in
// continuous time (docs/classes.md "Continuous time") on the rates of SPEC 6: one arrival's
// outcome (ClassGenerator::arrive) serves both time kinds.
//
// Two representations of the buffer's content share one slot:
//  - Approx (two classes): the state adds e = class-2 packets in the system and the class
//    of the packet in service.  Which waiting packet is the oldest, or is picked by a
//    search, is not known from counts: each waiting packet is taken to be of class 2 with
//    probability e_w / w (e_w class-2 packets among the w waiting), independently of its
//    place (the random-order approximation).  The packet that enters service after a
//    departure is drawn so from the packets that waited before the slot (the arrival of
//    the slot is behind all of them).  ECN capability of a waiting packet (modified RED)
//    is its class's probability, independently; two packets of class c belong to the same
//    flow with probability sum_f weight_f^2 (flow comparison).
//  - Tagged (response times under modified RED and the flow comparison): the approximate
//    content plus one tagged packet's position, class and ECN bit (TagContent), run through
//    the same slot; class_steered_response assembles and steps that absorbing chain.
//  - Exact (small N): the state carries the FIFO's sequence of packet types, a type being
//    the class, plus the flow when the flow comparison needs it and the ECN bit when
//    modified RED needs it (sum_n A^n sequences for A types, bounded).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "aqmchain/analysis/response.hpp"
#include "aqmchain/interrupt.hpp"
#include "aqmchain/model/queue_generator.hpp"
#include "model/slot_kernel.hpp"

namespace aqm {

std::string to_string(ClassChain c) {
  return c == ClassChain::Approx ? "approx" : c == ClassChain::Exact ? "exact" : "window";
}
ClassChain class_chain_from(const std::string& s) {
  if (s == "approx") return ClassChain::Approx;
  if (s == "exact") return ClassChain::Exact;
  if (s == "window") return ClassChain::Window;
  throw OptionError("option 'classes' must be one of approx, exact, window, got '" + s + "'");
}

bool needs_class_chain(const Model& m) {
  return m.class_count() >= 2 || m.aqm.modified != Modified::None || m.aqm.flow_compare;
}

std::string class_event(const std::string& ev, int k) { return detail::cat(ev, ".c", k); }

namespace {

/// The binomial pmf of the number of successes in w independent trials of probability q.
std::vector<double> binomial_pmf(int w, double q) {
  std::vector<double> b(static_cast<size_t>(w) + 1, 0.0);
  b[0] = 1.0;
  for (int i = 0; i < w; ++i)
    for (int j = i + 1; j >= 0; --j) b[j] = (j ? b[j - 1] * q : 0.0) + b[j] * (1.0 - q);
  return b;
}

// Event layout: the aggregate events in the order of their names (the queue models' six,
// flow_compare, pushed_out), then per class k (0-based) kPer values from kBase + k kPer.
enum Agg { aArr, aAqm, aMark, aOvf, aAdm, aDep, aFc, aPush, kBase };
enum Ev { kArr, kAdm, kAqm, kOvf, kFc, kPush, kMark, kDep, kIn, kPer };

/// What happens to the packets a slot touches: the event weights.
struct Tally {
  std::vector<double> e;
  explicit Tally(int classes) : e(kBase + static_cast<size_t>(classes) * kPer, 0.0) {}
  double& at(int k, Ev ev) { return e[kBase + static_cast<size_t>(k) * kPer + ev]; }
  /// A class-k packet lost for reason `ev` (kAqm, kOvf, kFc); `queued`: it was waiting.
  /// Per class the causes are disjoint (the simulator's): a queued packet discarded by the
  /// drop policy or modified RED's search is pushed out, one lost to the flow comparison
  /// is a flow-comparison loss.  The aggregate events keep the queue models' meaning
  /// (aqm_drop, overflow: the losses an AQM decision or a full buffer causes, whoever is
  /// lost) and pushed_out counts every queued packet discarded.
  void lost(int k, Ev ev, double p, bool queued) {
    at(k, queued && ev != kFc ? kPush : ev) += p;
    e[ev == kAqm ? aAqm : ev == kOvf ? aOvf : aFc] += p;
    if (queued) e[aPush] += p;
  }
  void marked(int k, double p) { at(k, kMark) += p, e[aMark] += p, e[aAdm] += p; }
};

/// One arrival variant: class, flow (exact chain with the flow comparison), ECN bit,
/// stored type (exact chain), probability given an arrival in modulator state m (per m).
struct Variant {
  int cls, flow;
  bool ecn;
  int type;
  std::vector<double> p;  // per modulator state
};

/// Where an action takes the waiting packets: the victim rules of SPEC 2.3b / 2.5.
enum class Rule { Oldest, Uniform, ModFront, ModRandom, SameFlow };

/// The content of the approximate chain before step 5: n packets; h the class of the one in
/// service (n >= 1); w_old waiting packets of before the slot, e_old of them class 2; arr
/// the class of the arrival queued behind them (-1 none).
struct ApproxPre {
  int n, h, w_old, e_old, arr;
};

struct ApproxContent {
  int C;
  std::array<double, 2> sameflow{{1.0, 1.0}}, eleph{{1.0, 1.0}};
  std::vector<double> first2;  // P(first elephant in random order is class 2), by (w1, w2)
  std::vector<double> rand1, rand2;  // P(three trials discard class 1 / 2, and an elephant waits), by (w1, w2)
  int N1;
  int64_t s_e = 0, s_h = 0;
  using Pre = ApproxPre;

  ApproxContent(const Model& md, const StateSpace& space) : C(md.class_count()), N1(md.buffer + 1) {
    for (int k = 0; k < C; ++k) {
      double s = 0.0;
      for (int f = 0; f < md.class_flows(k); ++f) s += std::pow(md.classes.empty() ? 1.0 : md.classes[k].flow_weight(f), 2);
      sameflow[k] = s;
      eleph[k] = md.class_mice(k) ? 0.0 : 1.0 - md.class_ecn(k);
    }
    if (C < 2) eleph[1] = eleph[0], sameflow[1] = sameflow[0];
    // f(w1, w2) = P(the first elephant met in a random order of w1 class-1 and w2 class-2
    // packets is of class 2), each packet an elephant independently.
    first2.assign(static_cast<size_t>(N1) * N1, 0.0);
    for (int w1 = 0; w1 < N1; ++w1)
      for (int w2 = 0; w1 + w2 < N1; ++w2) {
        if (w1 + w2 == 0) continue;
        const double t = w1 + w2;
        double v = 0.0;
        if (w1 > 0) v += w1 / t * (1.0 - eleph[0]) * first2[(w1 - 1) * N1 + w2];
        if (w2 > 0) v += w2 / t * (eleph[1] + (1.0 - eleph[1]) * first2[w1 * N1 + w2 - 1]);
        first2[w1 * N1 + w2] = v;
      }
    // three uniform trials with replacement (the simulator's): given E1, E2 elephants among
    // w1, w2 waiting, the first elephant met is of class k with probability
    // (E_k / w)(1 + B + B^2), B = (w - E) / w, and with probability B^2 (w_k - E_k) / w
    // none is met and the third pick, of class k, is discarded.
    rand1.assign(static_cast<size_t>(N1) * N1, 0.0);
    rand2.assign(static_cast<size_t>(N1) * N1, 0.0);
    for (int w1 = 0; w1 < N1; ++w1) {
      const std::vector<double> b1 = binomial_pmf(w1, eleph[0]);
      for (int w2 = 0; w1 + w2 < N1; ++w2) {
        const int w = w1 + w2;
        if (w == 0) continue;
        const std::vector<double> b2 = binomial_pmf(w2, eleph[1]);
        double r1 = 0.0, r2 = 0.0;
        for (int E1 = 0; E1 <= w1; ++E1)
          for (int E2 = 0; E2 <= w2; ++E2) {
            if (E1 + E2 == 0) continue;
            const double pr = b1[E1] * b2[E2];
            if (!(pr > 0.0)) continue;
            const double B = static_cast<double>(w - E1 - E2) / w, f = 1.0 + B + B * B;
            r1 += pr * (E1 * f + B * B * (w1 - E1)) / w;
            r2 += pr * (E2 * f + B * B * (w2 - E2)) / w;
          }
        rand1[static_cast<size_t>(w1) * N1 + w2] = r1;
        rand2[static_cast<size_t>(w1) * N1 + w2] = r2;
      }
      if ((w1 & 7) == 0) check_interrupt();
    }
    s_e = space.stride(space.at(component::class2));
    s_h = space.stride(space.at(component::head));
  }
  /// The class contents move with every arrival and departure, as the level does: inside the
  /// preconditioner's blocks (krylov converges in about 10 steps where blocks of (n, modulator)
  /// alone stall on the two-class chains) while the blocks' band storage stays within
  /// kClassBlockBandEntries: blocks (the outside components' product, an upper bound: about half
  /// are reached) x block size (N + 1)(N + 2) M x bandwidth ~ 6 (N + 1) M (measured: 296 at N = 50);
  /// beyond it (a large buffer: mice/ECN at N = 100 needed 10.7 GB) they stay outside.
  static void add_components(StateSpace& s, const Model& md) {
    double outside = 1.0;
    for (const Component& c : s.components())
      if (!c.in_block) outside *= c.size;
    const double N1 = md.buffer + 1.0, M = md.source.states();
    const bool in_block = outside * N1 * (N1 + 1.0) * M * 6.0 * N1 * M <= kClassBlockBandEntries;
    s.add(component::class2, md.buffer + 1, /*coarsen=*/true, in_block);
    s.add(component::head, 2, /*coarsen=*/false, in_block);
  }
  static constexpr double kClassBlockBandEntries = 4e8;
  /// State content of key (n known): head class, class-2 waiting.
  Pre decode(int64_t key, int n, const StateSpace&) const {
    const int e = static_cast<int>((key / s_e) % N1), h = static_cast<int>((key / s_h) % 2);
    return {n, h, std::max(n - 1, 0), e - h, -1};
  }
  int64_t content_key(int n, int h, int e_w) const { return n == 0 ? 0 : (e_w + h) * s_e + h * s_h; }
  double in_system(const Pre& p, int k) const {
    const int e = p.n == 0 ? 0 : p.h + p.e_old;
    return k == 1 ? e : p.n - e;
  }
  int head_class(const Pre& p) const { return p.h; }
  Pre append(Pre p, const Variant& v) const {
    if (p.n == 0) return {1, v.cls, 0, 0, -1};
    p.n += 1;
    p.arr = v.cls;
    return p;
  }
  /// Calls f(prob, victim class, content without it) for the victims `rule` picks among the
  /// waiting packets; the probabilities sum to 1 except for SameFlow (the rest: different
  /// flows) and ModFront / ModRandom (the rest: no elephant waits, nothing is searched).
  template <class F>
  void remove(const Pre& p, Rule rule, const Variant& arr, F&& f) const {
    const int w = p.w_old, w2 = p.e_old, w1 = w - w2;
    if (w <= 0) return;
    auto without = [&](int k) {
      Pre q = p;
      q.n -= 1, q.w_old -= 1, q.e_old -= k;
      return q;
    };
    double pk[2] = {static_cast<double>(w1) / w, static_cast<double>(w2) / w};
    switch (rule) {
      case Rule::Oldest:
      case Rule::Uniform:
        break;
      case Rule::SameFlow:
        pk[0] = arr.cls == 0 ? pk[0] * sameflow[0] : 0.0;
        pk[1] = arr.cls == 1 ? pk[1] * sameflow[1] : 0.0;
        break;
      case Rule::ModFront: {
        const double none = std::pow(1.0 - eleph[0], w1) * std::pow(1.0 - eleph[1], w2);
        const double two = first2[static_cast<size_t>(w1) * N1 + w2];
        pk[1] = two, pk[0] = std::max(0.0, 1.0 - none - two);
        break;
      }
      case Rule::ModRandom:
        pk[0] = rand1[static_cast<size_t>(w1) * N1 + w2];
        pk[1] = rand2[static_cast<size_t>(w1) * N1 + w2];
        break;
    }
    for (int k = 0; k < 2; ++k)
      if (pk[k] > 0.0) f(pk[k], k, without(k));
  }
  /// Step 5 from pre content p (n_prev packets before the slot): calls
  /// f(prob, departed class or -1, n', content key).
  template <class F>
  void depart(int n_prev, const Pre& p, double mu, F&& f) const {
    auto stay = [&](double pr) {
      if (p.n == 0) return f(pr, -1, 0, int64_t{0});
      f(pr, -1, p.n, content_key(p.n, p.h, p.e_old + (p.arr == 1 ? 1 : 0)));
    };
    if (n_prev == 0 || !(mu > 0.0)) return stay(1.0);
    if (mu < 1.0) stay(1.0 - mu);
    const int n2 = p.n - 1;
    if (n2 == 0) return f(mu, p.h, 0, int64_t{0});
    if (p.w_old == 0) return f(mu, p.h, n2, content_key(n2, p.arr, 0));  // the arrival enters service
    const double q2 = static_cast<double>(p.e_old) / p.w_old;
    const int a2 = p.arr == 1 ? 1 : 0;
    if (q2 < 1.0) f(mu * (1.0 - q2), p.h, n2, content_key(n2, 0, p.e_old + a2));
    if (q2 > 0.0) f(mu * q2, p.h, n2, content_key(n2, 1, p.e_old - 1 + a2));
  }
  int successor_contents() const { return 8; }
  double contents_at(int n) const { return n == 0 ? 1.0 : 2.0 * n; }
};

/// The approximate chain with a tagged packet (response times under modified RED and the flow
/// comparison, docs/classes.md): the content of ApproxContent plus the tagged packet's position
/// k (packets ahead of it, 0 in service), its class and whether it is an elephant.  The other
/// waiting packets follow ApproxContent's random-order rules; positions are exchangeable, so a
/// victim among them is ahead of the tagged packet with probability (k - 1) / (w - 1).
struct TagPre {
  ApproxPre b;
  int k;  // >= 0 the position, kPending before the tagged arrival, kGone when not the tag / lost
};

struct TagContent {
  using Pre = TagPre;
  static constexpr int kPending = -1, kGone = -2;
  ApproxContent X;
  int tc;     // the tagged packet's class
  bool tel;   // ... and whether it is an elephant (modified RED)
  bool mod;   // modified RED reads the elephant bit
  std::vector<bool> mice;
  int N, N1;
  // by (w1, w2, r): P(no elephant among the first r of a random order of w1 class-1 and w2
  // class-2 packets), P(the first elephant is among them and of class 1 / 2)
  std::vector<double> Z, A1, A2;
  // by (w1, w2) of the others: P(the three picks discard the tagged / a class-1 / class-2 packet)
  std::vector<double> RT, R1, R2;

  /// The tag component's values: 0..N-1 positions, then served, gone, pending.
  int served_value() const { return N; }
  int gone_value() const { return N + 1; }
  int pending_value() const { return N + 2; }
  static int32_t values(const Model& md) { return md.buffer + 3; }

  TagContent(const Model& md, const StateSpace& space, int cls, bool elephant)
      : X(md, space), tc(cls), tel(elephant), mod(md.aqm.modified != Modified::None), N(md.buffer), N1(md.buffer + 1) {
    for (int k = 0; k < md.class_count(); ++k) mice.push_back(md.class_mice(k));
    const double e1 = X.eleph[0], e2 = X.eleph[1];
    if (md.aqm.modified == Modified::Front) {
      const size_t sz = static_cast<size_t>(N1) * N1 * N1;
      Z.assign(sz, 0.0), A1.assign(sz, 0.0), A2.assign(sz, 0.0);
      for (int w1 = 0; w1 < N1; ++w1)
        for (int w2 = 0; w1 + w2 < N1; ++w2) {
          const int t = w1 + w2;
          Z[at3(w1, w2, 0)] = 1.0;
          for (int r = 1; r <= t; ++r) {
            double z = 0.0, a1 = 0.0, a2 = 0.0;
            if (w1 > 0) {
              const double q = static_cast<double>(w1) / t;
              z += q * (1.0 - e1) * Z[at3(w1 - 1, w2, r - 1)];
              a1 += q * (e1 + (1.0 - e1) * A1[at3(w1 - 1, w2, r - 1)]);
              a2 += q * (1.0 - e1) * A2[at3(w1 - 1, w2, r - 1)];
            }
            if (w2 > 0) {
              const double q = static_cast<double>(w2) / t;
              z += q * (1.0 - e2) * Z[at3(w1, w2 - 1, r - 1)];
              a2 += q * (e2 + (1.0 - e2) * A2[at3(w1, w2 - 1, r - 1)]);
              a1 += q * (1.0 - e2) * A1[at3(w1, w2 - 1, r - 1)];
            }
            Z[at3(w1, w2, r)] = z, A1[at3(w1, w2, r)] = a1, A2[at3(w1, w2, r)] = a2;
          }
        }
    }
    if (md.aqm.modified == Modified::Random) {
      RT.assign(static_cast<size_t>(N1) * N1, 0.0), R1 = RT, R2 = RT;
      for (int w1 = 0; w1 < N1; ++w1) {
        const std::vector<double> b1 = binomial_pmf(w1, e1);
        for (int w2 = 0; w1 + w2 + 1 < N1; ++w2) {
          const std::vector<double> b2 = binomial_pmf(w2, e2);
          const int w = w1 + w2 + 1;
          double rt = 0.0, r1 = 0.0, r2 = 0.0;
          for (int E1 = 0; E1 <= w1; ++E1)
            for (int E2 = 0; E2 <= w2; ++E2) {
              const int E = E1 + E2 + (tel ? 1 : 0);
              const double pr = b1[E1] * b2[E2];
              if (E == 0 || !(pr > 0.0)) continue;  // no elephant waits: no search
              const double B = static_cast<double>(w - E) / w, f = 1.0 + B + B * B;
              rt += pr * (tel ? f : B * B) / w;
              r1 += pr * (E1 * f + B * B * (w1 - E1)) / w;
              r2 += pr * (E2 * f + B * B * (w2 - E2)) / w;
            }
          const size_t i = static_cast<size_t>(w1) * N1 + w2;
          RT[i] = rt, R1[i] = r1, R2[i] = r2;
        }
        if ((w1 & 7) == 0) check_interrupt();
      }
    }
  }
  size_t at3(int w1, int w2, int r) const { return (static_cast<size_t>(w1) * N1 + w2) * N1 + r; }
  bool is_tag(const Variant& v) const { return v.cls == tc && (!mod || (!mice[v.cls] && !v.ecn) == tel); }
  Pre decode(int64_t key, int n, const StateSpace& sp) const {
    const int t = static_cast<int>(key % (N + 3));
    return {X.decode(key, n, sp), t < N ? t : t == pending_value() ? kPending : kGone};
  }
  double in_system(const Pre& p, int k) const { return X.in_system(p.b, k); }
  int head_class(const Pre& p) const { return X.head_class(p.b); }
  Pre append(const Pre& p, const Variant& v) const {
    Pre q{X.append(p.b, v), p.k};
    if (p.k == kPending) q.k = is_tag(v) ? q.b.n - 1 : kGone;
    return q;
  }
  template <class F>
  void remove(const Pre& p, Rule rule, const Variant& arr, F&& f) const {
    if (p.k < 1) {  // the tagged packet is not waiting: the chain's own rules
      return X.remove(p.b, rule, arr, [&](double pr, int c, const ApproxPre& rest) { f(pr, c, Pre{rest, p.k}); });
    }
    const int w = p.b.w_old, k = p.k, wo = w - 1;  // the tagged packet waits among w
    const int o2 = p.b.e_old - (tc == 1 ? 1 : 0), o1 = wo - o2;
    const int oc[2] = {o1, o2};
    auto drop = [&](double pr, int c, int k2) {
      if (!(pr > 0.0)) return;
      ApproxPre q = p.b;
      q.n -= 1, q.w_old -= 1, q.e_old -= c;
      f(pr, c, Pre{q, k2});
    };
    // a victim of class c among the others, with probability pc: ahead or behind the tag
    auto other = [&](double pc, int c) {
      if (!(pc > 0.0) || wo == 0) return;
      drop(pc * (k - 1) / wo, c, k - 1);
      drop(pc * (wo - (k - 1)) / wo, c, k);
    };
    switch (rule) {
      case Rule::Oldest:
        if (k == 1) return drop(1.0, tc, kGone);
        for (int c = 0; c < 2; ++c) drop(static_cast<double>(oc[c]) / wo, c, k - 1);
        return;
      case Rule::Uniform:
        drop(1.0 / w, tc, kGone);
        for (int c = 0; c < 2; ++c) other(static_cast<double>(oc[c]) / w, c);
        return;
      case Rule::SameFlow:
        if (arr.cls == tc) drop(X.sameflow[tc] / w, tc, kGone);
        other(static_cast<double>(oc[arr.cls]) / w * X.sameflow[arr.cls], arr.cls);
        return;
      case Rule::ModFront: {
        const int r = k - 1;
        const double a[2] = {A1[at3(o1, o2, r)], A2[at3(o1, o2, r)]};
        for (int c = 0; c < 2; ++c) drop(a[c], c, k - 1);
        if (tel) return drop(Z[at3(o1, o2, r)], tc, kGone);
        const double all[2] = {A1[at3(o1, o2, wo)], A2[at3(o1, o2, wo)]};
        for (int c = 0; c < 2; ++c) drop(std::max(0.0, all[c] - a[c]), c, k);
        return;
      }
      case Rule::ModRandom: {
        const size_t i = static_cast<size_t>(o1) * N1 + o2;
        drop(RT[i], tc, kGone);
        other(R1[i], 0);
        other(R2[i], 1);
        return;
      }
    }
  }
  template <class F>
  void depart(int n_prev, const Pre& p, double mu, F&& f) const {
    if (p.k < 0) return f(1.0, -1, 0, int64_t{gone_value()});  // no tag (or lost): absorbed
    const ApproxPre& b = p.b;
    const int a2 = b.arr == 1 ? 1 : 0;
    auto key = [&](int n2, int h, int e_w, int k2) { return X.content_key(n2, h, e_w) + k2; };
    auto stay = [&](double pr) { f(pr, -1, b.n, key(b.n, b.h, b.e_old + a2, p.k)); };
    if (n_prev == 0 || !(mu > 0.0)) return stay(1.0);
    if (mu < 1.0) stay(1.0 - mu);
    if (p.k == 0) return f(mu, b.h, 0, int64_t{served_value()});
    const int n2 = b.n - 1, k2 = p.k - 1;
    const bool tag_arrived = b.arr >= 0 && p.k == b.n - 1;  // the tagged packet is this slot's arrival
    if (tag_arrived && b.w_old == 0) return f(mu, b.h, n2, key(n2, b.arr, 0, 0));  // it enters service
    if (!tag_arrived && p.k == 1) return f(mu, b.h, n2, key(n2, tc, b.e_old + a2 - tc, 0));
    // the packet entering service is one of the other packets that waited before the slot
    const int wo = b.w_old - (tag_arrived ? 0 : 1);
    const int eo = b.e_old - (!tag_arrived && tc == 1 ? 1 : 0);
    const double q2 = static_cast<double>(eo) / wo;
    if (q2 < 1.0) f(mu * (1.0 - q2), b.h, n2, key(n2, 0, b.e_old + a2, k2));
    if (q2 > 0.0) f(mu * q2, b.h, n2, key(n2, 1, b.e_old + a2 - 1, k2));
  }
  int successor_contents() const { return 24; }
  double contents_at(int n) const { return X.contents_at(n) * (n + 1); }
};

/// The exact chain's content: n and the sequence of the n packets' types (position 0 in
/// service), digits of a base-A number.
struct ExactPre {
  int n;
  int64_t code;
};

struct ExactContent {
  struct Type {
    int cls, flow;
    bool elephant;
  };
  std::vector<Type> types;
  int A;
  std::vector<int64_t> pw;  // A^i
  int64_t s_seq = 0;
  int N;
  using Pre = ExactPre;

  ExactContent(const Model& md, const StateSpace& space, const std::vector<Type>& t)
      : types(t), A(static_cast<int>(t.size())), N(md.buffer) {
    pw.assign(static_cast<size_t>(N) + 2, 1);
    for (int i = 1; i <= N + 1; ++i) pw[i] = pw[i - 1] * A;
    s_seq = space.stride(space.at(component::sequence));
  }
  int digit(int64_t code, int i) const { return static_cast<int>((code / pw[i]) % A); }
  Pre decode(int64_t key, int n, const StateSpace&) const {
    return {n, (key / s_seq) % pw[N]};
  }
  double in_system(const Pre& p, int k) const {
    int c = 0;
    for (int i = 0; i < p.n; ++i) c += types[digit(p.code, i)].cls == k;
    return c;
  }
  int head_class(const Pre& p) const { return types[digit(p.code, 0)].cls; }
  Pre append(const Pre& p, const Variant& v) const { return {p.n + 1, p.code + v.type * pw[p.n]}; }
  Pre without(const Pre& p, int i) const {
    return {p.n - 1, p.code % pw[i] + (p.code / pw[i + 1]) * pw[i]};
  }
  template <class F>
  void remove(const Pre& p, Rule rule, const Variant& arr, F&& f) const {
    const int w = p.n - 1;
    if (w <= 0) return;
    auto hit = [&](double pr, int i) { f(pr, types[digit(p.code, i)].cls, without(p, i)); };
    switch (rule) {
      case Rule::Oldest:
        return hit(1.0, 1);
      case Rule::Uniform:
        for (int i = 1; i <= w; ++i) hit(1.0 / w, i);
        return;
      case Rule::SameFlow:
        for (int i = 1; i <= w; ++i) {
          const Type& t = types[digit(p.code, i)];
          if (t.cls == arr.cls && t.flow == arr.flow) hit(1.0 / w, i);
        }
        return;
      case Rule::ModFront:
        for (int i = 1; i <= w; ++i)
          if (types[digit(p.code, i)].elephant) return hit(1.0, i);
        return;
      case Rule::ModRandom: {
        int el = 0;
        for (int i = 1; i <= w; ++i) el += types[digit(p.code, i)].elephant;
        if (el == 0) return;  // no search without a waiting elephant
        const double B = static_cast<double>(w - el) / w;
        for (int i = 1; i <= w; ++i)
          hit(types[digit(p.code, i)].elephant ? (1.0 + B + B * B) / w : B * B / w, i);
        return;
      }
    }
  }
  int successor_contents() const { return (N + 2) * (A + 1); }
  double contents_at(int n) const { return static_cast<double>(pw[static_cast<size_t>(n)]); }
  template <class F>
  void depart(int n_prev, const Pre& p, double mu, F&& f) const {
    if (n_prev == 0 || !(mu > 0.0)) return f(1.0, -1, p.n, p.code * s_seq);
    if (mu < 1.0) f(1.0 - mu, -1, p.n, p.code * s_seq);
    f(mu, head_class(p), p.n - 1, (p.code / A) * s_seq);
  }
};

/// The approximate chain's arrival variants: (class, ECN bit), the type being the class.
std::vector<Variant> approx_variants(const Model& md) {
  std::vector<Variant> variants;
  const int M = md.source.states();
  for (int k = 0; k < md.class_count(); ++k)
    for (int bit = 0; bit < 2; ++bit) {
      const double pe = bit ? md.class_ecn(k) : 1.0 - md.class_ecn(k);
      if (!(pe > 0.0)) continue;
      Variant v{k, 0, bit == 1, k, std::vector<double>(static_cast<size_t>(M))};
      for (int m = 0; m < M; ++m) v.p[static_cast<size_t>(m)] = md.class_share(k, m) * pe;
      variants.push_back(std::move(v));
    }
  return variants;
}

/// Refuse what the class chains do not build, naming the parameter.
void check_class_model(const Model& md) {
  if (md.class_count() > 2)
    fail_param("class", "at most 2 traffic classes in the chain (the simulator takes any number)",
               detail::cat(md.class_count(), " classes"));
  if (md.aqm.ns3() && md.aqm.flow_compare)
    fail_param("aqm.flow_compare", "false with aqm.semantics = \"ns3\" (ns-3's RedQueueDisc has no flow comparison)",
               "true");
}

template <class Content>
class ClassGenerator final : public TransitionGenerator {
 public:
  ClassGenerator(const Model& md, StateSpace space, std::vector<Variant> variants, Content content)
      : K_(md),
        space_(std::move(space)),
        X_(std::move(content)),
        V_(std::move(variants)),
        C_(md.class_count()),
        policy_(md.aqm.policy),
        modified_(md.aqm.modified),
        fc_(md.aqm.flow_compare),
        continuous_(md.time == TimeKind::Continuous),
        Q_(md.source.matrix) {
    for (int k = 0; k < C_; ++k) mice_.push_back(md.class_mice(k));
    sn_ = space_.stride(space_.at(component::level));
    // the filter cell's stride: avg's, or REDwM's last sum's (the cell spans avg and the sums, docs/redwm.md)
    sg_ = space_.stride(space_.at(K_.redwm ? redwm_s_component(K_.R) : component::avg));
    sm_ = space_.stride(space_.at(component::modulator));
    const DropFunction drop = md.resolved_drop();
    // stateful AQM (docs/stateful-aqm.md): the count, p_max, the clock and cur_max_th as
    // in the single-class kernel; modified RED compares avg with the current max_th
    if (K_.stateful) {
      S_ = &*K_.sa;
      keys_ = detail::StatefulKeys(space_, *S_);
    }
    for (int j = 0; j < 2; ++j) {
      const double hi = S_ && S_->dyn_maxth ? S_->mt_drop[j].hi : drop.hi;
      for (double g : K_.grid.points()) ge_max_[j].push_back(g >= hi);
    }
    for (double g : K_.grid.points()) ge_min_.push_back(g >= drop.lo);
    names_ = queue_event_names();
    names_.push_back(event::flow_compare);
    names_.push_back(event::pushed_out);
    const char* per[kPer] = {"arrival", "admit", "aqm_drop", "overflow", "flow_compare",
                             "pushed_out", "mark", "depart", "in_system"};
    for (int k = 0; k < C_; ++k)
      for (int e = 0; e < kPer; ++e) names_.push_back(class_event(per[e], k + 1));
    // distinct successors: 2 avg targets x the modulator row x n' in n-2..n+1 x the contents
    // reachable from one (a few class counts; exact: a removed position or none, x types)
    size_t row = 1;
    for (const auto& r : K_.mrows) row = std::max(row, r.size());
    // stateful: x 3 p_max targets x 3 counts (unchanged, after no decision, after a decision)
    max_ = static_cast<int>(K_.max_targets() * row * 4 * X_.successor_contents() * (S_ ? 9 : 1));
    // continuous time: the modulator's moves, avg's two, the departure's heads and each
    // arrival variant's outcomes
    if (continuous_) max_ = K_.M + 4 + static_cast<int>(V_.size()) * X_.successor_contents();
  }
  const StateSpace& space() const override { return space_; }
  TimeKind time() const override { return continuous_ ? TimeKind::Continuous : TimeKind::Discrete; }
  const std::vector<std::string>& event_names() const override { return names_; }
  std::vector<int64_t> initial_states() const override {
    std::vector<int64_t> keys;
    const int64_t aqm0 = S_ ? keys_.encode(-1, S_->pmax_start, 0, 0) : 0;  // count -1, p_max at its start
    for (int m = 0; m < K_.M; ++m) keys.push_back(m * sm_ + aqm0);
    return keys;
  }
  int max_successors() const override { return max_; }
  /// Contents that can go with n packets: approx (e, h) with h <= e <= n - 1 + h, i.e. 2n
  /// (1 when empty); exact A^n sequences.
  int64_t reachable_bound() const override {
    double contents = 0.0;
    for (int n = 0; n <= K_.N; ++n) contents += X_.contents_at(n);
    const double aqm = S_ ? static_cast<double>(keys_.ncount * keys_.npmax * keys_.nphase * (S_->dyn_maxth ? 2 : 1)) : 1.0;
    return static_cast<int64_t>(std::min(static_cast<double>(space_.product()),
                                         contents * static_cast<double>(K_.G) * K_.S * K_.M * aqm));
  }
  /// The stateful AQM's bound is loose (as for the single-class chain), and so is REDwM's
  /// product of the avg and s grids (A and s are tied).
  bool reachable_bound_tight() const override { return S_ == nullptr && K_.S == 1; }

  /// One arrival of variant v (mass pv: a probability in a slot, a rate in continuous time)
  /// meeting n packets of content x with avg on grid index gi (its filter cell g2), drop
  /// probability pb, the count c and cur_max_th index j2 (stateful AQM): rules 3a-3e of
  /// docs/classes.md.  The slot calls it after its filter step, the rate kernel at the
  /// arrival instant with the current avg.  keep(p, content, c2): the content after the
  /// arrival (before the slot's departure), c2 the count after it.
  template <class Keep>
  void arrive(int n, const typename Content::Pre& x, int g2, double pb, int64_t c, int j2, const Variant& v, double pv,
              Tally& t, Keep&& keep) const {
    using Pre = typename Content::Pre;
    const int w = std::max(n - 1, 0);
    const int cl = v.cls;
    t.at(cl, kArr) += pv;
    auto admit = [&](double p, const Pre& from, int64_t c2) {  // the arrival joins behind
      t.at(cl, kAdm) += p;
      keep(p, X_.append(from, v), c2);
    };
    // a loss the drop policy places: the arrival (tail, or nothing waiting), else the oldest or a
    // uniform waiting packet, the arrival taking its place; `after` the count that follows
    auto by_policy = [&](Ev why, double mass, int64_t after) {
      if (policy_ == DropPolicy::Tail || w == 0) {
        t.lost(cl, why, mass, false);
        keep(mass, x, after);
      } else {
        X_.remove(x, policy_ == DropPolicy::Front ? Rule::Oldest : Rule::Uniform, v, [&](double p, int vc, const Pre& rest) {
          t.lost(vc, why, mass * p, true);
          admit(mass * p, rest, after);
        });
      }
    };
    if (n == K_.N) {  // overflow (SPEC 2.5: the policy picks the victim)
      by_policy(kOvf, pv, c);
      return;
    }
    double go = pv;  // mass that reaches the drop test
    const int gi = g2 / K_.S;  // the avg grid index of the cell
    if (fc_ && ge_min_[gi] && w >= 1) {
      double same = 0.0;
      X_.remove(x, Rule::SameFlow, v, [&](double p, int vc, const Pre& rest) {
        same += p;
        t.lost(cl, kFc, pv * p, false);
        t.lost(vc, kFc, pv * p, true);
        keep(pv * p, rest, c);
      });
      // (the tagged chain splits a certain match into ahead / the tag / behind: a sum of 1 up
      // to rounding, which must not leave a spurious admission)
      go = same > 1.0 - 1e-12 ? 0.0 : pv * (1.0 - same);
    }
    if (!(go > 0.0)) return;
    // the AQM test: p_b with the slot's p_max and cur_max_th, the spacing rule's decision
    const detail::SpacingStep st = detail::spacing_step(S_ ? S_->spacing : Spacing::None, c, pb, S_ ? S_->count_cap : 0);
    const double pd = st.decision;
    const int64_t cd = st.after_decision;
    if (pd < 1.0) {
      t.e[aAdm] += go * (1.0 - pd);
      admit(go * (1.0 - pd), x, st.after_none);
    }
    const double dec = go * pd;
    if (!(dec > 0.0)) return;
    // the decision goes to the drop policy: the arrival, or (front / random) a waiting packet
    auto to_policy = [&](double mass) { by_policy(kAqm, mass, cd); };
    if (modified_ == Modified::None) {
      if (v.ecn) {  // SPEC 2.5: marked instead of dropped
        t.marked(cl, dec);
        admit(dec, x, cd);
      } else {
        to_policy(dec);
      }
    } else if (!ge_max_[j2][gi]) {
      // modified RED below max_th (docs/classes.md): the decision takes a waiting elephant,
      // whatever the arrival; with none waiting a protected arrival is admitted (marked when
      // ECN-capable) and an elephant arrival, the only elephant, is dropped
      double found = 0.0;
      X_.remove(x, modified_ == Modified::Front ? Rule::ModFront : Rule::ModRandom, v,
                [&](double p, int vc, const Pre& rest) {
                  found += p;
                  t.lost(vc, kAqm, dec * p, true);
                  admit(dec * p, rest, cd);
                });
      const double none = dec * std::max(0.0, 1.0 - found);
      if (none > 0.0) {
        if (v.ecn) {
          t.marked(cl, none);
          admit(none, x, cd);
        } else if (mice_[cl]) {
          t.e[aAdm] += none;
          admit(none, x, cd);
        } else {
          t.lost(cl, kAqm, none, false);
          keep(none, x, cd);
        }
      }
    } else {  // modified RED at or above max_th: the policy, no mark
      to_policy(dec);
    }
  }

  void successors(int64_t key, Successors& out, double* events) const override {
    const int n = static_cast<int>((key / sn_) % (K_.N + 1));
    const int g = static_cast<int>((key / sg_) % (static_cast<int64_t>(K_.G) * K_.S));  // the filter cell
    const int m = static_cast<int>((key / sm_) % K_.M);
    using Pre = typename Content::Pre;
    const Pre x = X_.decode(key, n, space_);
    Tally t(C_);
    const double mu = K_.mu;
    if (continuous_) {
      rates(key, n, g, m, x, t, out);
    } else {
      // stateful AQM: the slot's cur_max_th (moved first), clock, and the count at the start
      const detail::StatefulKeys::Value sv = keys_.decode(key);  // count -1, indices 0 without one
      const int j2 = S_ ? K_.maxth_step(sv.j, n, g) : 0;
      const detail::SlotKernel::ClockStep ck = S_ ? K_.clock_step(sv.ph) : detail::SlotKernel::ClockStep{};
      const int64_t c = sv.c;
      int k2 = 0;  // the p_max index of the branch being expanded (set by `branch`)
      // step 5 from a pre-departure content, then the key
      // c2: the count after the slot (c when no AQM test is taken)
      auto finish = [&](int g2, int m2, double p, const Pre& pre, int64_t c2) {
        if (!(p > 0.0)) return;
        if (S_) c2 = std::min(c2, S_->cap_at(g2));  // a truncated count saturates at its point's cap
        const int64_t aqm = keys_.encode(c2, k2, ck.ph2, j2);
        X_.depart(n, pre, mu, [&](double pd, int dep_cls, int n2, int64_t content) {
          (void)dep_cls;
          if (pd > 0.0) out.push_back({n2 * sn_ + g2 * sg_ + m2 * sm_ + content + aqm, p * pd});
        });
      };
      // steps 1-3 (filter, modulator, the clock's p_max move to index kk), then the arrival
      auto branch = [&](int g2, int m2, int kk, double wgt, double a) {
        k2 = kk;
        if (a < 1.0) finish(g2, m2, wgt * (1.0 - a), x, c);  // no arrival
        if (!(a > 0.0)) return;
        t.e[aArr] += wgt * a;
        // the AQM test: p_b with the slot's p_max and cur_max_th
        const double pb = S_ ? K_.stateful_pb(k2, j2, g2) : K_.pdrop[g2];
        for (const Variant& v : V_) {
          const double pv = wgt * a * v.p[static_cast<size_t>(m2)];
          if (pv > 0.0)
            arrive(n, x, g2, pb, c, j2, v, pv, t,
                   [&](double p, const Pre& pre, int64_t c2) { finish(g2, m2, p, pre, c2); });
        }
      };
      if (S_)
        K_.stateful_branches(n, g, m, sv.k, sv.j, ck, branch);
      else
        K_.branches(n, g, m, [&](int g2, int m2, double wgt, double a, double, double) { branch(g2, m2, 0, wgt, a); });
    }
    if (!events) return;
    if (n >= 1) {
      t.e[aDep] = mu;
      t.at(X_.head_class(x), kDep) += mu;
    }
    for (int k = 0; k < C_; ++k) t.at(k, kIn) = X_.in_system(x, k);
    std::copy(t.e.begin(), t.e.end(), events);
  }

  /// Continuous time (docs/classes.md, "Continuous time"): the rates out of (n, avg cell g,
  /// modulator m, content x): the modulator's moves, avg's upwind moves on its grid, the
  /// arrivals by class at rate lambda_m share_c[m] (each one's outcome by arrive() with the
  /// current avg) and the departure of the head at rate mu (the next head drawn as the
  /// slot's departure draws it).  Outcomes that leave the state as it is are self-loops,
  /// which the builder drops; the event rates count them.
  void rates(int64_t key, int n, int g, int m, const typename Content::Pre& x, Tally& t, Successors& out) const {
    using Pre = typename Content::Pre;
    const int64_t base = g * sg_ + m * sm_;  // no stateful AQM components in continuous time
    for (int m2 = 0; m2 < K_.M; ++m2)
      if (m2 != m && Q_[static_cast<size_t>(m)][static_cast<size_t>(m2)] > 0.0)
        out.push_back({key + (m2 - m) * sm_, Q_[static_cast<size_t>(m)][static_cast<size_t>(m2)]});
    double up = 0.0, down = 0.0;
    K_.filter.upwind_rates(K_.grid.points(), g, std::max(n - 1, 0), up, down);
    if (up > 0.0) out.push_back({key + sg_, up});
    if (down > 0.0) out.push_back({key - sg_, down});
    auto to = [&](double rate) {
      return [&, rate](double p, int, int n2, int64_t content) {
        if (p > 0.0) out.push_back({base + n2 * sn_ + content, rate * p});
      };
    };
    const double lam = K_.lam[static_cast<size_t>(m)];
    if (lam > 0.0) {
      t.e[aArr] += lam;
      for (const Variant& v : V_) {
        const double pv = lam * v.p[static_cast<size_t>(m)];
        if (pv > 0.0)
          arrive(n, x, g, K_.pdrop[static_cast<size_t>(g)], -1, 0, v, pv, t,
                 [&](double p, const Pre& pre, int64_t) { X_.depart(n, pre, 0.0, to(p)); });
      }
    }
    if (n >= 1 && K_.mu > 0.0) X_.depart(n, x, 1.0, to(K_.mu));
  }

 private:
  detail::SlotKernel K_;
  StateSpace space_;
  Content X_;
  std::vector<Variant> V_;
  int C_;
  DropPolicy policy_;
  Modified modified_;
  bool fc_;
  bool continuous_;                     // the rate kernel (model.time = "continuous")
  std::vector<std::vector<double>> Q_;  // continuous time: the modulator's generator
  std::vector<bool> mice_;
  std::vector<char> ge_min_, ge_max_[2];  // avg grid point >= min_th, >= max_th (per cur_max_th index)
  const detail::StatefulLayout* S_ = nullptr;  // the stateful AQM, when the model has one
  detail::StatefulKeys keys_;
  int64_t sn_ = 0, sg_ = 0, sm_ = 0;
  std::vector<std::string> names_;
  int max_ = 0;
};

#include "class_window.inc"

}  // namespace

std::unique_ptr<TransitionGenerator> class_generator(const Model& md, ClassChain which, int class_window) {
  md.validate();
  check_class_model(md);
  const int C = md.class_count(), M = md.source.states();
  const bool track_flow = md.aqm.flow_compare, modified = md.aqm.modified != Modified::None;
  StateSpace space = queue_state_space(md);
  std::vector<Variant> variants;
  auto share = [&](int k) {
    std::vector<double> p(static_cast<size_t>(M));
    for (int m = 0; m < M; ++m) p[static_cast<size_t>(m)] = md.class_share(k, m);
    return p;
  };
  if (which == ClassChain::Approx) {
    ApproxContent::add_components(space, md);
    variants = approx_variants(md);
    ApproxContent x(md, space);
    return std::make_unique<ClassGenerator<ApproxContent>>(md, space, std::move(variants), std::move(x));
  }
  if (which == ClassChain::Window) return window_class_generator(md, std::move(space), class_window);
  // exact: one type per (class, flow when compared, ECN bit when modified RED reads it)
  std::vector<ExactContent::Type> types;
  for (int k = 0; k < C; ++k) {
    const double e = md.class_ecn(k);
    const bool bits = modified && e > 0.0 && e < 1.0;  // the bit is not implied by the class
    const bool mice = md.class_mice(k);
    const int F = track_flow ? md.class_flows(k) : 1;
    for (int f = 0; f < F; ++f) {
      const int t0 = static_cast<int>(types.size());
      types.push_back({k, f, !mice && (bits || e < 1.0)});  // bits: the type without ECN
      if (bits) types.push_back({k, f, false});               // ... and with it
      const double pf = track_flow && !md.classes.empty() ? md.classes[k].flow_weight(f) : 1.0;
      for (int bit = 0; bit < 2; ++bit) {
        const double pe = bit ? e : 1.0 - e;
        if (!(pe > 0.0)) continue;
        Variant v{k, f, bit == 1, bits && bit ? t0 + 1 : t0, share(k)};
        for (double& x : v.p) x *= pe * pf;
        variants.push_back(std::move(v));
      }
    }
  }
  const double A = static_cast<double>(types.size());
  double seqs = 0.0, term = 1.0;
  int n_max = -1;  // the largest buffer within the bound
  for (int n = 0;; ++n, term *= A) {
    seqs += term;
    if (seqs <= kMaxExactSequences) n_max = n;
    if (n == md.buffer && (seqs > kMaxExactSequences || std::pow(A, md.buffer) > 9e15)) {
      fail_param("model.buffer",
                 detail::cat("small enough for the exact class chain: sum_{n=0..N} A^n <= ", kMaxExactSequences,
                             " sequences with A = ", types.size(),
                             " packet types (class x compared flow x ECN bit), i.e. N <= ", n_max,
                             " here (classes = \"approx\" has no such bound)"),
                 md.buffer);
    }
    if (n >= md.buffer) break;
  }
  space.add(component::sequence, static_cast<int32_t>(std::llround(std::pow(A, md.buffer))), /*coarsen=*/false);
  ExactContent x(md, space, types);
  return std::make_unique<ClassGenerator<ExactContent>>(md, space, std::move(variants), std::move(x));
}

}  // namespace aqm

namespace aqm {

std::vector<ResponseResult> class_steered_response(const QueueChain& c, const std::vector<double>& pi,
                                                   const ResponseOptions& o) {
  o.validate();
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  if (c.space.find(component::class2) < 0)
    throw std::invalid_argument("class_steered_response: needs the two-class chain (classes = \"approx\")");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const Model& md = c.model;
  const int C = md.class_count(), N = md.buffer;
  const int32_t TV = TagContent::values(md);
  StateSpace space = c.space;
  space.add("tag", TV, /*coarsen=*/false);
  const auto& level = c.component(component::level);
  // the tagged states (s, k), k = 0..n(s)-1 packets ahead, numbered off[s] + k
  std::vector<int64_t> off(static_cast<size_t>(c.n) + 1, 0);
  for (int32_t s = 0; s < c.n; ++s) off[s + 1] = off[s] + level[s];
  const int64_t T = off[c.n];
  const double per = c.n > 0 ? 3.0 * static_cast<double>(c.nnz()) / c.n : 0.0;
  require_tagged_states(T, per, o);
  // one tagged chain per (class, elephant bit) of the tagged packet: the bit matters to
  // modified RED's search only
  const bool mod = md.aqm.modified != Modified::None;
  const std::vector<Variant> variants = approx_variants(md);
  // continuous time: the tagged chain's rates uniformised at Lambda (its largest exit rate);
  // absorbed at the r-th step of the uniformised chain, R is a sum of r exponential(Lambda) times
  const bool continuous = c.time == TimeKind::Continuous;
  std::vector<std::pair<int, bool>> tags;
  for (const Variant& v : variants) {
    const std::pair<int, bool> t{v.cls, mod && !md.class_mice(v.cls) && !v.ecn};
    if (std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
  }
  struct Part {
    int cls;
    long double admitted;
    ResponseResult r;
  };
  std::vector<Part> parts;
  Successors out;
  int64_t from_key = 0;
  std::vector<std::pair<int32_t, double>> row;
  for (const auto& [cls, el] : tags) {
    TagContent X(md, space, cls, el);
    ClassGenerator<TagContent> gen(md, space, variants, X);
    TaggedRows tr;
    tr.states = T;
    tr.rp.assign(static_cast<size_t>(T) + 1, 0);
    tr.served.assign(static_cast<size_t>(T), 0.0);
    tr.pushed.assign(static_cast<size_t>(T), 0.0);
    tr.col.reserve(static_cast<size_t>(T) * 12);
    tr.val.reserve(static_cast<size_t>(T) * 12);
    auto target = [&](int64_t key2) -> int64_t {
      const int t = static_cast<int>(key2 % TV);
      const int32_t s2 = c.index_of_key(key2 / TV);
      if (s2 < 0 || t >= level[s2]) {
        std::vector<int32_t> vals(static_cast<size_t>(space.count()));
        space.decode(key2, vals.data());
        std::string d;
        for (int i = 0; i < space.count(); ++i) d += detail::cat(" ", space.component(i).name, "=", vals[i]);
        space.decode(from_key, vals.data());
        d += " from";
        for (int i = 0; i < space.count(); ++i) d += detail::cat(" ", space.component(i).name, "=", vals[i]);
        throw std::logic_error("internal error: a tagged transition leaves the chain:" + d);
      }
      return off[s2] + t;
    };
    double worst = 0.0, lambda = 0.0;
    for (int32_t s = 0; s < c.n; ++s) {
      if ((s & 1023) == 0) check_interrupt();
      const int64_t base = c.key_of(s) * TV;
      for (int k = 0; k < level[s]; ++k) {
        const int64_t i = off[s] + k;
        out.clear();
        // the tagged packet's class must be in the content (other pairs are never reached: empty rows)
        const ApproxPre pre = X.X.decode(base + k, level[s], space);
        const int of_class = k == 0 ? (pre.h == cls ? 1 : 0) : cls == 1 ? pre.e_old : pre.w_old - pre.e_old;
        if (of_class < 1) {
          tr.rp[static_cast<size_t>(i) + 1] = static_cast<int32_t>(tr.col.size());
          continue;
        }
        from_key = base + k;
        gen.successors(base + k, out, nullptr);
        row.clear();
        double sv = 0.0, pu = 0.0, sum = 0.0;
        for (const auto& [key2, p] : out) {
          sum += p;
          const int t = static_cast<int>(key2 % TV);
          if (t == X.served_value())
            sv += p;
          else if (t == X.gone_value())
            pu += p;
          else
            row.push_back({static_cast<int32_t>(target(key2)), p});
        }
        if (continuous) {  // rates: the self-loops go, the diagonal holds minus the exit rate
          double exit = sv + pu;
          size_t kept = 0;
          for (const auto& e : row)
            if (e.first != i) exit += e.second, row[kept++] = e;
          row.resize(kept);
          row.push_back({static_cast<int32_t>(i), -exit});
          lambda = std::max(lambda, exit);
        }
        std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t q = 0; q < row.size(); ++q) {
          if (q > 0 && row[q].first == row[q - 1].first) {
            tr.val.back() += row[q].second;
          } else {
            tr.col.push_back(row[q].first);
            tr.val.push_back(row[q].second);
          }
        }
        if (tr.col.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
          throw StateSpaceTooLarge("memory_limit_gb", "the tagged-packet chain has more than 2^31 - 1 transitions");
        tr.rp[static_cast<size_t>(i) + 1] = static_cast<int32_t>(tr.col.size());
        tr.served[static_cast<size_t>(i)] = sv;
        tr.pushed[static_cast<size_t>(i)] = pu;
        worst = std::max(worst, std::abs(sum - 1.0));
      }
    }
    // continuous time, when the linear solves do not converge: P = I + G / Lambda on the tagged
    // states, absorption probabilities rate / Lambda, stepped as in slotted time
    auto uniformise = [&] {  // (called with lambda > 0 only)
      for (int64_t i = 0; i < T; ++i)
        for (int32_t e = tr.rp[static_cast<size_t>(i)]; e < tr.rp[static_cast<size_t>(i) + 1]; ++e)
          tr.val[static_cast<size_t>(e)] = (tr.col[static_cast<size_t>(e)] == i ? 1.0 : 0.0) + tr.val[static_cast<size_t>(e)] / lambda;
      for (auto& x : tr.served) x /= lambda;
      for (auto& x : tr.pushed) x /= lambda;
    };
    if (!continuous && worst > 1e-12) {
      throw std::logic_error(detail::cat("internal error: tagged chain rows sum to 1 +- ", worst));
    }
    // the tagged packet's law at the end of its arrival slot: an admitted arrival of its kind
    std::vector<double> v(static_cast<size_t>(T), 0.0);
    long double admitted = 0.0L;
    for (int32_t s = 0; s < c.n; ++s) {
      if (!(pi[s] > 0.0)) continue;
      out.clear();
      from_key = c.key_of(s) * TV + X.pending_value();
      gen.successors(from_key, out, nullptr);
      for (const auto& [key2, p] : out) {
        if (key2 % TV >= N) continue;
        v[static_cast<size_t>(target(key2))] += pi[s] * p;
        admitted += static_cast<long double>(pi[s]) * p;
      }
    }
    Part part{cls, admitted, {}};
    part.r.requested = part.r.method = ResponseMethod::TaggedChain;
    part.r.states = T;
    part.r.nnz = static_cast<int64_t>(tr.col.size());
    part.r.status = Status::Converged;
    if (admitted > 0.0L && (!continuous || lambda > 0.0)) {
      for (auto& x : v) x = static_cast<double>(x / admitted);
      if (continuous) {
        // Step the uniformised chain for at most kStepsBeforeSolves steps.  A chain whose avg
        // moves fast has a large Lambda and needs tens of thousands; if the mass is not absorbed
        // by then, the moments come from linear solves with the generator (restored from the
        // uniformised values: the diagonal kept, the other rates times Lambda again, 1 ulp), and
        // the steps go on to max_steps only if a solve stops short.
        std::vector<double> diag(static_cast<size_t>(T), 0.0);
        for (int64_t i = 0; i < T; ++i)
          for (int32_t e = tr.rp[static_cast<size_t>(i)]; e < tr.rp[static_cast<size_t>(i) + 1]; ++e)
            if (tr.col[static_cast<size_t>(e)] == i) diag[static_cast<size_t>(i)] = tr.val[static_cast<size_t>(e)];
        const ResponseResult fresh = part.r;
        uniformise();
        ResponseOptions first = o;
        first.max_steps = std::min<long>(o.max_steps, kStepsBeforeSolves);
        tagged_absorption(tr, v, first, part.r);
        bool stepped = true;
        if (!part.r.converged() && o.max_steps > first.max_steps) {
          for (int64_t i = 0; i < T; ++i)
            for (int32_t e = tr.rp[static_cast<size_t>(i)]; e < tr.rp[static_cast<size_t>(i) + 1]; ++e)
              tr.val[static_cast<size_t>(e)] =
                  tr.col[static_cast<size_t>(e)] == i ? diag[static_cast<size_t>(i)] : tr.val[static_cast<size_t>(e)] * lambda;
          for (auto& x : tr.served) x *= lambda;
          for (auto& x : tr.pushed) x *= lambda;
          ResponseResult solved = fresh;
          if (absorbing_moments(tr, v, o, solved)) {
            part.r = std::move(solved);
            stepped = false;
          } else {
            uniformise();
            part.r = fresh;
            tagged_absorption(tr, v, o, part.r);
          }
        }
        if (stepped) {  // steps r -> time: E[R | r] = r / Lambda, E[R^2 | r] = r (r + 1) / Lambda^2
          const double mean = part.r.mean_response, var = part.r.var_response;
          part.r.mean_response = mean / lambda;
          part.r.var_response = (var + mean * mean + mean) / (lambda * lambda) - part.r.mean_response * part.r.mean_response;
          part.r.mean_sojourn /= lambda;
          part.r.served_pmf.clear();
        }
      } else {
        tagged_absorption(tr, std::move(v), o, part.r);
      }
    }
    parts.push_back(std::move(part));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // mix the tagged chains by their admitted rates: all packets (entry 0), then each class
  std::vector<ResponseResult> res;
  for (int cls = -1; cls < C; ++cls) {
    ResponseResult r;
    r.requested = r.method = ResponseMethod::TaggedChain;
    r.states = T;
    r.seconds.push_back({"build_and_iterate", cls < 0 ? seconds : 0.0});
    r.status = Status::Converged;
    long double adm = 0.0L;
    for (const Part& p : parts)
      if (cls < 0 || p.cls == cls) adm += p.admitted;
    r.admitted_rate = static_cast<double>(adm);
    if (!(adm > 0.0L)) {
      res.push_back(std::move(r));
      continue;
    }
    std::vector<long double> pmf(1, 0.0L);
    long double served = 0, pushed = 0, sojourn = 0, rem = 0;
    for (const Part& p : parts) {
      if (!(cls < 0 || p.cls == cls) || !(p.admitted > 0.0L)) continue;
      const long double wgt = p.admitted / adm;
      if (p.r.served_pmf.size() > pmf.size()) pmf.resize(p.r.served_pmf.size(), 0.0L);
      for (size_t i = 0; i < p.r.served_pmf.size(); ++i) pmf[i] += wgt * p.r.served_pmf[i];
      served += wgt * p.r.served_prob;
      pushed += wgt * p.r.pushed_out_prob;
      sojourn += wgt * p.r.mean_sojourn;
      rem += wgt * p.r.remaining_mass;
      r.iterations = std::max(r.iterations, p.r.iterations);
      r.operator_applications += p.r.operator_applications;
      r.nnz = std::max(r.nnz, p.r.nnz);
      if (!p.r.converged()) r.status = Status::NotConverged, r.note = p.r.note;
    }
    long double m1 = 0, m2 = 0;
    if (continuous) {  // R has a density: the parts' moments (no pmf)
      for (const Part& p : parts) {
        if (!(cls < 0 || p.cls == cls) || !(p.admitted > 0.0L) || !(p.r.served_prob > 0.0)) continue;
        const long double ws = p.admitted / adm * p.r.served_prob, mean = p.r.mean_response;
        m1 += ws * mean, m2 += ws * (p.r.var_response + mean * mean);
      }
    } else {
      for (size_t i = 0; i < pmf.size(); ++i) m1 += pmf[i] * i, m2 += pmf[i] * i * i;
      r.served_pmf.assign(pmf.begin(), pmf.end());
    }
    r.served_prob = static_cast<double>(served);
    r.pushed_out_prob = static_cast<double>(pushed);
    r.mean_sojourn = static_cast<double>(sojourn);
    r.residual = r.remaining_mass = static_cast<double>(rem);
    if (served > 0) {
      const long double mean = m1 / served;
      r.mean_response = static_cast<double>(mean);
      r.var_response = static_cast<double>(m2 / served - mean * mean);
    }
    res.push_back(std::move(r));
  }
  return res;
}

ResponseResult continuous_tagged_response(const QueueChain& c, const std::vector<double>& pi,
                                          const ResponseOptions& o) {
  if (c.time != TimeKind::Continuous || needs_class_chain(c.model) || c.model.aqm.ns3())
    throw std::invalid_argument("continuous_tagged_response: needs a continuous-time chain without classes");
  if (static_cast<int32_t>(pi.size()) != c.n)
    throw std::invalid_argument(detail::cat("pi has ", pi.size(), " entries, the chain ", c.n, " states"));
  // The model with one class of every arrival (its ECN probability the model's; a model
  // given with one class keeps it): its two-class chain's class contents are implied by n
  // (no packet of a second class), so it has the plain chain's states and generator, and pi
  // carries over state by state.
  Model one = c.model;
  if (one.classes.empty()) {
    TrafficClass all;
    all.name = "all";
    all.share = {1.0};
    all.ecn = c.model.aqm.ecn;
    one.classes = {all};
    one.aqm.ecn = 0.0;
  }
  const auto gen = class_generator(one, ClassChain::Approx);
  BuildOptions bo;
  bo.max_states = std::max<int64_t>(bo.max_states, c.n);
  bo.memory_limit_bytes = std::max(bo.memory_limit_bytes, o.memory_limit_bytes);
  const QueueChain cc = build_chain(*gen, one, bo);
  std::vector<int> at(static_cast<size_t>(c.space.count()));
  for (int i = 0; i < c.space.count(); ++i) at[static_cast<size_t>(i)] = cc.space.at(c.space.component(i).name);
  std::vector<double> pc(static_cast<size_t>(cc.n), 0.0);
  std::vector<char> hit(static_cast<size_t>(c.n), 0);
  for (int32_t s = 0; s < cc.n; ++s) {
    int64_t key = 0;
    for (int i = 0; i < c.space.count(); ++i) key += c.space.stride(i) * cc.labels[static_cast<size_t>(at[static_cast<size_t>(i)])][s];
    const int32_t t = c.index_of_key(key);
    if (t < 0 || hit[static_cast<size_t>(t)])
      throw std::logic_error("internal error: the one-class chain's states are not the plain chain's");
    hit[static_cast<size_t>(t)] = 1;
    pc[static_cast<size_t>(s)] = pi[static_cast<size_t>(t)];
  }
  if (cc.n != c.n) throw std::logic_error("internal error: the one-class chain's states are not the plain chain's");
  return class_steered_response(cc, pc, o)[0];
}

}  // namespace aqm
