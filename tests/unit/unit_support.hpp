// tests/unit/unit_support.hpp - shared helpers of the in-process unit tests.
//
// A Pair is one Fabric with two ProtectionZones on 127.0.0.1: the target zone
// (tz) listens on port 0 and accepts into `tep`; the initiator zone (iz)
// connects `iep`. The target owns a 4 KiB region with every privilege (`tmr`,
// descriptor `rr`), the initiator a 4 KiB local region (`lmr`).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "remora/remora.hpp"

namespace unit {

using namespace remora;
using namespace std::chrono_literals;

/// Upper bound of every wait that is expected to succeed.
inline constexpr std::chrono::milliseconds kWait{5000};
/// How long "nothing happens" is watched for.
inline constexpr std::chrono::milliseconds kQuiet{60};

/// True in a ThreadSanitizer build (it stops a child of a threaded process
/// that starts a thread: the fork tests skip there).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kUnderThreadSanitizer = true;
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif
#else
inline constexpr bool kUnderThreadSanitizer = false;
#endif

/// The value of a Result, or an exception (reported by gtest as a failure).
template <class T>
T must(Result<T> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
  return std::move(r).value();
}
inline void must(Result<void> r, const char* what) {
  if (!r) throw std::runtime_error(std::string(what) + ": " + r.error().message());
}
#define MUST(expr) ::unit::must((expr), #expr)

/// Expect `expr` (a Result) to fail with exactly `code`. More context may be
/// streamed in with <<, as with any gtest assertion.
#define EXPECT_ERR(expr, code)                                  \
  if (auto _unit_r = (expr); false) {                           \
  } else                                                        \
    EXPECT_EQ(_unit_r.error(), ::remora::make_error_code(code)) \
        << #expr << " -> " << (_unit_r ? std::string("ok") : _unit_r.error().message()) << ' '

#define EXPECT_OK(expr)               \
  if (auto _unit_r = (expr); false) { \
  } else                              \
    EXPECT_TRUE(_unit_r.ok()) << #expr << " -> " << _unit_r.error().message() << ' '

#define ASSERT_OK(expr)               \
  if (auto _unit_r = (expr); false) { \
  } else                              \
    ASSERT_TRUE(_unit_r.ok()) << #expr << " -> " << _unit_r.error().message() << ' '

inline std::string describe(const Completion& c) {
  std::ostringstream o;
  o << "{cookie=" << c.cookie << " op=" << to_string(c.op) << " status=" << (c.status ? c.status.message() : "ok")
    << " length=" << c.length << " ep=" << c.endpoint_id << "}";
  return o.str();
}

inline std::string describe(const std::vector<Completion>& cs) {
  std::string s = "[";
  for (const auto& c : cs) s += describe(c) + " ";
  return s + "]";
}

/// Take exactly `n` completions (fewer if `timeout` runs out first).
inline std::vector<Completion> collect(CompletionQueue& cq, std::size_t n, std::chrono::milliseconds timeout = kWait) {
  std::vector<Completion> out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out.size() < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    Completion buf[16];
    std::size_t want = std::min<std::size_t>(16, n - out.size());
    auto r = cq.wait(std::span<Completion>(buf, want), left);
    if (!r) break;
    out.insert(out.end(), buf, buf + *r);
  }
  return out;
}

/// Completions that show up within `d` (for "nothing may appear").
inline std::vector<Completion> drain_for(CompletionQueue& cq, std::chrono::milliseconds d = kQuiet) {
  std::vector<Completion> out;
  const auto deadline = std::chrono::steady_clock::now() + d;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    Completion buf[16];
    auto r = cq.wait(buf, left);
    if (!r) break;
    out.insert(out.end(), buf, buf + *r);
  }
  return out;
}

/// poll(2) on `fd`: readable within `timeout_ms`?
inline bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int n = ::poll(&p, 1, timeout_ms);
  return n == 1 && (p.revents & POLLIN) != 0;
}

inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

constexpr Access kLocal = Access::local_read | Access::local_write;
constexpr Access kRemote = Access::remote_read | Access::remote_write;

/// The next connection request of `lis` when the zones have no progress
/// threads: `a` and `b` are driven by hand while it waits (up to about 5 s;
/// Errc::timeout then).
inline Result<ConnectionRequest> next_request_driven(Listener& lis, ProtectionZone& a, ProtectionZone& b) {
  Result<ConnectionRequest> req = Errc::timeout;
  for (int i = 0; i < 5000 && !req; ++i) {
    (void)a.progress();
    (void)b.progress();
    req = lis.next_request(std::chrono::milliseconds(1));
  }
  return req;
}

struct PairOptions {
  EndpointOptions initiator{};  // send_cq is filled in
  EndpointOptions target{};     // send_cq is filled in
  std::size_t target_size = 4096;
  std::size_t local_size = 4096;
  bool connect = true;
  FabricOptions fabric{};  // same_host = false: a test of the transport itself
  // Called after the target's zone is made and before the initiator's (a
  // test that gives the two zones different environments).
  std::function<void()> between_zones;
};

class Pair {
 public:
  static constexpr std::uint8_t kTargetFill = 0xEE;

  explicit Pair(PairOptions o = {}) {
    target_mem.assign(o.target_size, kTargetFill);
    local_mem.assign(o.local_size, 0);
    fabric = MUST(Fabric::open(o.fabric));
    tz = MUST(fabric.create_zone());
    if (o.between_zones) o.between_zones();
    iz = MUST(fabric.create_zone());
    tcq = MUST(tz.create_cq());
    icq = MUST(iz.create_cq());
    tmr = MUST(tz.register_memory(target_mem.data(), target_mem.size(), Access::all));
    lmr = MUST(iz.register_memory(local_mem.data(), local_mem.size(), kLocal));
    rr = MUST(tmr.remote());
    lis = MUST(tz.listen("127.0.0.1", 0));
    o.target.send_cq = &tcq;
    o.initiator.send_cq = &icq;
    tep = MUST(tz.create_endpoint(o.target));
    iep = MUST(iz.create_endpoint(o.initiator));
    if (o.connect) connect();
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  void connect(std::span<const std::uint8_t> client_data = {}, std::span<const std::uint8_t> server_data = {}) {
    MUST(iep.connect("127.0.0.1", lis.port(), client_data));
    auto req = MUST(lis.next_request(kWait));
    MUST(req.accept(tep, server_data));
    auto ce = MUST(iep.next_event(kWait));
    if (ce.type != ConnectionEventType::established)
      throw std::runtime_error(std::string("initiator event: ") + to_string(ce.type));
    auto se = MUST(tep.next_event(kWait));
    if (se.type != ConnectionEventType::established)
      throw std::runtime_error(std::string("target event: ") + to_string(se.type));
  }

  bool target_untouched() const {
    return std::all_of(target_mem.begin(), target_mem.end(), [](std::uint8_t b) { return b == kTargetFill; });
  }

  // Declaration order is destruction order in reverse: memory outlives regions.
  std::vector<std::uint8_t> target_mem, local_mem;
  Fabric fabric;
  ProtectionZone tz, iz;
  CompletionQueue tcq, icq;
  MemoryRegion tmr, lmr;
  RemoteRegion rr;
  Listener lis;
  Endpoint tep, iep;
};

}  // namespace unit
