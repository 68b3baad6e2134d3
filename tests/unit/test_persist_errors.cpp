// A PERSISTENT flush whose write-back fails at the target must not complete
// successfully: the initiator gets Errc::io_error, the endpoint goes to error.
//
// This executable defines msync itself (the Remora core is linked in
// statically, so its calls bind here): while `g_fail_errno` is set, msync
// fails with that errno, as a device reporting an I/O error would make it;
// while `g_block` is set a write-back (MS_SYNC) waits (at most 10 s), as a
// slow device would.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "unit_support.hpp"

namespace {
std::atomic<int> g_fail_errno{0};
std::atomic<bool> g_block{false}, g_blocked{false};
}  // namespace

extern "C" int msync(void* addr, std::size_t len, int flags) {
  if (g_block && (flags & MS_SYNC)) {  // write-backs only, not registration's range check
    g_blocked = true;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (g_block && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g_blocked = false;
  }
  if (int e = g_fail_errno.load(); e != 0) {
    errno = e;
    return -1;
  }
  return static_cast<int>(::syscall(SYS_msync, addr, len, flags));
}

namespace {

using namespace unit;

struct FileRegion {
  std::string path = ::testing::TempDir() + "remora-unit-persist-" + std::to_string(::getpid());
  std::size_t size = 8192;
  void* mem = MAP_FAILED;
  FileRegion() {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) throw std::runtime_error("temp file");
    mem = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mem == MAP_FAILED) throw std::runtime_error("mmap");
  }
  ~FileRegion() {
    ::munmap(mem, size);
    ::unlink(path.c_str());
  }
};

void flush_with_msync_failing(int err, bool mapped_by_remora = false) {
  Pair p;
  FileRegion file;
  // Either the caller's own shared mapping declared persistent, or a file
  // Remora maps itself (libpmem2, page granularity on a non-DAX file).
  auto region = mapped_by_remora ? MUST(p.tz.map_file(file.path, file.size, Access::all))
                                 : MUST(p.tz.register_memory(file.mem, file.size, Access::all, true));
  auto remote = MUST(region.remote());
  Segment s(p.lmr, 0, 64);
  std::memset(p.local_mem.data(), 0x3C, 64);
  // Succeeds while msync does ...
  ASSERT_OK(p.iep.write({&s, 1}, remote, 0, 1));
  ASSERT_OK(p.iep.flush(remote, 0, 64, FlushType::persistent, 2));
  auto ok = collect(p.icq, 2);
  ASSERT_EQ(ok.size(), 2u) << describe(ok);
  for (auto& c : ok) EXPECT_FALSE(c.status) << describe(c);
  // ... and reports the failure, never success, when it fails.
  g_fail_errno = err;
  ASSERT_OK(p.iep.write({&s, 1}, remote, 128, 3));
  ASSERT_OK(p.iep.flush(remote, 128, 64, FlushType::persistent, 4));
  auto bad = collect(p.icq, 2);
  g_fail_errno = 0;
  ASSERT_EQ(bad.size(), 2u) << describe(bad);
  EXPECT_FALSE(bad[0].status) << describe(bad[0]);  // the write itself landed
  EXPECT_EQ(bad[1].cookie, 4u);
  EXPECT_EQ(bad[1].status, make_error_code(Errc::io_error)) << describe(bad[1]);
  EXPECT_EQ(p.iep.state(), EndpointState::error);
  region.close();
}

TEST(PersistErrors, FlushReportsIoErrorWhenWriteBackFailsWithEio) { flush_with_msync_failing(EIO); }
TEST(PersistErrors, FlushReportsIoErrorWhenTheRangeIsNoLongerMapped) { flush_with_msync_failing(ENOMEM); }
TEST(PersistErrors, FlushOfAMappedFileReportsIoErrorWhenWriteBackFails) { flush_with_msync_failing(EIO, true); }

}  // namespace

namespace {

// A slow write-back holds up nothing but its own flush: while one
// connection's PERSISTENT flush waits for the device, another connection
// into the same target zone is served (its atomic write needs the target's
// agent) and the zone registers memory.
TEST(PersistErrors, SlowWriteBackDoesNotHoldUpTheZonesOtherConnections) {
  // The target's write-back: on the same-host direct path the initiator
  // writes a file region back itself, on its own thread.
  PairOptions o;
  o.fabric.same_host = false;
  Pair p(o);
  FileRegion file;
  auto region = MUST(p.tz.register_memory(file.mem, file.size, Access::all, true));
  auto remote = MUST(region.remote());
  // A second connection into the target zone, with its own queue.
  auto icq2 = MUST(p.iz.create_cq());
  EndpointOptions io, to;
  io.send_cq = &icq2;
  to.send_cq = &p.tcq;
  auto iep2 = MUST(p.iz.create_endpoint(io));
  auto tep2 = MUST(p.tz.create_endpoint(to));
  ASSERT_OK(iep2.connect("127.0.0.1", p.lis.port()));
  auto req = MUST(p.lis.next_request(kWait));
  ASSERT_OK(req.accept(tep2));
  ASSERT_EQ(MUST(iep2.next_event(kWait)).type, ConnectionEventType::established);

  struct Release {
    ~Release() { g_block = false; }
  } release;
  g_block = true;
  Segment s(p.lmr, 0, 64);
  std::memset(p.local_mem.data(), 0x5A, 64);
  ASSERT_OK(p.iep.write({&s, 1}, remote, 0, 1));
  ASSERT_OK(p.iep.flush(remote, 0, 64, FlushType::persistent, 2));
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!g_blocked && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(g_blocked) << "the write-back never started";

  // Meanwhile: the other connection's atomic write is answered ...
  ASSERT_OK(iep2.atomic_write(p.rr, 8, 0x1122334455667788ULL, 7));
  auto other = collect(icq2, 1, std::chrono::seconds(5));
  ASSERT_EQ(other.size(), 1u) << "the zone's other connection waited for the write-back";
  EXPECT_FALSE(other[0].status) << describe(other[0]);
  std::uint64_t v = 0;
  std::memcpy(&v, p.target_mem.data() + 8, 8);
  EXPECT_EQ(v, 0x1122334455667788ULL);
  // ... the zone registers memory, and the flush is still waiting.
  std::vector<std::uint8_t> more(4096);
  ASSERT_OK(p.tz.register_memory(more.data(), more.size(), Access::all));
  EXPECT_TRUE(g_blocked);
  auto early = collect(p.icq, 2, std::chrono::milliseconds(50));
  ASSERT_EQ(early.size(), 1u) << describe(early);  // the write only
  EXPECT_EQ(early[0].cookie, 1u);

  g_block = false;
  auto flushed = collect(p.icq, 1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].cookie, 2u);
  EXPECT_FALSE(flushed[0].status) << describe(flushed[0]);
  EXPECT_EQ(p.iep.state(), EndpointState::connected);
}

// A region closed while a peer's write-back of it waits for the device:
// close() returns only after that write-back finished, and a flush that
// reaches the target after the close is refused, touching nothing.
TEST(PersistErrors, CloseWaitsForARunningWriteBackAndLaterFlushesAreRefused) {
  // The target's write-back (see above).
  PairOptions o;
  o.fabric.same_host = false;
  Pair p(o);
  FileRegion file;
  auto region = MUST(p.tz.register_memory(file.mem, file.size, Access::all, true));
  auto remote = MUST(region.remote());
  struct Release {
    ~Release() { g_block = false; }
  } release;
  g_block = true;
  ASSERT_OK(p.iep.flush(remote, 0, 64, FlushType::persistent, 1));
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!g_blocked && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(g_blocked) << "the write-back never started";
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    region.close();
    closed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(closed) << "close() returned while the write-back was running";
  g_block = false;
  closer.join();
  auto first = collect(p.icq, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_FALSE(first[0].status) << describe(first[0]);
  ASSERT_OK(p.iep.flush(remote, 0, 64, FlushType::persistent, 2));
  auto second = collect(p.icq, 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].status, make_error_code(Errc::remote_access)) << describe(second[0]);
}

}  // namespace
