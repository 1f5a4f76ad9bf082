// red_harness: ns-3's own RedQueueDisc in front of a single exponential server, driven on ns-3's
// simulator clock; prints time averages and per-arrival rates as JSON with 95 % confidence intervals.
//
// The system (docs/ns3.md, "Validation against ns-3"):
//   arrivals  Poisson (rate lambda) or a two-state MMPP (rates lambda0/lambda1, switching rates
//             r01/r10), exponential interarrival times scheduled on ns3::Simulator;
//   enqueue   each arrival is a QueueDiscItem (Mark() succeeds only for ECN-capable packets, an
//             arrival being ECN-capable with probability `ecn`) handed to RedQueueDisc::Enqueue;
//             if the server is idle it immediately calls Dequeue() and serves that packet;
//   service   exponential (rate mu); at each completion Dequeue() either returns the next packet or
//             nullptr (then RedQueueDisc itself records m_idle = 1, m_idleTime = now).
// RedQueueDisc's MaxSize counts the waiting packets; the system holds MaxSize + 1 with the packet in
// service.  Time is in seconds (lambda and mu in packets per second), as for LinkBandwidth.
//
// Every RedQueueDisc attribute is set by its ns-3 name: --MinTh=5 --MaxTh=15 --QW=0.002
// --LInterm=50 --Gentle=true --Wait=true --UseEcn=false --UseHardDrop=true --LinkBandwidth=1.5Mbps
// --MeanPktSize=500 --MaxSize=25p --NLRED=false --ARED=false ...
// Harness options: --lambda --mu --ecn --mmpp=lambda0,lambda1,r01,r10 --duration --warmup
// --reps (independent replications, RngRun = run, run+1, ...) --batches (batch means inside each
// replication when reps = 1) --seed --run.  Output: one JSON object on stdout.
//
// Build (validation/ns3/compare.py and tests/python/simulation/test_ns3.py do this):
//   g++ -O2 -std=c++20 red_harness.cc -I<wheel>/include -L<wheel>/lib64 -Wl,-rpath,<wheel>/lib64
//       -lns3.44-traffic-control -lns3.44-network -lns3.44-core

#include "ns3/attribute.h"
#include "ns3/packet.h"
#include "ns3/queue-item.h"
#include "ns3/queue-size.h"
#include "ns3/random-variable-stream.h"
#include "ns3/red-queue-disc.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/uinteger.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

// ---------------------------------------------------------------------------------------------
// Reading RedQueueDisc's private members (m_qAvg, m_ptc, m_qW) without re-implementing them.
//
// RedQueueDisc keeps the EWMA average m_qAvg private, with no getter and no trace source.  The
// standard allows naming a private member in an explicit template instantiation ("the usual access
// checking rules do not apply to names used to specify explicit instantiations", C++20
// [temp.spec.general]/6).  The instantiation below passes &RedQueueDisc::m_qAvg as a template
// argument; the template hands that pointer-to-member out through a friend function found by
// argument-dependent lookup.  The harness then reads the queue disc's own member through the
// pointer-to-member: the value is ns-3's, computed by ns-3's Estimator, nothing is recomputed here,
// and no header is edited (no "#define private public", no offset arithmetic).
template <typename Tag, typename Tag::type Member>
struct PrivateMember
{
    friend typename Tag::type Get(Tag)
    {
        return Member;
    }
};

struct RedQAvg
{
    using type = double RedQueueDisc::*;
    friend type Get(RedQAvg);
};

struct RedPtc
{
    using type = double RedQueueDisc::*;
    friend type Get(RedPtc);
};

struct RedQW
{
    using type = double RedQueueDisc::*;
    friend type Get(RedQW);
};

template struct PrivateMember<RedQAvg, &RedQueueDisc::m_qAvg>;
template struct PrivateMember<RedPtc, &RedQueueDisc::m_ptc>;
template struct PrivateMember<RedQW, &RedQueueDisc::m_qW>;

// ---------------------------------------------------------------------------------------------
// The packet: a QueueDiscItem whose Mark() succeeds for ECN-capable packets only (as ns-3's own
// RED test suite does).
class HarnessItem : public QueueDiscItem
{
  public:
    HarnessItem(Ptr<Packet> p, bool ecnCapable, Time arrival)
        : QueueDiscItem(p, Address(), 0),
          m_ecnCapable(ecnCapable),
          m_arrival(arrival)
    {
    }

    void AddHeader() override
    {
    }

    bool Mark() override
    {
        return m_ecnCapable;
    }

    Time Arrival() const
    {
        return m_arrival;
    }

  private:
    bool m_ecnCapable;
    Time m_arrival;
};

// ---------------------------------------------------------------------------------------------
[[noreturn]] void
Fail(const std::string& message)
{
    std::cerr << "red_harness: " << message << std::endl;
    std::exit(2);
}

double
ParseDouble(const std::string& name, const std::string& text)
{
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v))
    {
        Fail("--" + name + " must be a number, got '" + text + "'");
    }
    return v;
}

// 97.5 % quantile of Student's t with df degrees of freedom.
double
TQuantile975(int df)
{
    static const double table[] = {0,      12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                                   2.306,  2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                                   2.120,  2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                                   2.064,  2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
    if (df < 1)
    {
        return NAN;
    }
    if (df <= 30)
    {
        return table[df];
    }
    // Cornish-Fisher expansion around the normal quantile (error < 1e-3 for df > 30)
    const double z = 1.959964;
    const double z3 = z * z * z;
    const double z5 = z3 * z * z;
    return z + (z3 + z) / (4.0 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96.0 * df * df);
}

// ---------------------------------------------------------------------------------------------
// Accumulators of one observation window (a batch, or a whole replication).
struct Window
{
    double time = 0;         // length
    double areaQueue = 0;    // integral of waiting packets (the queue disc's own size)
    double areaSystem = 0;   // integral of packets in system
    double areaAvg = 0;      // integral of RedQueueDisc::m_qAvg
    double arrivals = 0;     // arrivals handed to Enqueue
    double admitted = 0;     // Enqueue returned true
    double lost = 0;         // Enqueue returned false
    double early = 0;        // "Unforced drop"
    double forced = 0;       // "Forced drop"
    double overflow = 0;     // dropped by the internal queue (full)
    double marks = 0;        // "Unforced mark" + "Forced mark"
    double forcedMarks = 0;  // "Forced mark"
    double departures = 0;   // service completions
    double sojournSum = 0;   // sum of (departure - arrival) over the departures
};

// The metrics of a window (one sample per batch / replication).
const std::vector<std::string> kMetrics = {"mean_queue",
                                           "mean_system",
                                           "mean_avg",
                                           "loss",
                                           "loss_early",
                                           "loss_forced",
                                           "loss_overflow",
                                           "loss_aqm",
                                           "mark_prob",
                                           "mean_sojourn",
                                           "mean_sojourn_little",
                                           "throughput"};

std::map<std::string, double>
MetricsOf(const Window& w)
{
    std::map<std::string, double> m;
    const double a = std::max(w.arrivals, 1.0);
    m["mean_queue"] = w.areaQueue / w.time;
    m["mean_system"] = w.areaSystem / w.time;
    m["mean_avg"] = w.areaAvg / w.time;
    m["loss"] = w.lost / a;
    m["loss_early"] = w.early / a;
    m["loss_forced"] = w.forced / a;
    m["loss_overflow"] = w.overflow / a;
    m["loss_aqm"] = (w.early + w.forced) / a;
    m["mark_prob"] = w.marks / a;
    m["mean_sojourn"] = w.departures > 0 ? w.sojournSum / w.departures : NAN;
    m["mean_sojourn_little"] = w.admitted > 0 ? w.areaSystem / w.admitted : NAN;
    m["throughput"] = w.departures / w.time;
    return m;
}

// ---------------------------------------------------------------------------------------------
struct Options
{
    double lambda = 0.9 * 375.0;
    double mu = 375.0;  // = LinkBandwidth / (8 MeanPktSize) with ns-3's defaults
    double ecn = 0.0;
    bool mmpp = false;
    double mmppRate[2] = {0, 0};
    double mmppSwitch[2] = {0, 0};  // r01, r10
    double duration = 1000.0;
    double warmup = 100.0;
    int reps = 1;
    int batches = 20;
    uint32_t seed = 1;
    uint64_t run = 1;
    std::vector<std::pair<std::string, std::string>> attributes;
};

// One replication: a fresh simulator, queue disc and random streams.
class Replication
{
  public:
    Replication(const Options& opt, uint64_t run, int nWindows)
        : m_opt(opt),
          m_windows(nWindows)
    {
        RngSeedManager::SetSeed(opt.seed);
        RngSeedManager::SetRun(run);
        m_interarrival = CreateObject<ExponentialRandomVariable>();
        m_service = CreateObject<ExponentialRandomVariable>();
        m_uniform = CreateObject<UniformRandomVariable>();
        m_switch = CreateObject<ExponentialRandomVariable>();
        m_interarrival->SetStream(0);
        m_service->SetStream(1);
        m_uniform->SetStream(2);
        m_switch->SetStream(3);

        m_red = CreateObject<RedQueueDisc>();
        for (const auto& [name, value] : opt.attributes)
        {
            if (!m_red->SetAttributeFailSafe(name, StringValue(value)))
            {
                Fail("RedQueueDisc attribute " + name + " refused the value '" + value + "'");
            }
        }
        m_red->AssignStreams(4);
        m_red->Initialize();
        if (m_red->GetMaxSize().GetUnit() != QueueSizeUnit::PACKETS)
        {
            Fail("MaxSize must be in packets (e.g. 25p): byte mode is not modelled, got " +
                 [&] {
                     std::ostringstream s;
                     s << m_red->GetMaxSize();
                     return s.str();
                 }());
        }
        m_red->TraceConnectWithoutContext("DropBeforeEnqueue",
                                          MakeCallback(&Replication::OnDrop, this));
        m_red->TraceConnectWithoutContext("Mark", MakeCallback(&Replication::OnMark, this));
        m_packet = Create<Packet>(UintegerValueOf("MeanPktSize"));
        m_windowLength = opt.duration / nWindows;
    }

    void Run()
    {
        m_state = 0;
        if (m_opt.mmpp)
        {
            // start the modulating chain in its stationary law
            const double p0 = m_opt.mmppSwitch[1] / (m_opt.mmppSwitch[0] + m_opt.mmppSwitch[1]);
            m_state = m_uniform->GetValue() < p0 ? 0 : 1;
            ScheduleSwitch();
        }
        ScheduleArrival();
        const Time end = Seconds(m_opt.warmup + m_opt.duration);
        Simulator::Stop(end);
        Simulator::Run();
        Advance(end.GetSeconds());
        CheckStats();
        Simulator::Destroy();
    }

    const std::vector<Window>& Windows() const
    {
        return m_windows;
    }

    const Window& Total() const
    {
        return m_total;
    }

    double Ptc()
    {
        return PeekPointer(m_red)->*Get(RedPtc{});
    }

    double QW()
    {
        return PeekPointer(m_red)->*Get(RedQW{});
    }

    std::vector<std::pair<std::string, std::string>> AttributeValues() const
    {
        std::vector<std::pair<std::string, std::string>> out;
        TypeId tid = RedQueueDisc::GetTypeId();
        for (std::size_t i = 0; i < tid.GetAttributeN(); ++i)
        {
            const TypeId::AttributeInformation info = tid.GetAttribute(i);
            if (!info.accessor->HasGetter())
            {
                continue;  // write-only attributes (Alpha, Beta, FengAlpha, FengBeta)
            }
            StringValue v;
            m_red->GetAttribute(info.name, v);
            out.emplace_back(info.name, v.Get());
        }
        return out;
    }

    std::string statsCheck;

  private:
    uint32_t UintegerValueOf(const std::string& name)
    {
        UintegerValue v;
        m_red->GetAttribute(name, v);
        return static_cast<uint32_t>(v.Get());
    }

    double Rate() const
    {
        return m_opt.mmpp ? m_opt.mmppRate[m_state] : m_opt.lambda;
    }

    void ScheduleArrival()
    {
        const double rate = Rate();
        if (rate <= 0)
        {
            return;  // an MMPP state without arrivals: the next switch reschedules
        }
        m_nextArrival = Simulator::Schedule(Seconds(m_interarrival->GetValue(1.0 / rate, 0)),
                                            &Replication::Arrival,
                                            this);
    }

    void ScheduleSwitch()
    {
        const double r = m_opt.mmppSwitch[m_state];
        Simulator::Schedule(Seconds(m_switch->GetValue(1.0 / r, 0)), &Replication::Switch, this);
    }

    void Switch()
    {
        Advance(Simulator::Now().GetSeconds());
        m_state = 1 - m_state;
        // exponential interarrival times are memoryless: the pending arrival is redrawn at the
        // new rate
        m_nextArrival.Cancel();
        ScheduleArrival();
        ScheduleSwitch();
    }

    // Integrate the piecewise-constant state up to time t, closing windows on the way.
    void Advance(double t)
    {
        const double start = m_opt.warmup;
        const int nWindows = static_cast<int>(m_windows.size());
        while (m_last < t)
        {
            if (m_last < start)
            {
                m_last = std::min(t, start);
                continue;
            }
            if (m_k >= nWindows)
            {
                break;
            }
            const double windowEnd =
                m_k + 1 == nWindows ? start + m_opt.duration : start + (m_k + 1) * m_windowLength;
            if (m_last >= windowEnd)
            {
                ++m_k;
                continue;
            }
            const double to = std::min(t, windowEnd);
            const double dt = to - m_last;
            const double q = m_red->GetCurrentSize().GetValue();
            const double n = q + (m_busy ? 1.0 : 0.0);
            const double avg = PeekPointer(m_red)->*Get(RedQAvg{});
            m_windows[m_k].time += dt;
            m_windows[m_k].areaQueue += q * dt;
            m_windows[m_k].areaSystem += n * dt;
            m_windows[m_k].areaAvg += avg * dt;
            m_last = to;
        }
    }

    // The window of the current event (Advance(now) has been called), or none (warmup, end).
    Window* Current()
    {
        const double now = Simulator::Now().GetSeconds();
        if (now < m_opt.warmup || m_k >= static_cast<int>(m_windows.size()))
        {
            return nullptr;
        }
        return &m_windows[m_k];
    }

    void Count(double Window::*field)
    {
        m_total.*field += 1;
        if (Window* w = Current())
        {
            w->*field += 1;
        }
    }

    void Arrival()
    {
        const double now = Simulator::Now().GetSeconds();
        Advance(now);
        ScheduleArrival();
        const bool ecnCapable = m_opt.ecn > 0 && m_uniform->GetValue() < m_opt.ecn;
        Ptr<HarnessItem> item = Create<HarnessItem>(m_packet, ecnCapable, Simulator::Now());
        Count(&Window::arrivals);
        if (m_red->Enqueue(item))
        {
            Count(&Window::admitted);
        }
        else
        {
            Count(&Window::lost);
        }
        if (!m_busy)
        {
            StartService();
        }
    }

    void StartService()
    {
        Ptr<QueueDiscItem> item = m_red->Dequeue();
        if (!item)
        {
            m_busy = false;  // RedQueueDisc has recorded the start of the idle period
            return;
        }
        m_busy = true;
        m_inService = DynamicCast<HarnessItem>(item);
        Simulator::Schedule(Seconds(m_service->GetValue(1.0 / m_opt.mu, 0)),
                            &Replication::Completion,
                            this);
    }

    void Completion()
    {
        const double now = Simulator::Now().GetSeconds();
        Advance(now);
        const double sojourn = now - m_inService->Arrival().GetSeconds();
        Count(&Window::departures);
        m_total.sojournSum += sojourn;
        if (Window* w = Current())
        {
            w->sojournSum += sojourn;
        }
        m_inService = nullptr;
        m_busy = false;
        StartService();
    }

    void OnDrop(Ptr<const QueueDiscItem>, const char* reason)
    {
        const std::string r(reason);
        if (r == RedQueueDisc::UNFORCED_DROP)
        {
            Count(&Window::early);
        }
        else if (r == RedQueueDisc::FORCED_DROP)
        {
            Count(&Window::forced);
        }
        else if (r == QueueDisc::INTERNAL_QUEUE_DROP)
        {
            Count(&Window::overflow);
        }
        else
        {
            Fail("unexpected drop reason '" + r + "'");
        }
    }

    void OnMark(Ptr<const QueueDiscItem>, const char* reason)
    {
        Count(&Window::marks);
        if (std::string(reason) == RedQueueDisc::FORCED_MARK)
        {
            Count(&Window::forcedMarks);
        }
    }

    // The queue disc's own counters (whole run, warmup included) against the harness's.
    void CheckStats()
    {
        const QueueDisc::Stats& s = m_red->GetStats();
        std::ostringstream bad;
        auto check = [&](const char* what, double mine, double theirs) {
            if (mine != theirs)
            {
                bad << what << ": harness " << mine << ", QueueDisc::GetStats " << theirs << "; ";
            }
        };
        check("arrivals", m_total.arrivals, s.nTotalReceivedPackets);
        check("admitted", m_total.admitted, s.nTotalEnqueuedPackets);
        check("lost", m_total.lost, s.nTotalDroppedPacketsBeforeEnqueue);
        check("lost = early + forced + overflow",
              m_total.lost,
              m_total.early + m_total.forced + m_total.overflow);
        check("early drops", m_total.early, s.GetNDroppedPackets(RedQueueDisc::UNFORCED_DROP));
        check("forced drops", m_total.forced, s.GetNDroppedPackets(RedQueueDisc::FORCED_DROP));
        check("overflow drops",
              m_total.overflow,
              s.GetNDroppedPackets(QueueDisc::INTERNAL_QUEUE_DROP));
        check("marks", m_total.marks, s.nTotalMarkedPackets);
        check("forced marks", m_total.forcedMarks, s.GetNMarkedPackets(RedQueueDisc::FORCED_MARK));
        check("dequeued", m_total.departures + (m_busy ? 1 : 0), s.nTotalDequeuedPackets);
        check("dropped after dequeue", 0, s.nTotalDroppedPacketsAfterDequeue);
        statsCheck = bad.str();
        if (!statsCheck.empty())
        {
            Fail("queue disc statistics disagree with the harness: " + statsCheck);
        }
        statsCheck = "ok";
    }

    const Options& m_opt;
    std::vector<Window> m_windows;
    Window m_total;
    double m_windowLength = 0;
    double m_last = 0;
    int m_k = 0;  // the current window
    bool m_busy = false;
    int m_state = 0;
    EventId m_nextArrival;
    Ptr<RedQueueDisc> m_red;
    Ptr<Packet> m_packet;
    Ptr<HarnessItem> m_inService;
    Ptr<ExponentialRandomVariable> m_interarrival;
    Ptr<ExponentialRandomVariable> m_service;
    Ptr<UniformRandomVariable> m_uniform;
    Ptr<ExponentialRandomVariable> m_switch;
};

// ---------------------------------------------------------------------------------------------
std::string
JsonString(const std::string& s)
{
    std::string out = "\"";
    for (char c : s)
    {
        if (c == '"' || c == '\\')
        {
            out += '\\';
        }
        out += c;
    }
    return out + "\"";
}

std::string
JsonNumber(double v)
{
    if (!std::isfinite(v))
    {
        return "null";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
}

int
main(int argc, char* argv[])
{
    Options opt;
    TypeId tid = RedQueueDisc::GetTypeId();
    for (int i = 1; i < argc; ++i)
    {
        std::string arg(argv[i]);
        if (arg == "--help" || arg == "-h")
        {
            std::cout << "usage: red_harness [--lambda=R] [--mu=R] [--ecn=P] "
                         "[--mmpp=L0,L1,R01,R10] [--duration=S] [--warmup=S] [--reps=K] "
                         "[--batches=B] [--seed=S] [--run=R] [--<RedQueueDisc attribute>=V]...\n"
                         "RedQueueDisc attributes:";
            for (std::size_t a = 0; a < tid.GetAttributeN(); ++a)
            {
                std::cout << " " << tid.GetAttribute(a).name;
            }
            std::cout << std::endl;
            return 0;
        }
        const auto eq = arg.find('=');
        if (arg.rfind("--", 0) != 0 || eq == std::string::npos)
        {
            Fail("arguments are --name=value, got '" + arg + "'");
        }
        const std::string name = arg.substr(2, eq - 2);
        const std::string value = arg.substr(eq + 1);
        if (name == "lambda")
        {
            opt.lambda = ParseDouble(name, value);
        }
        else if (name == "mu")
        {
            opt.mu = ParseDouble(name, value);
        }
        else if (name == "ecn")
        {
            opt.ecn = ParseDouble(name, value);
        }
        else if (name == "duration")
        {
            opt.duration = ParseDouble(name, value);
        }
        else if (name == "warmup")
        {
            opt.warmup = ParseDouble(name, value);
        }
        else if (name == "reps")
        {
            opt.reps = static_cast<int>(ParseDouble(name, value));
        }
        else if (name == "batches")
        {
            opt.batches = static_cast<int>(ParseDouble(name, value));
        }
        else if (name == "seed")
        {
            opt.seed = static_cast<uint32_t>(ParseDouble(name, value));
        }
        else if (name == "run")
        {
            opt.run = static_cast<uint64_t>(ParseDouble(name, value));
        }
        else if (name == "mmpp")
        {
            std::vector<double> v;
            std::stringstream ss(value);
            std::string item;
            while (std::getline(ss, item, ','))
            {
                v.push_back(ParseDouble(name, item));
            }
            if (v.size() != 4)
            {
                Fail("--mmpp needs lambda0,lambda1,r01,r10 (4 numbers), got '" + value + "'");
            }
            opt.mmpp = true;
            opt.mmppRate[0] = v[0];
            opt.mmppRate[1] = v[1];
            opt.mmppSwitch[0] = v[2];
            opt.mmppSwitch[1] = v[3];
        }
        else
        {
            TypeId::AttributeInformation info;
            if (!tid.LookupAttributeByName(name, &info))
            {
                Fail("unknown option --" + name +
                     " (neither a harness option nor a RedQueueDisc attribute; see --help)");
            }
            // ns-3 aborts (NS_FATAL) on a malformed number, naming the value but not the
            // attribute: numbers and booleans are checked here first
            const std::string type = info.checker->GetValueTypeName();
            if (type == "ns3::DoubleValue" || type == "ns3::UintegerValue" || type == "ns3::IntegerValue")
            {
                ParseDouble(name, value);
            }
            else if (type == "ns3::BooleanValue" && value != "true" && value != "false" &&
                     value != "1" && value != "0")
            {
                Fail("--" + name + " must be true or false, got '" + value + "'");
            }
            opt.attributes.emplace_back(name, value);
        }
    }
    if (!(opt.mu > 0))
    {
        Fail("--mu must be > 0, got " + std::to_string(opt.mu));
    }
    if (!opt.mmpp && !(opt.lambda > 0))
    {
        Fail("--lambda must be > 0, got " + std::to_string(opt.lambda));
    }
    if (opt.mmpp)
    {
        if (opt.mmppRate[0] < 0 || opt.mmppRate[1] < 0 || opt.mmppRate[0] + opt.mmppRate[1] <= 0)
        {
            Fail("--mmpp rates must be >= 0 and not both 0");
        }
        if (!(opt.mmppSwitch[0] > 0) || !(opt.mmppSwitch[1] > 0))
        {
            Fail("--mmpp switching rates r01, r10 must be > 0");
        }
    }
    if (opt.ecn < 0 || opt.ecn > 1)
    {
        Fail("--ecn must be in [0, 1], got " + std::to_string(opt.ecn));
    }
    if (!(opt.duration > 0) || opt.warmup < 0)
    {
        Fail("--duration must be > 0 and --warmup >= 0");
    }
    if (opt.reps < 1 || opt.batches < 1 || (opt.reps == 1 && opt.batches < 2))
    {
        Fail("--reps >= 2, or --reps=1 with --batches >= 2, is needed for a confidence interval "
             "(got reps " +
             std::to_string(opt.reps) + ", batches " + std::to_string(opt.batches) + ")");
    }

    const auto wallStart = std::chrono::steady_clock::now();
    const int windowsPerRep = opt.reps == 1 ? opt.batches : 1;
    std::vector<std::map<std::string, double>> samples;
    Window grand;
    std::vector<std::pair<std::string, std::string>> attrs;
    double ptc = 0;
    double qw = 0;
    for (int r = 0; r < opt.reps; ++r)
    {
        Replication rep(opt, opt.run + r, windowsPerRep);
        rep.Run();
        for (const Window& w : rep.Windows())
        {
            samples.push_back(MetricsOf(w));
        }
        grand.arrivals += rep.Total().arrivals;
        if (r == 0)
        {
            attrs = rep.AttributeValues();
            ptc = rep.Ptc();
            qw = rep.QW();
        }
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();

    std::ostringstream out;
    out << "{\n  \"ns3_version\": \"3.44\",\n  \"harness\": \"red_harness\",\n";
    out << "  \"lambda\": " << JsonNumber(opt.mmpp ? NAN : opt.lambda) << ",\n";
    if (opt.mmpp)
    {
        out << "  \"mmpp\": [" << JsonNumber(opt.mmppRate[0]) << ", " << JsonNumber(opt.mmppRate[1])
            << ", " << JsonNumber(opt.mmppSwitch[0]) << ", " << JsonNumber(opt.mmppSwitch[1])
            << "],\n";
    }
    out << "  \"mu\": " << JsonNumber(opt.mu) << ",\n";
    out << "  \"ecn\": " << JsonNumber(opt.ecn) << ",\n";
    out << "  \"duration\": " << JsonNumber(opt.duration) << ",\n";
    out << "  \"warmup\": " << JsonNumber(opt.warmup) << ",\n";
    out << "  \"reps\": " << opt.reps << ",\n  \"batches\": " << windowsPerRep << ",\n";
    out << "  \"ci_method\": "
        << JsonString(opt.reps > 1 ? "independent replications" : "batch means") << ",\n";
    out << "  \"seed\": " << opt.seed << ",\n  \"run\": " << opt.run << ",\n";
    out << "  \"ptc\": " << JsonNumber(ptc) << ",\n  \"qw_effective\": " << JsonNumber(qw) << ",\n";
    out << "  \"arrivals_simulated\": " << JsonNumber(grand.arrivals) << ",\n";
    out << "  \"wall_seconds\": " << JsonNumber(wall) << ",\n";
    out << "  \"stats_check\": \"ok\",\n";
    out << "  \"attributes\": {";
    for (std::size_t i = 0; i < attrs.size(); ++i)
    {
        out << (i ? ", " : "") << JsonString(attrs[i].first) << ": " << JsonString(attrs[i].second);
    }
    out << "},\n  \"metrics\": {\n";
    for (std::size_t m = 0; m < kMetrics.size(); ++m)
    {
        const std::string& name = kMetrics[m];
        double sum = 0;
        int n = 0;
        for (const auto& s : samples)
        {
            if (std::isfinite(s.at(name)))
            {
                sum += s.at(name);
                ++n;
            }
        }
        const double mean = n ? sum / n : NAN;
        double ss = 0;
        for (const auto& s : samples)
        {
            if (std::isfinite(s.at(name)))
            {
                ss += (s.at(name) - mean) * (s.at(name) - mean);
            }
        }
        const double hw = n > 1 ? TQuantile975(n - 1) * std::sqrt(ss / (n - 1) / n) : NAN;
        out << "    " << JsonString(name) << ": {\"mean\": " << JsonNumber(mean)
            << ", \"half_width\": " << JsonNumber(hw) << ", \"n\": " << n << "}"
            << (m + 1 < kMetrics.size() ? ",\n" : "\n");
    }
    out << "  }\n}\n";
    std::cout << out.str();
    return 0;
}
