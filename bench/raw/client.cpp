// The initiator side: connects, then for each size runs a warm-up and a
// measured loop keeping `qd` operations outstanding, timing every operation
// from its post to its completion.
#include "engine.hpp"
#include "fabric.hpp"

#include "perf_report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace rbench {
namespace {

using remora::perf::Measurement;
using remora::perf::now_ns;
using remora::tools::cpu_seconds;

constexpr std::chrono::seconds kConnectTimeout{10};
constexpr std::chrono::seconds kStallTimeout{10};
constexpr std::chrono::seconds kProgressAfter{2};
constexpr std::uint64_t kLocalKey = 0x4c4f434c;
constexpr ssize_t kBatch = 32;
#ifdef REMORA_PERF_VERSION
constexpr std::string_view kRemoraVersion = REMORA_PERF_VERSION;
#else
constexpr std::string_view kRemoraVersion = "unknown";
#endif

struct Slot {
  fi_context2 ctx;  // first member: the completion's op_context points here
  std::uint64_t t_post = 0;
};

class Client {
 public:
  explicit Client(const Config& cfg) : cfg_(cfg), max_size_(*std::max_element(cfg.sizes.begin(), cfg.sizes.end())) {}

  void run() {
    connect();
    remora::perf::Report report({kEngine, op_name(cfg_.op), completion_name(cfg_)}, cfg_.qd, cfg_.json,
                                cfg_.report_gbits);
    const std::uint32_t fv = fi_version();
    const remora::perf::RunSettings rs{"remora-bench-raw",
                                       kEngine,
                                       kRemoraVersion,
                                       std::to_string(FI_MAJOR(fv)) + "." + std::to_string(FI_MINOR(fv)),
                                       {},
                                       completion_name(cfg_),
                                       server_busy_poll_ ? "busy-poll" : "asleep"};
    report.set_settings(remora::perf::common_settings(cfg_, rs).text());
    report.begin();
    for (const std::size_t size : cfg_.sizes) {
      Measurement m;
      if (cfg_.duration != 0) {
        // -D: a short time-bounded warm-up, then the run for that long.
        const auto ns = [](double s) { return static_cast<std::uint64_t>(s * 1e9); };
        (void)measure(size, remora::perf::kMaxIters, false, ns(remora::perf::warmup_seconds(cfg_.duration)));
        m = measure(size, remora::perf::kMaxIters, true, ns(cfg_.duration));
      } else {
        const std::uint64_t iters = cfg_.iters ? cfg_.iters : default_iters(cfg_.op, size);
        (void)measure(size, remora::perf::warmup_iters(iters), false);
        m = measure(size, iters, true);
      }
      report.add(m);
    }
    disconnect();
  }

 private:
  void connect() {
    const std::string port = std::to_string(cfg_.port);
    info_ = get_info(cfg_.provider, cfg_.host, port, false);
    if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT)
      throw BenchError("provider needs FI_MR_ENDPOINT, not supported by this benchmark");
    if (cfg_.op == Op::write_flush_persistent && !(info_->caps & FI_RMA_PMEM))
      throw BenchError("provider " + cfg_.provider +
                       " has no FI_RMA_PMEM: write_flush_persistent (FI_COMMIT_COMPLETE) "
                       "is not available");
    fid_fabric* fabric = nullptr;
    check(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    check(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
    domain_.reset(domain);
    eq_ = open_eq(fabric_.get());
    cq_ = open_cq(domain_.get(), std::max<std::size_t>(cfg_.qd, 64) + 64, cfg_.wait);

    local_ = allocate_buffer(max_size_);
    local_mr_ =
        register_memory(domain_.get(), local_.get(), max_size_, FI_WRITE | FI_READ | FI_SEND | FI_RECV, kLocalKey);
    desc_ = fi_mr_desc(local_mr_.get());

    fid_ep* ep = nullptr;
    check(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    check(fi_ep_bind(ep_.get(), &eq_->fid, 0), "fi_ep_bind(eq)");
    check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_enable(ep_.get()), "fi_enable");

    ConnectRequest req;
    req.want_recvs = cfg_.op == Op::send ? 1 : 0;
    req.qd = cfg_.qd;
    req.max_size = max_size_;
    check(fi_connect(ep_.get(), info_->dest_addr, &req, sizeof req), "fi_connect");
    const std::string what = "connecting to " + cfg_.host + ":" + port;
    CmEvent ev = wait_cm_event(eq_.get(), kConnectTimeout, what.c_str());
    if (ev.event != FI_CONNECTED) throw BenchError(what + ": unexpected event " + std::to_string(ev.event));
    AcceptReply reply;
    if (ev.data.size() < sizeof reply)
      throw BenchError(what +
                       ": the server sent no buffer description (not a "
                       "remora-bench-raw server?)");
    std::memcpy(&reply, ev.data.data(), sizeof reply);
    if (reply.magic != kMagic || reply.version != kVersion)
      throw BenchError(what +
                       ": the server is not a remora-bench-raw server of this "
                       "version");
    if (reply.len < max_size_) throw BenchError(what + ": the server's buffer is smaller than --size");
    remote_addr_ = reply.addr;
    remote_key_ = reply.key;
    server_busy_poll_ = (reply.reserved & kServerBusyPoll) != 0;
  }

  void disconnect() { check(fi_shutdown(ep_.get(), 0), "fi_shutdown"); }

  ssize_t post(Slot& slot, std::size_t size) {
    void* buf = local_.get();
    iovec iov{buf, size};
    fi_rma_iov rma{remote_addr_, size, remote_key_};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc_;
    msg.iov_count = 1;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &slot.ctx;
    switch (cfg_.op) {
      case Op::write:
        if (cfg_.completion == Completion::standard)
          return fi_write(ep_.get(), buf, size, desc_, 0, remote_addr_, remote_key_, &slot.ctx);
        return fi_writemsg(ep_.get(), &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
      case Op::read: return fi_read(ep_.get(), buf, size, desc_, 0, remote_addr_, remote_key_, &slot.ctx);
      case Op::write_flush_visibility:
      case Op::atomic_write: return fi_writemsg(ep_.get(), &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
      case Op::write_flush_persistent: return fi_writemsg(ep_.get(), &msg, FI_COMPLETION | FI_COMMIT_COMPLETE);
      case Op::send: {
        if (cfg_.completion == Completion::standard) return fi_send(ep_.get(), buf, size, desc_, 0, &slot.ctx);
        fi_msg smsg{};
        smsg.msg_iov = &iov;
        smsg.desc = &desc_;
        smsg.iov_count = 1;
        smsg.context = &slot.ctx;
        return fi_sendmsg(ep_.get(), &smsg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
      }
    }
    return -FI_EINVAL;
  }

  [[noreturn]] void fail_completion(std::size_t size) {
    throw BenchError(std::string(op_name(cfg_.op)) + " of " + std::to_string(size) + " bytes failed: " +
                     cq_error_text(cq_.get()) + (shutdown_seen(eq_.get()) ? "; the connection is closed" : ""));
  }

  // Runs `iters` operations; with budget_ns non-zero (-D), stops posting
  // once that much time passed.
  Measurement measure(std::size_t size, std::uint64_t iters, bool measured, std::uint64_t budget_ns = 0) {
    const unsigned qd = cfg_.qd;
    std::vector<Slot> slots(qd);
    std::vector<Slot*> free_slots;
    free_slots.reserve(qd);
    for (auto& s : slots) free_slots.push_back(&s);

    Measurement m;
    m.size = size;
    m.qd = qd;
    m.lat_ns.reserve(std::min<std::uint64_t>(iters, std::uint64_t{1} << 22));

    std::uint64_t posted = 0;
    std::uint64_t done = 0;
    std::uint64_t empty_polls = 0;
    const double cpu_start = cpu_seconds();
    const std::uint64_t t_start = now_ns();
    std::uint64_t t_last = t_start;
    std::uint64_t next_report = t_start + std::chrono::nanoseconds(kProgressAfter).count();
    fi_cq_entry entries[kBatch];

    std::uint64_t limit = iters;
    while (done < limit || done < posted) {
      while (posted < limit && !free_slots.empty()) {
        Slot* slot = free_slots.back();
        const std::uint64_t t = now_ns();
        const ssize_t rc = post(*slot, size);
        if (rc == -FI_EAGAIN) break;  // queue full: reap completions first
        if (rc != 0) {
          check(rc, ("posting " + std::string(op_name(cfg_.op))).c_str());
        }
        slot->t_post = t;
        free_slots.pop_back();
        ++posted;
      }
      ssize_t n = fi_cq_read(cq_.get(), entries, kBatch);
      // --wait: nothing ready, so sleep on the queue's fd (100 ms slices).
      if (n == -FI_EAGAIN && cfg_.wait && posted > done) n = fi_cq_sread(cq_.get(), entries, kBatch, nullptr, 100);
      if (n > 0) {
        const std::uint64_t t = now_ns();
        for (ssize_t i = 0; i < n; ++i) {
          auto* slot = static_cast<Slot*>(entries[i].op_context);
          m.lat_ns.push_back(t - slot->t_post);
          free_slots.push_back(slot);
        }
        done += static_cast<std::uint64_t>(n);
        t_last = t;
        empty_polls = 0;
        if (budget_ns != 0 && t - t_start >= budget_ns) limit = posted;
        if (measured && t >= next_report && done < limit) {
          remora::perf::print_progress("remora-bench-raw", op_name(cfg_.op), size, done, limit,
                                       static_cast<double>(t - t_start) / 1e9, cfg_.duration);
          next_report = t + 1'000'000'000;
        }
      } else if (n == -FI_EAVAIL) {
        fail_completion(size);
      } else if (n != -FI_EAGAIN) {
        check(n, "fi_cq_read");
      } else if (++empty_polls % 4096 == 0) {
        const std::uint64_t t = now_ns();
        if (t - t_last > static_cast<std::uint64_t>(std::chrono::nanoseconds(kStallTimeout).count())) {
          throw BenchError(std::string(op_name(cfg_.op)) + " of " + std::to_string(size) +
                           " bytes: no completion for " + std::to_string(kStallTimeout.count()) + " s (" +
                           std::to_string(posted - done) + " outstanding); is the target making progress?");
        }
        if (shutdown_seen(eq_.get())) throw BenchError("the server closed the connection");
      }
    }
    m.iters = done;
    m.seconds = static_cast<double>(t_last - t_start) / 1e9;
    m.cpu_seconds = cpu_seconds() - cpu_start;
    return m;
  }

  const Config& cfg_;
  const std::size_t max_size_;
  Info info_;
  Fid<fid_fabric> fabric_;
  Fid<fid_domain> domain_;
  Fid<fid_eq> eq_;
  Fid<fid_cq> cq_;
  Buffer local_;
  Fid<fid_mr> local_mr_;
  Fid<fid_ep> ep_;
  void* desc_ = nullptr;
  std::uint64_t remote_addr_ = 0;
  std::uint64_t remote_key_ = 0;
  bool server_busy_poll_ = false;
};

}  // namespace

void run_client(const Config& cfg) {
  Client client(cfg);
  client.run();
}

}  // namespace rbench
