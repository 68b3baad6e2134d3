// tests/integration/harness.hpp - running the test peer as a separate process
// and driving a client zone against it. Every wait here is bounded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <remora/remora.hpp>

#include "common.hpp"

namespace remora_it {

using namespace std::chrono_literals;

/// Path of the built remora-test-peer (a compile definition).
std::string peer_path();
/// A scratch directory on the build tree's file system (a compile definition).
std::string scratch_base();

/// Result of a short helper command (ip ...).
struct CommandResult {
  int status = -1;     ///< exit code, or -1 when it did not exit normally / timed out
  std::string output;  ///< stdout and stderr
};
CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 10s);
/// Full path of the executable `name` in PATH (plus /usr/sbin, /sbin), or empty.
std::string which(const std::string& name);

/// A child process with its stdin and stdout connected to pipes. Killed with
/// SIGKILL and reaped when destroyed.
class Process {
 public:
  /// fork + exec of argv[0] (absolute path). The child dies with the test
  /// (PR_SET_PDEATHSIG). Returns null when fork/exec failed.
  static std::unique_ptr<Process> spawn(const std::vector<std::string>& argv);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  /// Wait up to `timeout` for a line starting with `prefix` that no earlier
  /// call returned. Lines already received count. nullopt on timeout/EOF.
  std::optional<std::string> wait_line(std::string_view prefix, std::chrono::milliseconds timeout);
  /// Read whatever is available now, without blocking.
  void drain();
  /// Every line received so far, for diagnostics.
  const std::vector<std::string>& lines() const { return lines_; }
  std::string transcript() const;
  bool send(const std::string& line);
  void close_stdin();
  void signal(int sig);
  /// SIGSTOP and wait (bounded) until every thread of the process is stopped.
  bool stop(std::chrono::milliseconds timeout = 5s);
  /// Wait for the process to exit; returns its wait status, or nullopt on
  /// timeout (the process is then left running).
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  bool exited() const { return reaped_; }
  /// SIGKILL and reap (bounded).
  void kill_now();

 private:
  Process() = default;
  bool read_some(int timeout_ms);  // false on EOF/error
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  bool eof_ = false;
  bool reaped_ = false;
  int status_ = 0;
  std::string partial_;
  std::vector<std::string> lines_;
  std::vector<bool> taken_;
};

/// The target peer: a Process that printed READY with its port and regions.
class Peer {
 public:
  /// Start `prefix... remora-test-peer args...` and wait for READY.
  ~Peer();
  static std::unique_ptr<Peer> start(const std::vector<std::string>& args, const std::vector<std::string>& prefix = {},
                                     std::chrono::milliseconds timeout = 15s);
  Process& proc() { return *proc_; }
  std::uint16_t port() const { return port_; }
  std::size_t region_size() const { return size_; }
  /// Descriptor of a region by mode name ("rw", "ro", "wo", "file").
  const remora::RemoteRegion& region(const std::string& name) const { return regions_.at(name); }
  bool has_region(const std::string& name) const { return regions_.count(name) != 0; }
  /// Index of a named region in the peer's allocation (order of --regions).
  std::size_t index(const std::string& name) const { return order_.at(name); }

  /// Ask the peer for its whole allocation. `guards` gets the peer's own
  /// verdict ("ok" or "bad ..."). nullopt when the peer did not answer.
  std::optional<std::vector<std::uint8_t>> dump(std::string* guards = nullptr, std::chrono::milliseconds timeout = 10s);
  /// Wait for "EVENT conn=<n> type=<type>".
  bool wait_event(int conn, const std::string& type, std::chrono::milliseconds timeout = 10s);
  /// Send quit and return the exit status (nullopt when it did not exit).
  std::optional<int> quit(std::chrono::milliseconds timeout = 10s);

 private:
  std::unique_ptr<Process> proc_;
  std::uint16_t port_ = 0;
  std::size_t size_ = 0;
  std::map<std::string, remora::RemoteRegion> regions_;
  std::map<std::string, std::size_t> order_;
  std::string dump_path_;
};

/// Guard-byte and content checks on a dump.
::testing::AssertionResult guards_intact(const std::vector<std::uint8_t>& dump, std::size_t nregions,
                                         std::size_t region_size);
/// Region `index` of the dump, bytes [off, off+len), equals `expect`.
::testing::AssertionResult region_equals(const std::vector<std::uint8_t>& dump, std::size_t index,
                                         std::size_t region_size, std::size_t off,
                                         const std::vector<std::uint8_t>& expect);
/// Region `index` of the dump is exactly its initial pattern.
::testing::AssertionResult region_pristine(const std::vector<std::uint8_t>& dump, std::size_t index,
                                           std::size_t region_size);

/// A temporary directory removed (with its files) at destruction.
class TempDir {
 public:
  /// A fresh directory under `base` (default /tmp).
  explicit TempDir(const std::string& base = "/tmp");
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// The initiator: a fabric, a zone, one completion queue, and a registered
/// local buffer used for gather/scatter lists.
class Client {
 public:
  ::testing::AssertionResult init(bool busy_poll = false, std::size_t local_size = 4 << 20);
  /// Set before init: false keeps this client's connections on the
  /// transport (FabricOptions::same_host), for tests of the transport's own
  /// behaviour.
  bool same_host = true;
  remora::ProtectionZone& zone() { return zone_; }
  remora::CompletionQueue& cq() { return cq_; }
  remora::MemoryRegion& mr() { return mr_; }
  std::uint8_t* buf() { return buf_.get(); }
  std::size_t buf_size() const { return size_; }
  remora::Segment seg(std::size_t off, std::size_t len) const { return remora::Segment(mr_, off, len); }

  /// Create an endpoint on this zone's queue.
  remora::Result<remora::Endpoint> endpoint(std::uint32_t max_outstanding = 64);
  /// Create an endpoint and connect it; `reply` gets the accept private data.
  ::testing::AssertionResult connect(remora::Endpoint& ep, std::uint16_t port,
                                     const std::vector<std::uint8_t>& pdata = {},
                                     std::vector<std::uint8_t>* reply = nullptr, const std::string& host = "127.0.0.1",
                                     std::uint32_t max_outstanding = 64);
  /// Collect completions until `n` arrived or `timeout` passed.
  std::vector<remora::Completion> collect(std::size_t n, std::chrono::milliseconds timeout = 10s);
  /// Wait for exactly one completion with this cookie and return it; fails
  /// the test on timeout or on a different cookie.
  ::testing::AssertionResult wait_cookie(std::uint64_t cookie, remora::Completion* out = nullptr,
                                         std::chrono::milliseconds timeout = 10s);
  /// Nothing arrives within `quiet`.
  ::testing::AssertionResult expect_no_completion(std::chrono::milliseconds quiet);

 private:
  remora::Fabric fabric_;
  remora::ProtectionZone zone_;
  remora::CompletionQueue cq_;
  std::unique_ptr<std::uint8_t, void (*)(std::uint8_t*)> buf_{nullptr, [](std::uint8_t*) {}};
  std::size_t size_ = 0;
  remora::MemoryRegion mr_;
};

/// Private data of `n` bytes with a recognisable pattern.
std::vector<std::uint8_t> make_pdata(std::size_t n, std::uint8_t seed = 1);

/// Wait for the next connection event on `ep` of `type`.
::testing::AssertionResult expect_event(remora::Endpoint& ep, remora::ConnectionEventType type,
                                        std::chrono::milliseconds timeout = 10s,
                                        remora::ConnectionEvent* out = nullptr);

/// Fill with a pattern derived from `seed`.
void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed);
std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed);

}  // namespace remora_it
