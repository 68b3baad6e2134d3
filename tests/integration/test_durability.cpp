// The target process dies.
//  - KillNineDurability: bytes made PERSISTENT (flush completed) survive a
//    kill -9 of the target and a reopen of the file; the flushed pages are
//    no longer dirty in the page cache when the flush completes.
//  - PeerDeath: operations outstanding when the target is killed all
//    complete (success or an error status) within a bounded time, each
//    cookie exactly once; nothing hangs; the endpoint reports `lost`.
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "harness.hpp"

using namespace remora;
using namespace remora_it;

namespace {

using Clock = std::chrono::steady_clock;

/// Dirty kilobytes (shared + private) of `pid`'s mappings of `path`, from
/// /proc/<pid>/smaps. nullopt when the mapping is not found.
std::optional<long> dirty_kb(pid_t pid, const std::string& path) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  if (!in) return std::nullopt;
  std::string line;
  bool inside = false, found = false;
  long kb = 0;
  while (std::getline(in, line)) {
    // A mapping header: "start-end perms offset dev inode [path]".
    const bool header = !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
                        line.find('-') != std::string::npos && line.find(':') > line.find(' ');
    if (header) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
      found = found || inside;
      continue;
    }
    if (!inside) continue;
    for (const char* key : {"Shared_Dirty:", "Private_Dirty:"}) {
      if (line.rfind(key, 0) == 0) {
        std::istringstream v(line.substr(std::strlen(key)));
        long n = 0;
        v >> n;
        kb += n;
      }
    }
  }
  if (!found) return std::nullopt;
  return kb;
}

std::vector<std::uint8_t> read_file(const std::string& path, std::size_t off, std::size_t len) {
  std::vector<std::uint8_t> out(len);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {};
  ssize_t n = pread(fd, out.data(), len, static_cast<off_t>(off));
  ::close(fd);
  if (n != static_cast<ssize_t>(len)) return {};
  return out;
}

TEST(Durability, PersistentFlushSurvivesKillNine) {
  // On disk (the build tree), not tmpfs: on tmpfs pages are never "clean".
  TempDir dir(scratch_base());
  ASSERT_FALSE(dir.path().empty());
  struct statfs fs {};
  const bool tmpfs = ::statfs(dir.path().c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  const std::string path = dir.file("durable.bin");
  constexpr std::size_t kFileSize = 256 * 1024;
  auto peer = Peer::start({"--regions", "rw", "--file", path, "--file-size", std::to_string(kFileSize)});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  const RemoteRegion& f = peer->region("file");
  ASSERT_TRUE(f.persistent());
  ASSERT_EQ(f.length(), kFileSize);

  // Two ranges: a gather list of three segments at 5000, one page at 200000.
  fill(client.buf(), 20000, 0x71);
  fill(client.buf() + 65536, 4096, 0x72);
  Segment a[3] = {client.seg(0, 7000), client.seg(7000, 3), client.seg(7003, 12997)};
  Segment b = client.seg(65536, 4096);
  ASSERT_TRUE(ep.write(a, f, 5000, 1).ok());
  ASSERT_TRUE(ep.write({&b, 1}, f, 200000, 2).ok());
  auto got = client.collect(2);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& c : got) ASSERT_FALSE(c.status) << c.status.message();

  // Written but only made visible: the pages are dirty in the target.
  ASSERT_TRUE(ep.flush(f, 0, kFileSize, FlushType::visibility, 3).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(3, &c));
  ASSERT_FALSE(c.status);
  // With the same-host direct path (REMORA_SAMEHOST=1) this process maps
  // the file itself and the writes dirtied the pages through its own mapping
  // (docs/design.md, "Shared-mapped regions"): the file's dirty pages are
  // counted in both processes.
  auto both_dirty_kb = [&]() -> std::optional<long> {
    auto there = dirty_kb(peer->proc().pid(), path);
    if (!there) return std::nullopt;
    return *there + dirty_kb(::getpid(), path).value_or(0);
  };
  auto before = both_dirty_kb();
  ASSERT_TRUE(before.has_value()) << "no mapping of " << path << " in the peer's smaps";
  EXPECT_GT(*before, 0) << "expected dirty pages before the PERSISTENT flush";

  ASSERT_TRUE(ep.flush(f, 5000, 20000, FlushType::persistent, 4).ok());
  ASSERT_TRUE(ep.flush(f, 200000, 4096, FlushType::persistent, 5).ok());
  got = client.collect(2);
  ASSERT_EQ(got.size(), 2u);
  for (const auto& x : got) {
    EXPECT_FALSE(x.status) << x.status.message();
    EXPECT_EQ(x.op, Opcode::flush);
  }
  EXPECT_EQ(got[0].cookie, 4u);
  EXPECT_EQ(got[1].cookie, 5u);
  auto after = both_dirty_kb();
  ASSERT_TRUE(after.has_value());
  if (tmpfs) {
    std::printf("note: %s is on tmpfs; the page-cache dirtiness check does not apply\n", path.c_str());
  } else {
    EXPECT_EQ(*after, 0) << "flushed pages still dirty after the PERSISTENT flush completed";
  }

  // kill -9 right after the flush completion, then reopen the file.
  peer->proc().kill_now();
  ASSERT_TRUE(peer->proc().exited());
  EXPECT_TRUE(expect_event(ep, ConnectionEventType::lost, 10s));

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::size_t>(st.st_size), kFileSize);
  auto r1 = read_file(path, 5000, 20000);
  auto r2 = read_file(path, 200000, 4096);
  ASSERT_EQ(r1.size(), 20000u);
  ASSERT_EQ(r2.size(), 4096u);
  EXPECT_EQ(0, std::memcmp(r1.data(), client.buf(), 20000));
  EXPECT_EQ(0, std::memcmp(r2.data(), client.buf() + 65536, 4096));
  // Nothing else was written.
  auto z1 = read_file(path, 0, 5000);
  auto z2 = read_file(path, 25000, 200000 - 25000);
  EXPECT_EQ(z1, std::vector<std::uint8_t>(5000, 0));
  EXPECT_EQ(z2, std::vector<std::uint8_t>(200000 - 25000, 0));
}

// Post a mix of operations and kill -9 the target while they are outstanding.
// `stop_first` stops the target (SIGSTOP) before posting, so every operation
// is certainly outstanding when it dies; otherwise it dies mid-stream.
void outstanding_operations_complete_on_peer_death(bool stop_first) {
  constexpr std::size_t kRegion = 1 << 20;
  auto peer = Peer::start({"--regions", "rw,ro,wo", "--size", std::to_string(kRegion)});
  ASSERT_TRUE(peer);
  Client client;
  // On the transport when the target is stopped first: nothing completes
  // there while it is stopped, which the test checks. The same-host direct
  // path, like an RDMA NIC, places writes in a stopped process's memory.
  client.same_host = !stop_first;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200), nullptr, "127.0.0.1", 512));
  const RemoteRegion& rw = peer->region("rw");
  const RemoteRegion& ro = peer->region("ro");
  fill(client.buf(), 1 << 20, 0x42);

  if (stop_first) {
    ASSERT_TRUE(peer->proc().stop()) << "the peer did not stop";
  }

  std::set<std::uint64_t> signalled, unsignalled;
  std::size_t refused_full = 0;
  const std::size_t chunk = 64 * 1024;
  for (std::uint64_t i = 0; i < 400; ++i) {
    const std::uint64_t cookie = 0x10000 + i;
    const std::size_t off = (i * chunk) % kRegion;
    Result<void> r;
    bool quiet = false;
    switch (i % 6) {
      case 0: {
        Segment s = client.seg(off % (1 << 20), chunk);
        r = ep.write({&s, 1}, rw, off, cookie);
        break;
      }
      case 1: {
        Segment s = client.seg((1 << 20) + off % (1 << 20), chunk);
        r = ep.read({&s, 1}, ro, off, cookie);
        break;
      }
      case 2: r = ep.flush(rw, 0, kRegion, FlushType::visibility, cookie); break;
      case 3: r = ep.atomic_write(rw, 8 * (i % 64), i, cookie); break;
      case 4: {
        Segment s = client.seg(0, 16384);
        r = ep.write({&s, 1}, rw, off, cookie, PostFlags::unsignalled);
        quiet = true;
        break;
      }
      case 5: {
        Segment s = client.seg(2 << 20, 4096);
        r = ep.read({&s, 1}, rw, off, cookie, PostFlags::fence);
        break;
      }
    }
    if (!r) {
      ASSERT_EQ(r.error(), Errc::queue_full) << "post " << i << ": " << r.error().message();
      ++refused_full;
      continue;
    }
    (quiet ? unsignalled : signalled).insert(cookie);
  }
  ASSERT_GT(signalled.size(), 50u);

  const auto killed_at = Clock::now();
  peer->proc().kill_now();
  ASSERT_TRUE(peer->proc().exited());

  // Every signalled cookie exactly once; unsignalled ones at most once (only
  // on error); nothing unknown; all within 10 s.
  std::map<std::uint64_t, int> seen;
  std::map<int, int> statuses;
  Completion buf[64];
  std::size_t outstanding_signalled = signalled.size();
  while (outstanding_signalled > 0 && Clock::now() - killed_at < 10s) {
    auto n = client.cq().wait(buf, 500ms);
    if (!n) continue;
    for (std::size_t k = 0; k < *n; ++k) {
      const Completion& c = buf[k];
      EXPECT_EQ(c.endpoint_id, ep.id());
      const int count = ++seen[c.cookie];
      EXPECT_EQ(count, 1) << "cookie " << c.cookie << " completed twice";
      ++statuses[c.status.value()];
      if (signalled.count(c.cookie)) {
        if (count == 1) --outstanding_signalled;
      } else if (unsignalled.count(c.cookie)) {
        EXPECT_TRUE(c.status) << "unsignalled cookie " << c.cookie << " reported a success";
      } else {
        ADD_FAILURE() << "unknown cookie " << c.cookie;
      }
      if (c.status) {
        EXPECT_TRUE(c.status == Errc::flushed || c.status == Errc::remote_access || c.status == Errc::not_connected)
            << "cookie " << c.cookie << ": " << c.status.message();
      }
    }
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at);
  EXPECT_EQ(outstanding_signalled, 0u) << outstanding_signalled << " of " << signalled.size()
                                       << " signalled operations never completed within 10 s";
  // Late duplicates?
  auto extra = client.collect(64, 300ms);
  for (const auto& c : extra) {
    EXPECT_TRUE(unsignalled.count(c.cookie) && !seen.count(c.cookie))
        << "late or duplicate completion for cookie " << c.cookie;
    ++seen[c.cookie];
  }
  std::ostringstream summary;
  summary << "posted " << signalled.size() << " signalled + " << unsignalled.size() << " unsignalled (" << refused_full
          << " refused: queue full); all done " << took.count() << " ms after the kill; statuses:";
  for (auto [s, n] : statuses) summary << " " << s << "x" << n;
  std::printf("%s\n", summary.str().c_str());
  ::testing::Test::RecordProperty("summary", summary.str());
  if (stop_first) {
    // Nothing could have succeeded on a stopped target.
    EXPECT_EQ(statuses.count(0), 0u) << "an operation succeeded although the target was stopped";
  }

  EXPECT_TRUE(expect_event(ep, ConnectionEventType::lost, 5s));
  EXPECT_EQ(ep.state(), EndpointState::error);
  Segment s = client.seg(0, 8);
  ASSERT_TRUE(ep.write({&s, 1}, rw, 0, 0x99).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(0x99, &c, 2s));
  EXPECT_EQ(c.status, Errc::flushed);
  const auto t0 = Clock::now();
  ep.close();
  EXPECT_LT(Clock::now() - t0, 5s) << "closing the endpoint hung";
}

// The other direction: an initiator process dies (kill -9) while connected.
// The target notices (`lost`), keeps its memory intact and keeps serving its
// other connections and new ones.
TEST(PeerDeath, TargetKeepsServingWhenAnInitiatorIsKilled) {
  auto peer = Peer::start({"--regions", "rw,ro"});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint mine;
  ASSERT_TRUE(client.connect(mine, peer->port(), make_pdata(200)));  // conn 1
  ASSERT_TRUE(peer->wait_event(1, "established"));

  auto other = Process::spawn({peer_path(), "--client", "127.0.0.1:" + std::to_string(peer->port()), "--bind",
                               "127.0.0.1", "--desc", to_hex(peer->region("rw").serialize()), "--hold"});
  ASSERT_TRUE(other);
  auto verdict = other->wait_line("CLIENT ", 15s);
  ASSERT_TRUE(verdict) << other->transcript();
  ASSERT_EQ(verdict->rfind("CLIENT ok", 0), 0u) << *verdict;
  ASSERT_TRUE(peer->wait_event(2, "established"));
  other->kill_now();
  EXPECT_TRUE(peer->proc().wait_line("EVENT conn=2 type=lost", 10s)) << peer->proc().transcript();

  const RemoteRegion& rw = peer->region("rw");
  fill(client.buf(), 4096, 0x55);
  Segment w = client.seg(0, 4096), r = client.seg(8192, 4096);
  ASSERT_TRUE(mine.write({&w, 1}, rw, 32768, 1).ok());
  ASSERT_TRUE(mine.read({&r, 1}, rw, 32768, 2).ok());
  ASSERT_TRUE(mine.atomic_write(rw, 40960, 77, 3).ok());
  ASSERT_TRUE(mine.flush(rw, 0, peer->region_size(), FlushType::visibility, 4).ok());
  auto got = client.collect(4);
  ASSERT_EQ(got.size(), 4u);
  for (const auto& c : got) EXPECT_FALSE(c.status) << c.cookie << ": " << c.status.message();
  EXPECT_EQ(0, std::memcmp(client.buf(), client.buf() + 8192, 4096));
  Endpoint late;
  ASSERT_TRUE(client.connect(late, peer->port(), make_pdata(200)));
  std::string guards;
  auto d = peer->dump(&guards);
  ASSERT_TRUE(d);
  EXPECT_EQ(guards, "ok");
  EXPECT_TRUE(guards_intact(*d, 2, peer->region_size()));
  EXPECT_TRUE(region_pristine(*d, 1, peer->region_size()));
  mine.close();
  late.close();
  auto st = peer->quit();
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
}

TEST(PeerDeath, OperationsOutstandingOnStoppedThenKilledTargetAllComplete) {
  outstanding_operations_complete_on_peer_death(true);
}

TEST(PeerDeath, OperationsInFlightWhenTargetIsKilledAllComplete) {
  outstanding_operations_complete_on_peer_death(false);
}

}  // namespace
