// examples/common/example.hpp - the error handling every example shares.
//
// Nothing Remora-specific happens here beyond unwrapping a Result and waiting
// with a timeout: each example's client.cpp/server.cpp shows its own API calls.
#pragma once

#include <remora/remora.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace example {

using namespace std::chrono_literals;

/// Every blocking call in the examples gives up after this long.
inline constexpr std::chrono::milliseconds kTimeout = 10s;

/// Print "error: ..." and exit(1) at once. _Exit skips destructors, so a
/// failing example never waits on a connection it is abandoning.
[[noreturn]] inline void die(const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", what.c_str());
  std::_Exit(1);
}

/// The value of `r`, or die naming the step that failed.
template <class T>
T check(remora::Result<T> r, const char* step) {
  if (!r) die(std::string(step) + ": " + r.error().message());
  return std::move(r).value();
}
inline void check(const remora::Result<void>& r, const char* step) {
  if (!r) die(std::string(step) + ": " + r.error().message());
}

/// The command line: <host> <port> [extra...].
struct Args {
  std::string host;
  std::uint16_t port = 0;
  std::vector<std::string> extra;
};

/// Parse `<host> <port>` plus up to max_extra optional arguments described by
/// `extra_usage`; print a usage line and exit(2) on anything else.
inline Args parse_args(int argc, char** argv, int max_extra = 0, const char* extra_usage = "") {
  if (argc < 3 || argc > 3 + max_extra) {
    std::fprintf(stderr, "usage: %s <host> <port>%s%s\n", argv[0], *extra_usage ? " " : "", extra_usage);
    std::exit(2);
  }
  char* end = nullptr;
  const unsigned long port = std::strtoul(argv[2], &end, 10);
  if (*argv[2] == '\0' || *end != '\0' || port > 65535) {
    std::fprintf(stderr, "%s: bad port '%s'\n", argv[0], argv[2]);
    std::exit(2);
  }
  return Args{argv[1], static_cast<std::uint16_t>(port), {argv + 3, argv + argc}};
}

/// A string's bytes, as private data.
inline std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

/// Wait for the next completion on `cq`; die unless it arrives in time,
/// succeeded and carries `cookie`.
inline remora::Completion wait_completion(remora::CompletionQueue& cq, std::uint64_t cookie, const char* step) {
  remora::Completion c;
  (void)check(cq.wait({&c, 1}, kTimeout), step);
  if (c.status) die(std::string(step) + ": " + c.status.message());
  if (c.cookie != cookie)
    die(std::string(step) + ": completion of cookie " + std::to_string(c.cookie) + ", expected " +
        std::to_string(cookie));
  return c;
}

/// Wait for the next connection event of `ep` and die unless it is `want`.
inline void expect_event(remora::Endpoint& ep, remora::ConnectionEventType want, const char* step) {
  const remora::ConnectionEvent ev = check(ep.next_event(kTimeout), step);
  if (ev.type != want)
    die(std::string(step) + ": got '" + remora::to_string(ev.type) + "', expected '" + remora::to_string(want) + "'");
}

/// Server side: wait until the client goes away, print how, and return the
/// event type (disconnected when the client called disconnect(), lost when
/// the connection broke).
inline remora::ConnectionEventType wait_for_client_to_leave(remora::Endpoint& ep) {
  const remora::ConnectionEvent ev = check(ep.next_event(kTimeout), "wait for the client to disconnect");
  if (ev.type != remora::ConnectionEventType::disconnected && ev.type != remora::ConnectionEventType::lost)
    die(std::string("unexpected connection event '") + remora::to_string(ev.type) + "'");
  std::printf("server: event: %s\n", remora::to_string(ev.type));
  return ev.type;
}

}  // namespace example
