// remora-check: spec parsing, the process-wide report (stderr lines, JSON
// file, summary and exit status at exit), and the checks themselves
// (docs/check.md). Nothing here runs unless a fabric was opened with some
// check on.
#include "check/check.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "check/face.hpp"
#include "core/impl.hpp"

namespace remora::detail::check {
namespace {

// ------------------------------------------------------------ ranges

/// Disjoint, sorted half-open ranges.
struct Ranges {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> v;
  void add(std::uint64_t a, std::uint64_t b) {
    if (a >= b) return;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (auto [x, y] : v) {
      if (y < a || x > b) {
        out.emplace_back(x, y);
      } else {
        a = std::min(a, x);
        b = std::max(b, y);
      }
    }
    out.emplace_back(a, b);
    std::sort(out.begin(), out.end());
    v = std::move(out);
  }
  void subtract(std::uint64_t a, std::uint64_t b) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (auto [x, y] : v) {
      if (y <= a || x >= b) {
        out.emplace_back(x, y);
        continue;
      }
      if (x < a) out.emplace_back(x, a);
      if (y > b) out.emplace_back(b, y);
    }
    v = std::move(out);
  }
  bool empty() const noexcept { return v.empty(); }
};

/// The ranges where `a` and `b` differ (bytes [0, n)).
Ranges diff(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
  Ranges r;
  std::size_t i = 0;
  while (i < n) {
    if (a[i] == b[i]) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < n && a[j] != b[j]) ++j;
    r.v.emplace_back(i, j);
    i = j;
  }
  return r;
}

/// True when [p, p+n) is mapped (msync validates without touching it).
bool mapped(const void* p, std::size_t n) noexcept {
  static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t start = a & ~(page - 1);
  const std::uintptr_t end = (a + n + page - 1) & ~(page - 1);
  return msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) == 0;
}

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string region_name(std::uint64_t key, const void* base) {
  return "key=" + hex(key) + "@" + hex(reinterpret_cast<std::uintptr_t>(base));
}

// ------------------------------------------------------------ the report

/// A write to a persistent region, completed, with the bytes no completed
/// PERSISTENT flush posted after it has covered yet.
struct PendingWrite {
  std::uint64_t seq = 0, cookie = 0, rkey = 0, rbase = 0, endpoint = 0;
  Ranges uncovered;  // remote addresses
};

struct Global {
  std::mutex mu;
  std::vector<Finding> list;
  std::string report_path;
  int exit_code = 99;
  bool armed = false;  // the at-exit summary is registered
  std::set<RegionState*> regions;
  std::map<std::uint64_t, std::uint64_t> next_seq;            // per endpoint
  std::map<std::uint64_t, std::vector<PendingWrite>> writes;  // per endpoint
  unsigned next_region = 0;
  // Check 1: writes completed in this process (key, remote range, cookie),
  // to name the cookie of an unsynced incoming write; the latest 4096.
  struct Origin {
    std::uint64_t key, addr, len, cookie, endpoint;
  };
  std::deque<Origin> origins;
};

// Never destroyed: the at-exit summary and late region closes use it.
Global& global() {
  static Global* g = new Global;
  return *g;
}

void report_unflushed(std::uint64_t endpoint);  // below
void finish_region(RegionState& st);            // below

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o;
}

void at_exit() {
  Global& g = global();
  std::vector<std::uint64_t> eps;
  std::vector<RegionState*> regions;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (auto& [id, w] : g.writes) eps.push_back(id);
    regions.assign(g.regions.begin(), g.regions.end());
  }
  for (auto id : eps) report_unflushed(id);
  for (auto* r : regions) finish_region(*r);
  std::lock_guard<std::mutex> lock(g.mu);
  std::map<std::string, std::size_t> by;
  for (const auto& f : g.list) ++by[f.check];
  std::string counts;
  for (const auto& [k, n] : by) counts += (counts.empty() ? "" : ", ") + k + " " + std::to_string(n);
  std::fprintf(stderr, "remora-check: summary: %zu finding%s%s%s%s\n", g.list.size(), g.list.size() == 1 ? "" : "s",
               counts.empty() ? "" : " (", counts.c_str(), counts.empty() ? "" : ")");
  if (!g.report_path.empty()) {
    if (FILE* f = std::fopen(g.report_path.c_str(), "w")) {
      std::fprintf(f, "{\"findings\":[");
      for (std::size_t i = 0; i < g.list.size(); ++i) {
        const Finding& x = g.list[i];
        std::fprintf(f,
                     "%s\n {\"check\":\"%s\",\"kind\":\"%s\",\"message\":\"%s\",\"cookie\":%s,\"endpoint\":%llu,"
                     "\"region\":\"%s\",\"offset\":%llu,\"length\":%llu}",
                     i ? "," : "", json_escape(x.check).c_str(), json_escape(x.kind).c_str(),
                     json_escape(x.message).c_str(), x.has_cookie ? std::to_string(x.cookie).c_str() : "null",
                     static_cast<unsigned long long>(x.endpoint), json_escape(x.region).c_str(),
                     static_cast<unsigned long long>(x.offset), static_cast<unsigned long long>(x.length));
      }
      std::fprintf(f, "\n],\"summary\":{\"findings\":%zu", g.list.size());
      for (const auto& [k, n] : by) std::fprintf(f, ",\"%s\":%zu", k.c_str(), n);
      std::fprintf(f, "}}\n");
      std::fclose(f);
    } else {
      std::fprintf(stderr, "remora-check: cannot write the report %s: %s\n", g.report_path.c_str(),
                   std::strerror(errno));
    }
  }
  if (!g.list.empty() && g.exit_code != 0) {
    std::fflush(nullptr);
    _exit(g.exit_code);
  }
}

bool parse_long(std::string_view s, long& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

thread_local FaceCookieSlot face_cookie;

// ------------------------------------------------------------ spec

Result<void> parse(std::string_view spec, Config& c) {
  while (!spec.empty()) {
    auto comma = spec.find(',');
    std::string_view w = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (w.empty() || w == "0" || w == "off" || w == "none") continue;
    auto eq = w.find('=');
    std::string_view key = w.substr(0, eq), val = eq == std::string_view::npos ? "" : w.substr(eq + 1);
    if (w == "reuse") {
      c.reuse = true;
    } else if (w == "strict" || w == "reuse=strict") {
      c.reuse = c.strict = true;
    } else if (w == "crash") {
      c.crash = true;
    } else if (w == "noncoherent") {
      c.noncoherent = true;
    } else if (w == "coherent") {
      c.coherent = true;
    } else if (w == "all" || w == "1") {
      c.reuse = c.crash = c.noncoherent = true;
    } else if (key == "report" && !val.empty()) {
      c.report = std::string(val);
    } else if (key == "crash_dir" && !val.empty()) {
      c.crash = true;
      c.crash_dir = std::string(val);
    } else if (key == "crash_at" || key == "crash") {
      long n = 0;
      if (val == "end") {
        c.crash_at = 0;
      } else if (val == "all" || val == "every") {
        c.crash_at = -1;
      } else if (val == "random") {
        c.crash_at = -2;
      } else if (parse_long(val, n) && n > 0) {
        c.crash_at = n;
      } else {
        return Errc::invalid_argument;
      }
      c.crash = true;
    } else if (key == "exitcode") {
      long n = 0;
      if (!parse_long(val, n) || n < 0 || n > 255) return Errc::invalid_argument;
      c.exit_code = static_cast<int>(n);
    } else {
      return Errc::invalid_argument;
    }
  }
  return {};
}

Result<std::shared_ptr<Checker>> make(const std::string& spec) {
  Config c;
  if (const char* env = std::getenv("REMORA_CHECK"); env != nullptr && *env != '\0') {
    Config e;
    if (parse(env, e))
      c = e;
    else
      std::fprintf(stderr, "remora-check: REMORA_CHECK=\"%s\" not understood, checking off (docs/check.md)\n", env);
  }
  if (!parse(spec, c)) return Errc::invalid_argument;
  if (const char* env = std::getenv("REMORA_CHECK_REPORT"); env != nullptr && *env != '\0') c.report = env;
  if (c.coherent && c.noncoherent) {
    // Emulated non-coherent memory shows poison until the program syncs,
    // and this program has no call to sync with (librpma's face says so).
    c.noncoherent = false;
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr,
                   "remora-check: noncoherent is off: this program's API assumes coherent memory and has no sync call "
                   "(docs/check.md)\n");
  }
  if (!c.any()) return std::shared_ptr<Checker>{};
  Global& g = global();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (!c.report.empty()) g.report_path = c.report;
    g.exit_code = c.exit_code;
    if (!g.armed) {
      g.armed = true;
      // Registered before any zone's agent is started, so it runs after
      // the agents stopped (atexit runs in reverse order).
      std::atexit(at_exit);
    }
  }
  return std::make_shared<Checker>(std::move(c));
}

// ------------------------------------------------------------ report

std::string format_line(const Finding& f) {
  std::string s = "remora-check: " + f.check + ": " + f.message;
  s += " [";
  s += f.has_cookie ? "cookie=" + hex(f.cookie) : std::string("cookie=unknown");
  if (f.endpoint) s += " endpoint=" + std::to_string(f.endpoint);
  if (!f.region.empty()) s += " region=" + f.region;
  s += " range=" + std::to_string(f.offset) + "+" + std::to_string(f.length) + "]";
  return s;
}

void report(Finding f) {
  std::string line = format_line(f) + "\n";
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  std::fputs(line.c_str(), stderr);
  g.list.push_back(std::move(f));
}

std::size_t findings() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.list.size();
}

// ------------------------------------------------------------ records

struct SegCopy {
  std::uint8_t* user = nullptr;
  std::size_t len = 0;
  std::uint64_t key = 0;
  const void* base = nullptr;  // the region's start
  std::vector<std::uint8_t> copy;
};

struct OpRecord {
  std::uint64_t cookie = 0;
  std::uint64_t endpoint = 0;  // Endpoint::id
  Opcode opcode = Opcode::write;
  bool gather = false;   // write or send: the memory is read by the transport
  bool scatter = false;  // read: the memory is written at completion
  bool reported = false;
  bool reaped = false;  // the consumer reaps a completion of its own (signalled)
  std::vector<SegCopy> segs;
  std::vector<std::uint8_t> staging;
  std::unique_ptr<backend::MemoryKey> staging_key;
  // Persistence (initiator side of check 3).
  std::uint64_t seq = 0;  // nonzero: a write to, or a PERSISTENT flush of, a persistent region
  std::uint64_t rkey = 0, rbase = 0, raddr = 0, rlen = 0;
  bool persistent_flush = false;
  // Check 1: an outgoing read's data lands in these regions at completion;
  // a write's remote range is remembered to name its cookie at the target.
  std::vector<std::pair<std::shared_ptr<const RegionImpl>, std::pair<std::uint8_t*, std::size_t>>> nc_dest;
  bool nc_write = false;
  std::uint64_t nc_key = 0, nc_addr = 0, nc_len = 0;
};

void OpRecordFree::operator()(OpRecord* r) const noexcept { delete r; }

struct RegionState {
  std::mutex mu;
  unsigned index = 0;
  std::uint64_t key = 0;
  std::uint8_t* base = nullptr;
  std::size_t len = 0;
  bool finished = false;
  // check 3
  bool crash = false;
  std::vector<std::uint8_t> durable;  // what a power loss now would leave
  std::uint64_t events = 0;           // PERSISTENT flushes applied
  std::mt19937_64 rng{std::random_device{}()};
  // check 1
  bool nc = false;
  std::vector<std::uint8_t> seen;   // memory as the checker last left it
  std::vector<std::uint8_t> stash;  // incoming bytes not yet synced (valid in `pending`)
  std::vector<std::uint8_t> nic;    // what the device sees of the memory (synced CPU writes)
  Ranges pending;                   // incoming, not synced: poisoned in memory
  bool remote_write = false;        // incoming writes can land (scanned)
  Config config;
};

void RegionStateFree::operator()(RegionState* r) const noexcept { delete r; }

namespace {

constexpr std::uint8_t kPoison = 0xA5;

/// Compare each segment of `r` with its copy; report the first difference.
void compare(OpRecord& r, const char* kind, const char* what) {
  if (r.reported) return;
  for (std::size_t i = 0; i < r.segs.size(); ++i) {
    SegCopy& s = r.segs[i];
    if (!mapped(s.user, s.len)) continue;
    Ranges d = diff(s.user, s.copy.data(), s.len);
    if (d.empty()) continue;
    const auto off = static_cast<std::uint64_t>(s.user - static_cast<const std::uint8_t*>(s.base));
    Finding f;
    f.check = "reuse";
    f.kind = kind;
    f.message = std::string(to_string(r.opcode)) + ": " + what + " (segment " + std::to_string(i) + ")";
    f.has_cookie = true;
    f.cookie = r.cookie;
    f.endpoint = r.endpoint;
    f.region = region_name(s.key, s.base);
    f.offset = off + d.v.front().first;
    f.length = d.v.back().second - d.v.front().first;
    report(std::move(f));
    r.reported = true;
    return;
  }
}

void write_image(const RegionState& st, const std::string& dir, const std::string& tag) {
  if (dir.empty()) return;
  std::string path = dir + "/crash-r" + std::to_string(st.index) + "-" + tag + ".img";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(st.durable.data(), 1, st.durable.size(), f) != st.durable.size())
    std::fprintf(stderr, "remora-check: cannot write the crash image %s\n", path.c_str());
  if (f) std::fclose(f);
}

/// Check 1: the bytes a device placed in [a, b) of the region (an incoming
/// write, an outgoing read's data) move to the stash, and the memory shows
/// poison there until the consumer syncs.
void land(RegionState& st, std::uint64_t a, std::uint64_t b) {
  std::memcpy(st.stash.data() + a, st.base + a, b - a);
  std::memcpy(st.nic.data() + a, st.base + a, b - a);
  std::memset(st.base + a, kPoison, b - a);
  std::memcpy(st.seen.data() + a, st.base + a, b - a);
  st.pending.add(a, b);
}

/// Check 1: incoming writes that landed in [from, to) since the last look
/// (every change there is taken for one: a scan runs when a message arrives
/// behind them on the ordered connection, or at a sync).
void scan(RegionState& st, std::size_t from, std::size_t to) {
  if (!st.nc || !st.remote_write || st.finished || !mapped(st.base, st.len)) return;
  Ranges d = diff(st.base + from, st.seen.data() + from, to - from);
  for (auto [x, y] : d.v) {
    const std::uint64_t a = x + from, b = y + from;
    land(st, a, b);
  }
}
void scan(RegionState& st) { scan(st, 0, st.len); }

void report_unflushed(std::uint64_t endpoint) {
  std::vector<PendingWrite> ws;
  {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    auto it = g.writes.find(endpoint);
    if (it == g.writes.end()) return;
    ws = std::move(it->second);
    g.writes.erase(it);
    g.next_seq.erase(endpoint);
  }
  for (const auto& w : ws) {
    for (auto [a, b] : w.uncovered.v) {
      Finding f;
      f.check = "crash";
      f.kind = "write_not_flushed";
      f.message = "write to a persistent region never covered by a completed PERSISTENT flush (lost on a crash)";
      f.has_cookie = true;
      f.cookie = w.cookie;
      f.endpoint = w.endpoint;
      f.region = "key=" + hex(w.rkey) + "@" + hex(w.rbase);
      f.offset = a - w.rbase;
      f.length = b - a;
      report(std::move(f));
    }
  }
}

/// The cookie of the write (or read) that put device data at [a, b) of
/// the region, when it was posted in this process. True: an outgoing read.
bool name_origin(const RegionState& st, std::uint64_t a, std::uint64_t b, Finding& f) {
  const auto base = reinterpret_cast<std::uintptr_t>(st.base);
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto it = g.origins.rbegin(); it != g.origins.rend(); ++it) {
    const bool same = it->key == st.key || it->key == 0;
    if (same && it->addr < base + b && base + a < it->addr + it->len) {
      f.has_cookie = true;
      f.cookie = it->cookie;
      f.endpoint = it->endpoint;
      return it->key == 0;
    }
  }
  return false;
}

void finish_region(RegionState& st) {
  std::vector<Finding> out;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.finished) return;
    const bool live = mapped(st.base, st.len);
    st.finished = true;
    for (auto [a, b] : st.pending.v) {
      Finding f;
      const bool read = name_origin(st, a, b, f);
      f.check = "noncoherent";
      f.kind = read ? "read_data_not_synced" : "incoming_write_not_synced";
      f.message = std::string(read ? "data of an RDMA read" : "incoming RDMA write") +
                  " never made visible with dat_lmr_sync_rdma_write (the memory holds poison)";
      f.region = region_name(st.key, st.base);
      f.offset = a;
      f.length = b - a;
      out.push_back(std::move(f));
      if (live) std::memcpy(st.base + a, st.stash.data() + a, b - a);  // leave the data, as a sync would
    }
    if (st.crash && live) {
      Ranges lost = diff(st.base, st.durable.data(), st.len);
      for (auto [a, b] : lost.v) {
        Finding f;
        f.check = "crash";
        f.kind = "lost_on_crash";
        f.message = "bytes of a persistent region not covered by a completed PERSISTENT flush at its close";
        f.region = region_name(st.key, st.base);
        f.offset = a;
        f.length = b - a;
        out.push_back(std::move(f));
      }
      if (st.config.crash_at == 0 || st.config.crash_at == -1) write_image(st, st.config.crash_dir, "end");
      if (st.config.crash_at == -2 && st.rng() % (st.events + 1) == 0) write_image(st, st.config.crash_dir, "random");
    }
  }
  {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    g.regions.erase(&st);
  }
  for (auto& f : out) report(std::move(f));
}

}  // namespace

// ------------------------------------------------------------ engine hooks

namespace {

/// The region of the i-th local segment of `op` (checked by the handle
/// layer: valid, in the endpoint's zone).
const RegionImpl* region_of(const Operation& op, std::size_t i) {
  if (op.segments == nullptr || op.segments[i].region == nullptr) return nullptr;
  return op.segments[i].region->impl().get();
}

}  // namespace

void Checker::on_post(EndpointImpl& ep, OpSlot& s, const Operation& op) {
  // The consumer's cookie: a C face may post with a token of its own.
  const std::uint64_t cookie = face_cookie.set ? face_cookie.cookie : s.done.cookie;
  const bool rma = op.opcode == Opcode::write || op.opcode == Opcode::read;
  const bool gather = op.opcode == Opcode::write || op.opcode == Opcode::send;
  const bool pflush =
      op.opcode == Opcode::flush && op.ctl.flush_type == static_cast<std::uint8_t>(FlushType::persistent);
  const bool persist_track = config_.crash && op.remote_persistent && (op.opcode == Opcode::write || pflush);
  const bool copy = config_.reuse && op.local != nullptr && op.local->total > 0 && (rma || gather);
  // Check 1, outgoing: the device reads the memory as the consumer last
  // synced it; a local write since then that no dat_lmr_sync_rdma_read made
  // visible would not be sent.
  if (config_.noncoherent && gather && op.local != nullptr) {
    for (std::size_t i = 0; i < op.local->count; ++i) {
      const RegionImpl* r = region_of(op, i);
      if (r == nullptr || !r->check) continue;
      RegionState& st = *r->check;
      std::lock_guard<std::mutex> lock(st.mu);
      if (!st.nc) continue;
      auto* p = static_cast<std::uint8_t*>(op.local->iov[i].addr);
      const std::size_t off = static_cast<std::size_t>(p - st.base), n = op.local->iov[i].len;
      Ranges d = diff(p, st.nic.data() + off, n);
      if (d.empty()) continue;
      Finding f;
      f.check = "noncoherent";
      f.kind = "local_write_not_synced";
      f.message = std::string(to_string(op.opcode)) +
                  ": gather memory written by the CPU and not made visible with dat_lmr_sync_rdma_read before the post";
      f.has_cookie = true;
      f.cookie = cookie;
      f.endpoint = ep.id;
      f.region = region_name(st.key, st.base);
      f.offset = off + d.v.front().first;
      f.length = d.v.back().second - d.v.front().first;
      report(std::move(f));
    }
  }
  const bool nc_track = config_.noncoherent && rma && op.local != nullptr;
  if (!copy && !persist_track && !nc_track) return;
  RecordPtr rec(new OpRecord);
  rec->cookie = cookie;
  rec->endpoint = ep.id;
  rec->opcode = op.opcode;
  rec->reaped = s.signalled && !(face_cookie.set && face_cookie.suppressed);
  if (copy) {
    rec->gather = gather;
    rec->scatter = op.opcode == Opcode::read;
    for (std::size_t i = 0; i < op.local->count; ++i) {
      SegCopy c;
      c.user = static_cast<std::uint8_t*>(op.local->iov[i].addr);
      c.len = op.local->iov[i].len;
      if (const RegionImpl* r = region_of(op, i)) {
        c.key = r->key;
        c.base = r->base;
      }
      c.copy.assign(c.user, c.user + c.len);
      rec->segs.push_back(std::move(c));
    }
    // Strict: a write or send carries the data as it was at post time; a
    // read lands in staging and reaches the consumer's memory at completion,
    // so a change made meanwhile is seen there, whatever the timing.
    if (config_.strict || rec->scatter) {
      rec->staging.resize(op.local->total);
      auto key = ep.zone->domain->register_memory(rec->staging.data(), rec->staging.size(),
                                                  Access::local_read | Access::local_write, ep.zone->random_key());
      if (key) {
        rec->staging_key = std::move(*key);
        std::size_t at = 0;
        for (std::size_t i = 0; i < s.iov_count; ++i) {
          if (gather) std::memcpy(rec->staging.data() + at, s.iov[i].addr, s.iov[i].len);
          s.iov[i].addr = rec->staging.data() + at;
          s.iov[i].desc = rec->staging_key->desc();
          at += s.iov[i].len;
        }
      } else {
        // The consumer's memory is used as is; a read then writes it before
        // the completion, so it cannot be compared.
        rec->staging.clear();
        rec->scatter = false;
      }
    }
  }
  if (nc_track) {
    if (op.opcode == Opcode::read) {
      for (std::size_t i = 0; i < op.local->count; ++i)
        if (const RegionImpl* r = region_of(op, i); r != nullptr && r->check)
          rec->nc_dest.emplace_back(
              r->shared_from_this(),
              std::make_pair(static_cast<std::uint8_t*>(op.local->iov[i].addr), op.local->iov[i].len));
    } else {
      rec->nc_write = true;
      rec->nc_key = op.rkey;
      rec->nc_addr = op.raddr;
      rec->nc_len = op.length;
    }
  }
  if (persist_track) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    rec->seq = ++g.next_seq[ep.id];
    rec->rkey = op.opcode == Opcode::write ? op.rkey : op.ctl.key;
    rec->rbase = op.remote_base;
    rec->raddr = op.opcode == Opcode::write ? op.raddr : op.ctl.addr;
    rec->rlen = op.opcode == Opcode::write ? op.length : op.ctl.len;
    rec->persistent_flush = pflush;
  }
  s.check = std::move(rec);
}

void Checker::on_take(EndpointImpl&, OpSlot& s) {
  if (s.check->gather)
    compare(*s.check, "changed_before_transport", "gather memory changed after the post, before the transport took it");
}

RecordPtr Checker::on_complete(EndpointImpl& ep, OpSlot& s) {
  OpRecord& r = *s.check;
  if (r.gather) compare(r, "changed_before_completion", "gather memory changed before the completion");
  if (r.scatter) {
    compare(r, "changed_before_completion", "scatter memory written by the consumer before the completion");
    if (!s.done.status && !r.staging.empty()) {
      std::size_t at = 0;
      for (auto& seg : r.segs) {
        std::memcpy(seg.user, r.staging.data() + at, seg.len);
        at += seg.len;
      }
    }
  }
  if (r.nc_write && !s.done.status) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    g.origins.push_back({r.nc_key, r.nc_addr, r.nc_len, r.cookie, ep.id});
    if (g.origins.size() > 4096) g.origins.pop_front();
  }
  if (!r.nc_dest.empty() && !s.done.status) {
    // The read's data is in memory now; on non-coherent memory the CPU sees
    // it only after dat_lmr_sync_rdma_write.
    for (auto& [reg, seg] : r.nc_dest) {
      RegionState& st = *reg->check;
      std::lock_guard<std::mutex> lock(st.mu);
      if (!st.nc || st.finished) continue;
      const auto off = static_cast<std::uint64_t>(seg.first - st.base);
      land(st, off, off + seg.second);
    }
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    for (auto& [reg, seg] : r.nc_dest)
      g.origins.push_back({0, reinterpret_cast<std::uintptr_t>(seg.first), seg.second, r.cookie, ep.id});
    while (g.origins.size() > 4096) g.origins.pop_front();
  }
  if (r.seq != 0 && !s.done.status) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mu);
    auto& ws = g.writes[ep.id];
    if (!r.persistent_flush) {
      PendingWrite w;
      w.seq = r.seq;
      w.cookie = r.cookie;
      w.rkey = r.rkey;
      w.rbase = r.rbase;
      w.endpoint = ep.id;
      w.uncovered.add(r.raddr, r.raddr + r.rlen);
      if (!w.uncovered.empty()) ws.push_back(std::move(w));
    } else {
      // Covers the writes posted before it on this endpoint.
      for (auto& w : ws)
        if (w.seq < r.seq && w.rkey == r.rkey) w.uncovered.subtract(r.raddr, r.raddr + r.rlen);
      std::erase_if(ws, [](const PendingWrite& w) { return w.uncovered.empty(); });
    }
  }
  // The consumer may change the memory only once it reaps the completion,
  // which the agent thread may have made long before (a loaded machine): the
  // record rides with the completion and is compared once more then.
  // (Only the copies move: the slot keeps its staging until it is released,
  // as the transport may still hold it.)
  if (!r.gather || r.reported || s.done.status || !r.reaped) return nullptr;
  RecordPtr later(new OpRecord);
  later->cookie = r.cookie;
  later->endpoint = r.endpoint;
  later->opcode = r.opcode;
  later->gather = true;
  later->segs = std::move(r.segs);
  r.segs.clear();
  return later;
}

void on_reap(OpRecord& r) {
  compare(r, "changed_before_completion", "gather memory changed before the completion was reaped");
}

void Checker::on_incoming(EndpointImpl& ep) {
  if (!config_.noncoherent) return;
  std::vector<std::shared_ptr<RegionImpl>> rs;
  {
    std::shared_lock<std::shared_mutex> lock(ep.zone->regions_mu);
    for (auto& [k, r] : ep.zone->regions)
      if (r->check && !r->closed)
        if (auto live = r->weak_from_this().lock()) rs.push_back(std::move(live));  // null: being destroyed
  }
  for (auto& r : rs) {
    std::lock_guard<std::mutex> lock(r->check->mu);
    scan(*r->check);
  }
}

void Checker::on_endpoint_close(EndpointImpl& ep) {
  if (config_.crash) report_unflushed(ep.id);
}

// ------------------------------------------------------------ region hooks

void Checker::on_register(RegionImpl& r) {
  const bool crash = config_.crash && r.persistent;
  const bool nc = config_.noncoherent;
  if (!crash && !nc) return;
  auto st = std::unique_ptr<RegionState, RegionStateFree>(new RegionState);
  st->key = r.key;
  st->base = static_cast<std::uint8_t*>(r.base);
  st->len = r.length;
  st->config = config_;
  st->crash = crash;
  if (crash) st->durable.assign(st->base, st->base + st->len);  // as registered: the durable state
  if (nc) {
    st->nc = true;
    st->remote_write = has(r.access, Access::remote_write);
    st->seen.assign(st->base, st->base + st->len);
    st->nic = st->seen;
    st->stash.resize(st->len);
  }
  Global& g = global();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    st->index = g.next_region++;
    g.regions.insert(st.get());
  }
  r.check = std::move(st);
}

void Checker::on_persist(const RegionImpl& r, std::uint64_t addr, std::uint64_t len) {
  if (!r.check) return;
  RegionState& st = *r.check;
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.crash || st.finished) return;
  const auto off = addr - reinterpret_cast<std::uintptr_t>(st.base);
  if (off > st.len || len > st.len - off) return;
  // Non-coherent emulation: the device's bytes are what it makes durable.
  const std::uint8_t* from = st.nc ? st.nic.data() : st.base;
  std::memcpy(st.durable.data() + off, from + off, len);
  ++st.events;
  const long at = st.config.crash_at;
  if (at == -1 || (at > 0 && static_cast<std::uint64_t>(at) == st.events))
    write_image(st, st.config.crash_dir, std::to_string(st.events));
  if (at == -2 && st.rng() % st.events == 0) write_image(st, st.config.crash_dir, "random");
}

void Checker::on_close(RegionImpl& r) {
  if (r.check) finish_region(*r.check);
}

void Checker::on_sync(RegionImpl& r, std::size_t offset, std::size_t len, bool incoming) {
  if (!r.check) return;
  RegionState& st = *r.check;
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.nc || st.finished) return;
  if (incoming) {
    scan(st, offset, offset + len);
    // dat_lmr_sync_rdma_write: what the device wrote becomes visible.
    for (auto [a, b] : st.pending.v) {
      const auto x = std::max<std::uint64_t>(a, offset), y = std::min<std::uint64_t>(b, offset + len);
      if (x >= y) continue;
      std::memcpy(st.base + x, st.stash.data() + x, y - x);
      std::memcpy(st.seen.data() + x, st.base + x, y - x);
    }
    st.pending.subtract(offset, offset + len);
  } else {
    // dat_lmr_sync_rdma_read: the CPU's writes become visible to the
    // device (the poisoned bytes are the device's own, not the CPU's).
    std::memcpy(st.nic.data() + offset, st.base + offset, len);
    std::memcpy(st.seen.data() + offset, st.base + offset, len);
    for (auto [a, b] : st.pending.v) {
      const auto x = std::max<std::uint64_t>(a, offset), y = std::min<std::uint64_t>(b, offset + len);
      if (x < y) std::memcpy(st.nic.data() + x, st.stash.data() + x, y - x);
    }
  }
}

}  // namespace remora::detail::check
