// remora-bench-ucx-user: UCX's put bandwidth and put latency on memory the
// program allocated itself and registered, the baseline of issue 10's goal
// "user-registered memory: >= 1.0x UCX ucp_put_bw on user memory".
// (ucx_perftest, which bench/samehost.sh also runs, puts into memory UCX
// allocates itself: ucp_mem_map with UCP_MEM_MAP_ALLOCATE.)
//
// The program forks. The child is the target, the parent the initiator; each
// opens its own UCP context and worker after the fork, allocates one buffer
// with aligned_alloc (page-aligned, touched) and registers it with
// ucp_mem_map(address, length). Worker addresses, packed rkeys and buffer
// addresses go over a socketpair. UCX_TLS is "sm" unless the environment
// already sets it; the configuration UCX read is checked before ucp_init.
//
//   put_bw   ucp_put_nbx of SIZE bytes from the parent's buffer to the
//            child's, at most 16 outstanding, for -D seconds; then
//            ucp_worker_flush, inside the timed interval
//   put_lat  8 bytes, ping-pong as ucx_perftest's put_lat: each side puts a
//            counter into the other's buffer and polls its own buffer for the
//            peer's; the figure is half the round trip (p50)
//
// Each measurement runs --reps times after a warm-up of a quarter of -D; the
// medians are reported. CPU us/op is the parent's getrusage (user + sys) over
// the timed part. The child busy-polls its worker throughout, as
// ucx_perftest's server does, and exits if the parent dies
// (PR_SET_PDEATHSIG); the parent kills it on any failure; every wait has a
// deadline and an alarm bounds the whole run (--timeout).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_stats.hpp"
#include "cli.hpp"

namespace {

using remora::bench::add_batch;
using remora::bench::Batch;
using remora::bench::cpu_seconds;
using remora::bench::errno_text;
using remora::bench::fixed;
using remora::bench::host_ticks;
using remora::bench::median;
using remora::bench::number;
using remora::bench::percentile;
using remora::bench::steal_percent;

using Clock = std::chrono::steady_clock;
using remora::tools::UsageError;

constexpr std::string_view kProgram = "remora-bench-ucx-user";
constexpr std::size_t kMaxSize = std::size_t{1} << 30;
constexpr std::size_t kLatencySize = 8;
constexpr unsigned kWindow = 16;                       // outstanding puts, put_bw
constexpr auto kWaitLimit = std::chrono::seconds(10);  // one wait for the peer or a completion
constexpr std::uint64_t kStop = ~std::uint64_t{0};     // the last ping: the child leaves its pong loop
constexpr const char* kDefaultTls = "sm";

// ---------------------------------------------------------------- options

struct Config {
  std::vector<std::size_t> sizes{8, 65536, 1048576};
  unsigned reps = 5;
  double duration_s = 0.3;
  unsigned timeout_s = 0;  // 0: from the planned run time
  bool json = false;
  bool help = false;
};

constexpr remora::tools::Option<Config> kOptions[] = {
    {"--size", "BYTES[,BYTES...]", "put_bw sizes (k, m, g suffixes; default 8,65536,1048576); put_lat is 8 bytes",
     [](Config& c, std::string_view v) { c.sizes = remora::tools::parse_size_list("--size", v, kMaxSize); }},
    {"--reps", "N", "repetitions of every measurement; the figures are their medians (default 5)",
     [](Config& c, std::string_view v) {
       const auto n = remora::tools::parse_u64("--reps", v);
       if (n == 0 || n > 1000) throw UsageError("--reps: between 1 and 1000");
       c.reps = static_cast<unsigned>(n);
     }},
    {"-D|--duration", "SECONDS", "length of one repetition (default 0.3)",
     [](Config& c, std::string_view v) { c.duration_s = remora::tools::parse_seconds("--duration", v, 0.001, 60); }},
    {"--timeout", "SECONDS", "limit of the whole run, then exit 3 (default: 30 s + 4x the planned time)",
     [](Config& c, std::string_view v) {
       c.timeout_s = static_cast<unsigned>(std::ceil(remora::tools::parse_seconds("--timeout", v, 1, 86400)));
     }},
    {"--json", "", "one JSON object per row instead of the table", [](Config& c, std::string_view) { c.json = true; }},
    {"--help", "", "this text", [](Config& c, std::string_view) { c.help = true; }},
};

std::string usage() {
  return std::string("usage: ") + kProgram.data() +
         " [--size BYTES[,BYTES...]] [--reps N] [-D SECONDS] [--timeout SECONDS] [--json]\n\n"
         "UCX (UCP) put bandwidth and 8-byte put latency between this process and a forked child,\n"
         "on memory each allocated itself and registered with ucp_mem_map (not UCX's own allocation).\n"
         "UCX_TLS is taken from the environment, else set to \"sm\".\n\noptions:\n" +
         remora::tools::options_help<Config>(kOptions);
}

// ---------------------------------------------------------------- process bounds

volatile sig_atomic_t g_child = 0;  // the child to kill when the run is cut short

void on_fatal_signal(int sig) {
  static constexpr char kTimeout[] = "remora-bench-ucx-user: error: timeout: the run exceeded its limit, giving up\n";
  static constexpr char kSignal[] = "remora-bench-ucx-user: error: interrupted\n";
  const bool alarm_fired = sig == SIGALRM;
  const ssize_t ignored = alarm_fired ? write(STDERR_FILENO, kTimeout, sizeof kTimeout - 1)
                                      : write(STDERR_FILENO, kSignal, sizeof kSignal - 1);
  (void)ignored;
  if (g_child > 0) kill(static_cast<pid_t>(g_child), SIGKILL);
  _exit(alarm_fired ? 3 : 128 + sig);
}

// ---------------------------------------------------------------- helpers

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(ucs_status_t st, const char* what) {
  if (st != UCS_OK) throw Error(std::string(what) + ": " + ucs_status_string(st));
}

// The byte put at one size (a different one per size, so that the child's
// check sees this size's data, not an earlier one's).
int fill_byte(std::size_t size) { return static_cast<int>(0x41 + (size * 5 + size / 4096) % 0x3d); }

// Each side's one buffer: [0, bulk) the put_bw data (the parent's source, the
// child's target), then one page holding the 8-byte slot the peer puts its
// ping into and the 8-byte source of this side's own pings.
struct Layout {
  explicit Layout(std::size_t max_size) : bulk((max_size + 4095) / 4096 * 4096) {}
  std::size_t bulk;
  std::size_t landing() const { return bulk; }
  std::size_t ping_source() const { return bulk + 64; }
  std::size_t total() const { return bulk + 4096; }
};

// Page-aligned memory from the C library, every page touched.
class Buffer {
 public:
  explicit Buffer(std::size_t size) : size_(size) {
    data_ = static_cast<std::byte*>(std::aligned_alloc(4096, size));
    if (data_ == nullptr) throw Error("aligned_alloc of " + std::to_string(size) + " bytes failed");
    std::memset(data_, 0, size);
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::uint64_t address() const { return reinterpret_cast<std::uintptr_t>(data_); }
  std::uint64_t* word(std::size_t offset) const { return reinterpret_cast<std::uint64_t*>(data_ + offset); }

 private:
  std::size_t size_;
  std::byte* data_;
};

std::uint64_t load(const std::uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// ---------------------------------------------------------------- the socketpair
//
// Messages of a 4-byte length and that many bytes (binary safe: worker
// addresses and packed rkeys travel as they are).

void send_msg(int fd, std::string_view m) {
  const auto len = static_cast<std::uint32_t>(m.size());
  std::string wire(reinterpret_cast<const char*>(&len), sizeof len);
  wire += m;
  for (std::size_t done = 0; done < wire.size();) {
    const ssize_t n = send(fd, wire.data() + done, wire.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(errno_text("send to the peer process"));
    done += static_cast<std::size_t>(n);
  }
}

bool readable(int fd, int timeout_ms = 0) {
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, timeout_ms) > 0;
}

// One message, or nullopt when the peer closed its end. Throws after `limit`.
std::optional<std::string> recv_msg(int fd, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  auto read_exact = [&](char* p, std::size_t n, bool eof_ok) {
    for (std::size_t done = 0; done < n;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw Error("the peer process did not answer within " + std::to_string(limit.count()) + " ms");
      if (!readable(fd, static_cast<int>(std::min<long long>(left, 1000)))) continue;
      const ssize_t r = recv(fd, p + done, n - done, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw Error(errno_text("recv from the peer process"));
      if (r == 0) {
        if (eof_ok && done == 0) return false;
        throw Error("the peer process closed the socket mid-message");
      }
      done += static_cast<std::size_t>(r);
    }
    return true;
  };
  std::uint32_t len = 0;
  if (!read_exact(reinterpret_cast<char*>(&len), sizeof len, true)) return std::nullopt;
  if (len > (1u << 20)) throw Error("oversized message from the peer process");
  std::string m(len, '\0');
  read_exact(m.data(), len, false);
  return m;
}

std::string recv_required(int fd, const char* what) {
  auto m = recv_msg(fd, kWaitLimit);
  if (!m) throw Error(std::string("the peer process left before sending ") + what);
  return *m;
}

// ---------------------------------------------------------------- UCP

// The value of one variable (e.g. "UCX_TLS") in the configuration UCX read.
std::string config_value(const ucp_config_t* config, std::string_view name) {
  char* text = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == nullptr) throw Error(errno_text("open_memstream"));
  ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG);
  std::fclose(f);
  const std::string all(text, len);
  std::free(text);
  const std::string key = "\n" + std::string(name) + "=";
  const auto at = ("\n" + all).find(key);
  if (at == std::string::npos) return {};
  const auto start = at + key.size() - 1;  // in `all`, after "NAME="
  return all.substr(start, all.find('\n', start) - start);
}

// One side's UCP objects: context, worker, the registered buffer, and the
// endpoint to the peer with its rkey. Released in reverse order.
class Ucp {
 public:
  // UCX_TLS comes from the environment (ucp_config_read); the value read is
  // checked against `tls` before ucp_init uses it.
  explicit Ucp(const std::string& tls) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    const std::string read_tls = config_value(config, "UCX_TLS");
    if (read_tls != tls) {
      ucp_config_release(config);
      throw Error("UCX's configuration has UCX_TLS='" + read_tls + "', not '" + tls + "'");
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    const ucs_status_t st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(st, "ucp_init");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (const ucs_status_t ws = ucp_worker_create(context_, &wp, &worker_); ws != UCS_OK) {
      ucp_cleanup(context_);
      check(ws, "ucp_worker_create");
    }
  }

  ~Ucp() {
    if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
    if (ep_ != nullptr) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
        const auto deadline = Clock::now() + std::chrono::seconds(1);
        while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
        ucp_request_free(r);
      }
    }
    if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  Ucp(const Ucp&) = delete;
  Ucp& operator=(const Ucp&) = delete;

  // ucp_mem_map of memory the program owns: address and length, no
  // UCP_MEM_MAP_ALLOCATE.
  void register_buffer(const Buffer& b) {
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = b.data();
    p.length = b.size();
    check(ucp_mem_map(context_, &p, &memh_), "ucp_mem_map");
  }

  std::string packed_rkey() const {
    void* buf = nullptr;
    std::size_t len = 0;
    check(ucp_rkey_pack(context_, memh_, &buf, &len), "ucp_rkey_pack");
    std::string s(static_cast<const char*>(buf), len);
    ucp_rkey_buffer_release(buf);
    return s;
  }

  std::string worker_address() const {
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    check(ucp_worker_get_address(worker_, &addr, &len), "ucp_worker_get_address");
    std::string s(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    return s;
  }

  // The endpoint to the peer's worker and the peer's buffer at `base`.
  void connect(const std::string& address, const std::string& rkey, std::uint64_t base) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = reinterpret_cast<const ucp_address_t*>(address.data());
    check(ucp_ep_create(worker_, &p, &ep_), "ucp_ep_create");
    check(ucp_ep_rkey_unpack(ep_, rkey.data(), &rkey_), "ucp_ep_rkey_unpack");
    remote_base_ = base;
  }

  unsigned progress() { return ucp_worker_progress(worker_); }

  // Posts a put of `size` bytes at `src` (inside the registered buffer) to
  // the peer's buffer at `offset`: the request, or nullptr if it completed
  // at once.
  void* put(const void* src, std::size_t size, std::size_t offset) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh_;
    ucs_status_ptr_t r = ucp_put_nbx(ep_, src, size, remote_base_ + offset, rkey_, &p);
    if (UCS_PTR_IS_ERR(r)) throw Error(std::string("ucp_put_nbx: ") + ucs_status_string(UCS_PTR_STATUS(r)));
    return r;
  }

  // Progresses until `request` (may be nullptr) completes, then frees it.
  void wait(void* request, const char* what) {
    if (request == nullptr) return;
    const auto deadline = Clock::now() + kWaitLimit;
    ucs_status_t st;
    for (unsigned spins = 0; (st = ucp_request_check_status(request)) == UCS_INPROGRESS; ++spins) {
      progress();
      if (spins % 1024 == 1023 && Clock::now() > deadline) {
        ucp_request_free(request);
        throw Error(std::string(what) + ": not complete within " + std::to_string(kWaitLimit.count()) + " s");
      }
    }
    ucp_request_free(request);
    check(st, what);
  }

  void flush() {
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_worker_flush_nbx(worker_, &p);
    if (UCS_PTR_IS_ERR(r)) throw Error(std::string("ucp_worker_flush_nbx: ") + ucs_status_string(UCS_PTR_STATUS(r)));
    wait(r, "ucp_worker_flush_nbx");
  }

  // Closes the endpoint, flushing it first.
  void close_endpoint() {
    if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
    rkey_ = nullptr;
    if (ep_ == nullptr) return;
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
    ep_ = nullptr;
    if (UCS_PTR_IS_ERR(r)) throw Error(std::string("ucp_ep_close_nbx: ") + ucs_status_string(UCS_PTR_STATUS(r)));
    wait(r, "ucp_ep_close_nbx");
  }

  // The endpoint's lanes as ucp_ep_print_info shows them, one
  // "transport/device (roles)" each, e.g. "cma/memory.0 (rma_bw#0)".
  std::string lanes() const {
    char* text = nullptr;
    std::size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (f == nullptr) return "?";
    ucp_ep_print_info(ep_, f);
    std::fclose(f);
    const std::string all(text, len);
    std::free(text);
    std::string out;
    for (std::size_t pos = 0; pos < all.size();) {
      const auto nl = std::min(all.find('\n', pos), all.size());
      const std::string line = all.substr(pos, nl - pos);
      pos = nl + 1;
      // "#  lane[2]:  2:cma/memory.0 md[2]  -> md[2]/cma/sysdev[255] rma_bw#0"
      const auto lane = line.find("lane[");
      const auto arrow = line.find("->");
      if (lane == std::string::npos || arrow == std::string::npos) continue;
      const auto colon = line.find(':', line.find("]:", lane) + 2);
      if (colon == std::string::npos || colon > arrow) continue;
      std::string item = line.substr(colon + 1, line.find(' ', colon) - colon - 1);
      const auto last = line.rfind(']');
      const auto roles = last == std::string::npos ? std::string::npos : line.find_first_not_of(' ', last + 1);
      if (last > arrow && roles != std::string::npos) item += " (" + line.substr(roles) + ")";
      out += (out.empty() ? "" : ", ") + item;
    }
    return out.empty() ? "?" : out;
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  ucp_rkey_h rkey_ = nullptr;
  std::uint64_t remote_base_ = 0;
};

// What one side tells the other: its buffer's address, its worker's
// address and the packed rkey of its buffer, as three messages.
void send_hello(int fd, const Buffer& b, const Ucp& ucp) {
  send_msg(fd, "ok " + std::to_string(b.address()));
  send_msg(fd, ucp.worker_address());
  send_msg(fd, ucp.packed_rkey());
}

void connect_to_peer(int fd, Ucp& ucp, const std::string& first) {
  std::uint64_t base = 0;
  if (std::sscanf(first.c_str(), "ok %" SCNu64, &base) != 1) throw Error("the peer process sent '" + first + "'");
  const std::string address = recv_required(fd, "its worker address");
  const std::string rkey = recv_required(fd, "its rkey");
  ucp.connect(address, rkey, base);
}

// Answers pings: whenever the landing slot holds a new value, puts it back
// into the peer's landing slot; leaves after echoing kStop. Returns how
// many it echoed.
std::uint64_t pong(Ucp& ucp, const Buffer& b, const Layout& layout) {
  const std::uint64_t* landing = b.word(layout.landing());
  std::uint64_t* source = b.word(layout.ping_source());
  std::uint64_t last = load(landing), echoed = 0;
  void* previous = nullptr;
  auto deadline = Clock::now() + kWaitLimit;
  for (unsigned spins = 0;; ++spins) {
    ucp.progress();
    const std::uint64_t v = load(landing);
    if (v != last) {
      last = v;
      ucp.wait(previous, "ucp_put_nbx (pong)");  // its source is about to change
      *source = v;
      previous = ucp.put(source, kLatencySize, layout.landing());
      ++echoed;
      if (v == kStop) break;
      deadline = Clock::now() + kWaitLimit;
    } else if (spins % 1024 == 1023 && Clock::now() > deadline) {
      throw Error("no ping for " + std::to_string(kWaitLimit.count()) + " s");
    }
  }
  ucp.wait(previous, "ucp_put_nbx (pong)");
  return echoed;
}

// ---------------------------------------------------------------- the child (target)

// Its commands, one message each: "check SIZE BYTE" (answers "ok" when the
// first SIZE bytes of its buffer hold BYTE, else "bad"), "pong" (answers
// "ready", echoes pings until kStop, answers "pong N"), "bye" (closes its
// endpoint, answers "bye" and exits 0). Between commands it busy-polls its
// worker.
int child_main(int fd, const Layout& layout, const std::string& tls) {
  Buffer buffer(layout.total());
  std::optional<Ucp> ucp;
  try {
    ucp.emplace(tls);
    ucp->register_buffer(buffer);
  } catch (const std::exception& e) {
    send_msg(fd, std::string("error: ") + e.what());
    return 1;
  }
  send_hello(fd, buffer, *ucp);
  connect_to_peer(fd, *ucp, recv_required(fd, "its buffer address"));
  while (true) {
    for (int i = 0; i < 256; ++i) ucp->progress();
    if (!readable(fd)) continue;
    // The parent can measure for a long time between two commands.
    const auto m = recv_msg(fd, std::chrono::hours(24));
    if (!m) return 1;  // the parent closed without "bye"
    std::size_t size = 0;
    int byte = 0;
    if (std::sscanf(m->c_str(), "check %zu %d", &size, &byte) == 2 && size <= layout.bulk) {
      bool ok = true;
      for (std::size_t i = 0; i < size && ok; ++i) ok = buffer.data()[i] == static_cast<std::byte>(byte);
      send_msg(fd, ok ? "ok" : "bad");
    } else if (*m == "pong") {
      send_msg(fd, "ready");
      send_msg(fd, "pong " + std::to_string(pong(*ucp, buffer, layout)));
    } else if (*m == "bye") {
      ucp->close_endpoint();
      ucp.reset();
      send_msg(fd, "bye");
      return 0;
    } else {
      send_msg(fd, "error: unknown command '" + *m + "'");
    }
  }
}

// A forked child running child_main; killed and reaped on destruction if
// still there.
class Child {
 public:
  Child(const Layout& layout, const std::string& tls) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw Error(errno_text("socketpair"));
    const pid_t parent = getpid();
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = fork();
    if (pid_ < 0) {
      close(sv[0]);
      close(sv[1]);
      throw Error(errno_text("fork"));
    }
    if (pid_ == 0) {
      close(sv[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent
      if (getppid() != parent) _exit(1);
      alarm(0);
      int rc = 1;
      try {
        rc = child_main(sv[1], layout, tls);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (target process): error: %s\n", kProgram.data(), e.what());
      }
      std::fflush(stderr);
      _exit(rc);
    }
    close(sv[1]);
    fd_ = sv[0];
    g_child = pid_;
  }
  ~Child() { finish(std::chrono::milliseconds(0)); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int fd() const { return fd_; }

  // Closes the socket and reaps the child, killing it if it is still there
  // after `grace`: its exit status, or -1 if killed.
  int finish(std::chrono::milliseconds grace) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (pid_ <= 0) return status_;
    const auto deadline = Clock::now() + grace;
    int st = 0;
    while (true) {
      const pid_t w = waitpid(pid_, &st, WNOHANG);
      if (w == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        status_ = -1;
        break;
      }
      usleep(1000);
    }
    pid_ = 0;
    g_child = 0;
    return status_;
  }

  // If the child has ended: how ("was killed by signal 9"); else empty.
  std::string ended() {
    int st = 0;
    if (pid_ <= 0 || waitpid(pid_, &st, WNOHANG) != pid_) return {};
    pid_ = 0;
    g_child = 0;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                           : "exited with status " + std::to_string(WEXITSTATUS(st));
  }

  void check(std::size_t size, int byte) {
    send_msg(fd_, "check " + std::to_string(size) + " " + std::to_string(byte));
    const auto a = recv_msg(fd_, kWaitLimit);
    if (!a || *a != "ok")
      throw Error("the target's buffer does not hold the " + std::to_string(size) + " bytes put (" +
                  (a ? *a : std::string("closed")) + ")");
  }

 private:
  pid_t pid_ = 0;
  int fd_ = -1;
  int status_ = 0;
};

// ---------------------------------------------------------------- results

struct Row {
  std::string op;  // "put_bw" or "put_lat"
  std::size_t size = 0;
  unsigned qd = 1;
  std::vector<double> gbps, p50_us, p99_us, cpu_us_per_op;
  std::uint64_t ops = 0;
  std::vector<double> steal_pct;  // per repetition where /proc/stat told it
  bool latency() const { return !p50_us.empty(); }
};

class Output {
 public:
  Output(const Config& c, std::string tls) : config_(c), tls_(std::move(tls)) {}

  void header() {
    if (config_.json) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    std::printf("# %s  host %s  cpus %ld  UCX %s  UCX_TLS=%s  reps %u  %.3g s per repetition\n", kProgram.data(), host,
                sysconf(_SC_NPROCESSORS_ONLN), ucp_get_version_string(), tls_.c_str(), config_.reps,
                config_.duration_s);
    std::printf("%-9s %-8s %8s %3s %9s %9s %9s %10s  %-13s %7s\n", "engine", "op", "size", "qd", "GB/s", "p50 us",
                "p99 us", "CPU us/op", "range", "steal %");
    std::fflush(stdout);
  }

  void row(const Row& r) {
    const bool lat = r.latency();
    const std::vector<double>& ranged = lat ? r.p50_us : r.gbps;
    const double lo = *std::min_element(ranged.begin(), ranged.end());
    const double hi = *std::max_element(ranged.begin(), ranged.end());
    const bool stolen = !r.steal_pct.empty();
    if (config_.json) {
      std::string line = "{\"engine\":\"ucx-user\",\"op\":\"" + r.op + "\",\"size\":" + std::to_string(r.size) +
                         ",\"qd\":" + std::to_string(r.qd) + ",\"gbps\":" + number(median(r.gbps)) +
                         ",\"p50_us\":" + (lat ? number(median(r.p50_us)) : "null") +
                         ",\"p99_us\":" + (lat ? number(median(r.p99_us)) : "null") +
                         ",\"cpu_us_per_op\":" + number(median(r.cpu_us_per_op)) +
                         ",\"steal_pct\":" + (stolen ? number(median(r.steal_pct)) : "null") +
                         ",\"ops\":" + std::to_string(r.ops) + ",\"reps\":" + std::to_string(r.gbps.size()) +
                         ",\"range\":[" + number(lo) + "," + number(hi) + "],\"ucx_tls\":\"" +
                         remora::tools::json_escape(tls_) + "\",\"ucx_version\":\"" +
                         remora::tools::json_escape(ucp_get_version_string()) + "\"}";
      std::printf("%s\n", line.c_str());
    } else {
      const std::string range = fixed(lo) + "-" + fixed(hi);
      std::printf("%-9s %-8s %8zu %3u %9.3f %9s %9s %10.3f  %-13s %7s\n", "ucx-user", r.op.c_str(), r.size, r.qd,
                  median(r.gbps), lat ? fixed(median(r.p50_us)).c_str() : "-",
                  lat ? fixed(median(r.p99_us)).c_str() : "-", median(r.cpu_us_per_op), range.c_str(),
                  stolen ? fixed(median(r.steal_pct), 1).c_str() : "-");
    }
    std::fflush(stdout);
  }

  void note(const std::string& text) {
    if (config_.json)
      std::printf("{\"note\":\"%s\"}\n", remora::tools::json_escape(text).c_str());
    else
      std::printf("# %s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  const Config& config_;
  std::string tls_;
};

// ---------------------------------------------------------------- the parent (initiator)

// Runs `op(n)` (n operations) in chunks of `chunk` until `duration` has
// passed, then `finish()` (inside the timed interval).
template <class Op, class Finish>
Batch timed(double duration, std::uint64_t chunk, Op&& op, Finish&& finish) {
  Batch b;
  const auto host0 = host_ticks();
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(duration);
  do {
    op(chunk);
    b.ops += chunk;
  } while (Clock::now() < end);
  finish();
  b.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  b.cpu = cpu_seconds() - cpu0;
  b.steal_pct = steal_percent(host0, host_ticks());
  return b;
}

// Puts with at most kWindow requests outstanding.
class Window {
 public:
  explicit Window(Ucp& ucp) : ucp_(ucp) {}
  ~Window() {
    for (; count_ > 0; --count_, head_ = (head_ + 1) % kWindow) ucp_request_free(requests_[head_]);
  }
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  void post(const void* src, std::size_t size) {
    void* r = ucp_.put(src, size, 0);
    if (r == nullptr) return;
    if (count_ == kWindow) retire_oldest();
    requests_[(head_ + count_) % kWindow] = r;
    ++count_;
  }
  void drain() {
    while (count_ > 0) retire_oldest();
  }

 private:
  void retire_oldest() {
    void* r = requests_[head_];
    head_ = (head_ + 1) % kWindow;
    --count_;
    ucp_.wait(r, "ucp_put_nbx");
  }
  Ucp& ucp_;
  std::array<void*, kWindow> requests_{};
  unsigned head_ = 0, count_ = 0;
};

void measure_put_bw(const Config& cfg, Ucp& ucp, const Buffer& buffer, Child& child, Output& out) {
  for (const std::size_t size : cfg.sizes) {
    std::memset(buffer.data(), fill_byte(size), size);
    Row r{"put_bw", size, kWindow, {}, {}, {}, {}, 0};
    // About 256 KiB of puts between two looks at the clock.
    const std::uint64_t chunk = std::max<std::uint64_t>(kWindow, (std::size_t{256} << 10) / size);
    Window window(ucp);
    auto puts = [&](std::uint64_t n) {
      for (std::uint64_t i = 0; i < n; ++i) window.post(buffer.data(), size);
    };
    auto flush = [&] {
      ucp.flush();
      window.drain();
    };
    timed(cfg.duration_s / 4, chunk, puts, flush);  // warm-up
    for (unsigned rep = 0; rep < cfg.reps; ++rep) add_batch(r, timed(cfg.duration_s, chunk, puts, flush));
    child.check(size, fill_byte(size));
    out.row(r);
  }
}

void measure_put_lat(const Config& cfg, Ucp& ucp, const Buffer& buffer, const Layout& layout, Child& child,
                     Output& out) {
  send_msg(child.fd(), "pong");
  if (const auto m = recv_required(child.fd(), "'ready'"); m != "ready")
    throw Error("the target process answered '" + m + "' to 'pong'");
  const std::uint64_t* landing = buffer.word(layout.landing());
  std::uint64_t* source = buffer.word(layout.ping_source());
  std::uint64_t counter = 0;
  void* previous = nullptr;
  // One round trip: put the next counter value, poll for its echo.
  auto ping = [&](std::uint64_t value) {
    ucp.wait(previous, "ucp_put_nbx (ping)");
    previous = nullptr;
    *source = value;
    previous = ucp.put(source, kLatencySize, layout.landing());
    const auto deadline = Clock::now() + kWaitLimit;
    for (unsigned spins = 0; load(landing) != value; ++spins) {
      ucp.progress();
      if (spins % 1024 == 1023 && Clock::now() > deadline)
        throw Error("put_lat: no echo within " + std::to_string(kWaitLimit.count()) + " s");
    }
  };
  Row r{"put_lat", kLatencySize, 1, {}, {}, {}, {}, 0};
  std::vector<double> samples;
  auto round_trips = [&](std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      ping(++counter);
      samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
    }
  };
  timed(cfg.duration_s / 4, 64, round_trips, [] {});  // warm-up
  for (unsigned rep = 0; rep < cfg.reps; ++rep) {
    samples.clear();
    add_batch(r, timed(cfg.duration_s, 64, round_trips, [] {}));
    r.p50_us.push_back(percentile(samples, 0.50));
    r.p99_us.push_back(percentile(samples, 0.99));
  }
  ping(kStop);
  ucp.wait(previous, "ucp_put_nbx (ping)");
  const std::string done = recv_required(child.fd(), "its pong count");
  if (done != "pong " + std::to_string(counter + 1))
    throw Error("the target process echoed '" + done + "', expected " + std::to_string(counter + 1));
  out.row(r);
}

int run(const Config& cfg, const std::string& tls, Output& out) {
  const Layout layout(std::max(*std::max_element(cfg.sizes.begin(), cfg.sizes.end()), kLatencySize));
  // Fork first: each process opens UCX on its own, nothing of it crosses fork.
  Child child(layout, tls);
  const std::string hello = recv_required(child.fd(), "its buffer address");
  if (hello.starts_with("error: ")) throw Error("target process: " + hello.substr(7));

  Buffer buffer(layout.total());
  Ucp ucp(tls);
  ucp.register_buffer(buffer);
  send_hello(child.fd(), buffer, ucp);
  connect_to_peer(child.fd(), ucp, hello);
  out.header();

  try {
    measure_put_bw(cfg, ucp, buffer, child, out);
    measure_put_lat(cfg, ucp, buffer, layout, child, out);
  } catch (const Error& e) {
    const std::string how = child.ended();
    if (how.empty()) throw;
    throw Error(std::string(e.what()) + " (the target process " + how + ")");
  }
  out.note("UCX " + std::string(ucp_get_version_string()) + ", UCX_TLS=" + tls +
           ", buffers from aligned_alloc registered with ucp_mem_map (address, length); the initiator's lanes: " +
           ucp.lanes());

  // Leave in order: this endpoint flushed and closed while the child still
  // progresses, then the child closes its own while this worker progresses.
  ucp.close_endpoint();
  send_msg(child.fd(), "bye");
  const auto deadline = Clock::now() + kWaitLimit;
  while (!readable(child.fd())) {
    for (int i = 0; i < 256; ++i) ucp.progress();
    if (Clock::now() > deadline) throw Error("the target process did not leave");
  }
  if (const auto m = recv_msg(child.fd(), kWaitLimit); !m || *m != "bye")
    throw Error("the target process answered '" + m.value_or("(closed)") + "' to 'bye'");
  if (const int st = child.finish(std::chrono::seconds(5)); st != 0)
    throw Error("the target process exited with status " + std::to_string(st));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    remora::tools::parse_options<Config>(kOptions, argc, argv, cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%s", kProgram.data(), e.what(), usage().c_str());
    return 2;
  }
  if (cfg.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  // UCX reads UCX_* from the environment in ucp_config_read, in both
  // processes: set before the fork, checked in each before ucp_init.
  if (std::getenv("UCX_TLS") == nullptr && setenv("UCX_TLS", kDefaultTls, 0) != 0) {
    std::fprintf(stderr, "%s: error: setenv UCX_TLS: %s\n", kProgram.data(), std::strerror(errno));
    return 1;
  }
  const std::string tls = std::getenv("UCX_TLS");

  if (cfg.timeout_s == 0) {
    const double planned = static_cast<double>(cfg.sizes.size() + 1) * (cfg.reps + 0.25) * cfg.duration_s;  // + put_lat
    cfg.timeout_s = static_cast<unsigned>(30 + std::ceil(4 * planned));
  }
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  for (const int sig : {SIGALRM, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  alarm(cfg.timeout_s);

  Output out(cfg, tls);
  int rc = 1;
  try {
    rc = run(cfg, tls, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    rc = 1;
  }
  alarm(0);
  return rc;
}
