// A PERSISTENT flush whose write-back fails at the target must not complete
// successfully: the initiator gets Errc::io_error, the endpoint goes to error.
//
// This executable defines msync itself (the Remora core is linked in
// statically, so its calls bind here): while `g_fail_errno` is set, msync
// fails with that errno, as a device reporting an I/O error would make it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "unit_support.hpp"

namespace {
std::atomic<int> g_fail_errno{0};
}  // namespace

extern "C" int msync(void* addr, std::size_t len, int flags) {
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
