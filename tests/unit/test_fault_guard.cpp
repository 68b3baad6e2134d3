// Copies through a mapping whose file is cut short under it
// (src/core/direct/fault_guard.hpp): the copy is reported as failed and the
// process goes on; a SIGBUS anywhere else goes where it went before. ctest
// runs every test in a process of its own, so each starts with the handler
// not yet installed.
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "core/direct/copier.hpp"
#include "core/direct/fault_guard.hpp"
#include "unit_support.hpp"

namespace {

using namespace unit;
namespace direct = remora::detail::direct;

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/// A shared mapping of `pages` pages of a memory file, the file then cut to
/// its first `kept` pages: touching a page past them raises SIGBUS.
class CutFile {
 public:
  CutFile(std::size_t pages, std::size_t kept) : len_(pages * kPage) {
    fd_ = ::memfd_create("remora-test-cut", MFD_CLOEXEC);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(len_)) != 0) return;
    void* m = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) return;
    map_ = static_cast<char*>(m);
    if (::ftruncate(fd_, static_cast<off_t>(kept * kPage)) != 0) {
      ::munmap(map_, len_);
      map_ = nullptr;
    }
  }
  ~CutFile() {
    if (map_ != nullptr) ::munmap(map_, len_);
    if (fd_ >= 0) ::close(fd_);
  }
  CutFile(const CutFile&) = delete;
  CutFile& operator=(const CutFile&) = delete;
  bool ok() const { return map_ != nullptr; }
  char* at(std::size_t offset) const { return map_ + offset; }

 private:
  int fd_ = -1;
  std::size_t len_ = 0;
  char* map_ = nullptr;
};

// ThreadSanitizer does not pass a fault's SIGBUS on to the program's
// handlers (the process ends by it even with one installed).
#define SKIP_UNDER_TSAN() \
  if (kUnderThreadSanitizer) GTEST_SKIP() << "ThreadSanitizer does not pass a fault's SIGBUS to the program's handler"

std::vector<char> pattern(std::size_t n, int seed) {
  std::vector<char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + static_cast<std::size_t>(seed)) % 251);
  return v;
}

TEST(FaultGuard, ACopyIntoPagesCutFromItsFileFailsWithEfaultAndTheProcessGoesOn) {
  SKIP_UNDER_TSAN();
  CutFile cut(4, 1);
  ASSERT_TRUE(cut.ok());
  auto src = pattern(3 * kPage, 1);
  const std::size_t before = direct::faults_caught();
  // One piece across the end of the file: nothing whole, -1.
  iovec one{src.data(), src.size()};
  errno = 0;
  EXPECT_EQ(direct::cross_memory(direct::kThisProcess, true, &one, 1, iovec{cut.at(0), src.size()}, false), -1);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(direct::faults_caught(), before + 1);
  // Two pieces, the first inside the file: its bytes, with EFAULT.
  iovec two[2] = {{src.data(), kPage}, {src.data() + kPage, 2 * kPage}};
  errno = 0;
  EXPECT_EQ(direct::cross_memory(direct::kThisProcess, true, two, 2, iovec{cut.at(0), src.size()}, false),
            static_cast<ssize_t>(kPage));
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(0, std::memcmp(cut.at(0), src.data(), kPage));
  EXPECT_EQ(direct::faults_caught(), before + 2);
  // Reads from the cut pages too.
  std::vector<char> back(2 * kPage);
  iovec into{back.data(), back.size()};
  errno = 0;
  EXPECT_LT(direct::cross_memory(direct::kThisProcess, false, &into, 1, iovec{cut.at(kPage), back.size()}, false), 0);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(direct::faults_caught(), before + 3);
}

TEST(FaultGuard, ASplitCopyWhosePartPastTheEndFaultsIsShortAndTheHelperGoesOn) {
  SKIP_UNDER_TSAN();
  // 512 KiB split over this thread and the helper, the file cut at 320 KiB:
  // the part above the cut (the helper's, or this thread's when it took it
  // back) faults.
  const std::size_t len = 512 * 1024;
  ASSERT_GE(len, direct::kSplitBytes);
  CutFile cut(len / kPage, 320 * 1024 / kPage);
  ASSERT_TRUE(cut.ok());
  auto src = pattern(len, 2);
  for (int round = 0; round < 20; ++round) {
    iovec l{src.data(), len};
    errno = 0;
    const ssize_t moved = direct::cross_memory(direct::kThisProcess, true, &l, 1, iovec{cut.at(0), len}, true);
    EXPECT_LT(moved, static_cast<ssize_t>(len)) << "round " << round;
    EXPECT_EQ(errno, EFAULT) << "round " << round;
  }
  // The helper thread lives on: whole copies still split and land.
  std::vector<char> dst(len);
  auto next = pattern(len, 3);
  for (int round = 0; round < 20; ++round) {
    iovec l{next.data(), len};
    ASSERT_EQ(direct::cross_memory(direct::kThisProcess, true, &l, 1, iovec{dst.data(), len}, true),
              static_cast<ssize_t>(len));
    ASSERT_EQ(0, std::memcmp(dst.data(), next.data(), len)) << "round " << round;
  }
}

TEST(FaultGuard, AListOfWritesPlacesThoseBeforeTheCutPages) {
  SKIP_UNDER_TSAN();
  // Four writes of 128 KiB, the file cut after the second: on two threads,
  // the bytes of whole writes placed are the first two's at most, and the
  // process goes on.
  const std::size_t each = 128 * 1024;
  CutFile cut(4 * each / kPage, 2 * each / kPage);
  ASSERT_TRUE(cut.ok());
  auto src = pattern(4 * each, 4);
  iovec local[4], remote[4];
  for (std::size_t k = 0; k < 4; ++k) {
    local[k] = iovec{src.data() + k * each, each};
    remote[k] = iovec{cut.at(k * each), each};
  }
  for (bool split : {false, true}) {
    errno = 0;
    const ssize_t placed = direct::write_ranges(direct::kThisProcess, local, 4, remote, 4, split);
    EXPECT_GE(placed, 0) << "split " << split;
    EXPECT_LE(placed, static_cast<ssize_t>(2 * each)) << "split " << split;
    EXPECT_EQ(placed % static_cast<ssize_t>(each), 0) << "split " << split;
    EXPECT_EQ(errno, EFAULT) << "split " << split;
    EXPECT_EQ(0, std::memcmp(cut.at(0), src.data(), static_cast<std::size_t>(placed)));
  }
}

sigjmp_buf user_env;
volatile sig_atomic_t user_calls = 0;
void user_handler(int, siginfo_t*, void*) {
  user_calls = user_calls + 1;
  siglongjmp(user_env, 1);
}

TEST(FaultGuard, ASigbusOutsideAGuardedCopyGoesToTheHandlerInstalledBefore) {
  SKIP_UNDER_TSAN();
  if (direct::fault_guard_installed())
    GTEST_SKIP() << "the guard was installed by an earlier test of this process (ctest runs each alone)";
  CutFile cut(2, 1);
  ASSERT_TRUE(cut.ok());
  struct sigaction mine {};
  struct sigaction old {};
  mine.sa_sigaction = user_handler;
  mine.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGBUS, &mine, &old), 0);
  ASSERT_TRUE(direct::guard_faults());  // installed over the user's, keeping it
  // A touch of the cut page by this program, not by a guarded copy.
  if (sigsetjmp(user_env, 0) == 0) {
    *static_cast<volatile char*>(cut.at(kPage)) = 1;
    ADD_FAILURE() << "no SIGBUS from a page past the end of the file";
  }
  EXPECT_EQ(user_calls, 1);
  // A guarded copy over the same page: caught by the guard, not the user's.
  char byte = 7;
  iovec l{&byte, 1};
  EXPECT_EQ(direct::cross_memory(direct::kThisProcess, true, &l, 1, iovec{cut.at(kPage), 1}, false), -1);
  EXPECT_EQ(user_calls, 1);
  // And the user's again after it.
  if (sigsetjmp(user_env, 0) == 0) {
    *static_cast<volatile char*>(cut.at(kPage)) = 2;
    ADD_FAILURE() << "no SIGBUS from a page past the end of the file";
  }
  EXPECT_EQ(user_calls, 2);
  ::sigaction(SIGBUS, &old, nullptr);
}

TEST(FaultGuard, ASigbusOutsideAGuardedCopyStillEndsTheProcess) {
  if (kUnderThreadSanitizer) GTEST_SKIP() << "fork: ThreadSanitizer stops such children";
  CutFile cut(2, 1);
  ASSERT_TRUE(cut.ok());
  ASSERT_TRUE(direct::guard_faults());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    *static_cast<volatile char*>(cut.at(kPage)) = 1;
    ::_exit(0);  // survived: the test fails
  }
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 1000 && (got = ::waitpid(child, &status, WNOHANG)) == 0; ++i) std::this_thread::sleep_for(10ms);
  if (got == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the child neither died nor exited in 10 s";
  }
  // Killed by the signal; under AddressSanitizer, whose handler was there
  // before, a report and exit status 1.
  EXPECT_TRUE(WIFSIGNALED(status) ? WTERMSIG(status) == SIGBUS : WIFEXITED(status) && WEXITSTATUS(status) != 0)
      << "status " << status;
}

}  // namespace
