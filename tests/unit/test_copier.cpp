// Cross-memory transfers split over two threads (src/core/direct/copier.hpp):
// the bytes land where one process_vm_writev/readv call would put them, the
// helper thread moves the second part (or the caller takes it back), and a
// half that fails makes the whole transfer fail the way the caller expects.
// The transfers here go to this process's own pid, as the same-host tests'
// do; the fork test's child to its own.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/direct/copier.hpp"
#include "unit_support.hpp"

namespace {

using remora::detail::direct::copies_helped;
using remora::detail::direct::copies_taken_back;
using remora::detail::direct::cross_memory;
using remora::detail::direct::kSplitBytes;

constexpr std::size_t kPage = 4096;

std::uint64_t splits() { return copies_helped() + copies_taken_back(); }

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
  return v;
}

/// Anonymous pages of 0xA5, unmapped when it goes.
struct Pages {
  explicit Pages(std::size_t pages) : len(pages * kPage) {
    void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      base = static_cast<std::uint8_t*>(m);
      std::memset(base, 0xA5, len);
    }
  }
  ~Pages() {
    if (base != nullptr) ::munmap(base, len);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  std::size_t len;
  std::uint8_t* base = nullptr;
};

/// Three local segments of `src` (the middle one straddles the middle of
/// the transfer, where the cut falls).
std::vector<iovec> three(std::vector<std::uint8_t>& src) {
  const std::size_t a = src.size() / 3, b = src.size() / 3;
  return {iovec{src.data(), a}, iovec{src.data() + a, b}, iovec{src.data() + a + b, src.size() - a - b}};
}

TEST(Copier, ASplitWriteAndReadMoveEveryByteAndNothingElse) {
  // 300 KiB at 100 bytes into page 1 of 80: not page-aligned at either end.
  const std::size_t len = 300 * 1024, off = kPage + 100;
  Pages far(80);
  ASSERT_NE(far.base, nullptr);
  auto src = pattern(len, 1);
  auto local = three(src);
  const std::uint64_t before = splits();
  const ssize_t moved =
      cross_memory(::getpid(), true, local.data(), local.size(), iovec{far.base + off, len}, /*split=*/true);
  ASSERT_EQ(moved, static_cast<ssize_t>(len)) << std::strerror(errno);
  EXPECT_EQ(splits(), before + 1) << "a transfer of " << len << " bytes was not split";
  EXPECT_EQ(0, std::memcmp(far.base + off, src.data(), len));
  EXPECT_TRUE(std::all_of(far.base, far.base + off, [](std::uint8_t b) { return b == 0xA5; }));
  EXPECT_TRUE(std::all_of(far.base + off + len, far.base + far.len, [](std::uint8_t b) { return b == 0xA5; }));

  // Read it back into three segments in another order of local memory.
  std::vector<std::uint8_t> back(len + 2 * kPage, 0x5A);
  const std::size_t a = 70000, b = 150001;
  std::vector<iovec> into = {iovec{back.data() + len - a + kPage, a}, iovec{back.data(), b},
                             iovec{back.data() + b + 10, len - a - b}};
  ASSERT_EQ(cross_memory(::getpid(), false, into.data(), into.size(), iovec{far.base + off, len}, true),
            static_cast<ssize_t>(len));
  EXPECT_EQ(splits(), before + 2);
  EXPECT_EQ(0, std::memcmp(back.data() + len - a + kPage, src.data(), a));
  EXPECT_EQ(0, std::memcmp(back.data(), src.data() + a, b));
  EXPECT_EQ(0, std::memcmp(back.data() + b + 10, src.data() + a + b, len - a - b));
  EXPECT_TRUE(std::all_of(back.data() + b, back.data() + b + 10, [](std::uint8_t v) { return v == 0x5A; }));
}

TEST(Copier, TheLastBytesOfASplitWriteArePlacedLast) {
  // A program that polls the last byte of a write (as on RDMA NICs, which
  // place a write's bytes in order) must find the rest written once it
  // changes. A watcher looks at the last byte and, when it turns to the
  // round's value, at the last byte of every page before it.
  constexpr int kRounds = 2000;
  const std::size_t len = 256 * 1024;
  Pages far(64);
  ASSERT_NE(far.base, nullptr);
  std::atomic<int> round{0};
  std::atomic<int> early{0};
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    // Relaxed atomic loads of the bytes the other thread's system call
    // writes: the kernel's stores are invisible to the compiler.
    auto at = [&](std::size_t i) { return std::atomic_ref<std::uint8_t>(far.base[i]).load(std::memory_order_acquire); };
    while (!stop.load(std::memory_order_relaxed)) {
      const int r = round.load(std::memory_order_acquire);
      const auto want = static_cast<std::uint8_t>(r);
      if (r == 0 || at(len - 1) != want) continue;
      for (std::size_t i = kPage - 1; i < len; i += kPage)
        if (at(i) != want && round.load(std::memory_order_acquire) == r) {
          early.fetch_add(1);
          break;
        }
      while (round.load(std::memory_order_acquire) == r && !stop.load(std::memory_order_relaxed)) {
      }
    }
  });
  std::vector<std::uint8_t> src(len);
  for (int r = 1; r <= kRounds; ++r) {
    if ((r & 0xff) == 0xA5 || (r & 0xff) == 0) continue;  // the pages' own fill; a value already there
    std::memset(src.data(), r & 0xff, len);
    round.store(r, std::memory_order_release);
    iovec l{src.data(), len};
    ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.base, len}, true), static_cast<ssize_t>(len));
  }
  stop = true;
  watcher.join();
  EXPECT_EQ(early.load(), 0) << "the last byte was placed before the rest of the write";
}

TEST(Copier, SmallTransfersAndUnsplitOnesAreOneCall) {
  Pages far(72);
  ASSERT_NE(far.base, nullptr);
  auto src = pattern(kSplitBytes, 2);
  iovec l{src.data(), kSplitBytes - 1};
  const std::uint64_t before = splits();
  ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.base, kSplitBytes - 1}, true),
            static_cast<ssize_t>(kSplitBytes - 1));
  l.iov_len = kSplitBytes;
  ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.base, kSplitBytes}, /*split=*/false),
            static_cast<ssize_t>(kSplitBytes));
  EXPECT_EQ(splits(), before);
  EXPECT_EQ(0, std::memcmp(far.base, src.data(), kSplitBytes));
  // The smallest split one.
  ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.base + 1, kSplitBytes}, true),
            static_cast<ssize_t>(kSplitBytes));
  EXPECT_EQ(splits(), before + 1);
  EXPECT_EQ(0, std::memcmp(far.base + 1, src.data(), kSplitBytes));
}

TEST(Copier, TheHelperMovesSecondParts) {
  // Either thread may move a second part; over a stream of transfers the
  // helper (awake after the first) must take some. Bounded at 10 s.
  Pages far(64);
  ASSERT_NE(far.base, nullptr);
  auto src = pattern(256 * 1024, 3);
  iovec l{src.data(), src.size()};
  const std::uint64_t helped = copies_helped();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (copies_helped() == helped && std::chrono::steady_clock::now() < until)
    ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.base, src.size()}, true),
              static_cast<ssize_t>(src.size()));
  EXPECT_GT(copies_helped(), helped) << "the helper thread never moved a part in 10 s";
  EXPECT_EQ(0, std::memcmp(far.base, src.data(), src.size()));
}

TEST(Copier, AFaultInEitherPartFailsTheWholeTransfer) {
  const std::size_t len = 256 * 1024;
  auto src = pattern(len, 4);
  iovec l{src.data(), len};
  for (const bool second : {true, false}) {
    SCOPED_TRACE(second ? "the second part unmapped" : "the first part unmapped");
    Pages far(64);
    ASSERT_NE(far.base, nullptr);
    // The part of the range the other thread moves: its first or last page
    // made inaccessible.
    std::uint8_t* hole = second ? far.base + len - kPage : far.base;
    ASSERT_EQ(::mprotect(hole, kPage, PROT_NONE), 0);
    for (const bool write : {true, false}) {
      errno = 0;
      const ssize_t moved = cross_memory(::getpid(), write, &l, 1, iovec{far.base, len}, true);
      EXPECT_LT(moved, static_cast<ssize_t>(len)) << (write ? "write" : "read");
      if (moved < 0) {
        EXPECT_EQ(errno, EFAULT);
      }
    }
  }
}

TEST(Copier, APeerThatIsGoneIsReportedAsGone) {
  // A reaped child's pid: no such process (ESRCH), which the direct path
  // takes as "out of reach" rather than a fault.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::vector<std::uint8_t> src(256 * 1024, 1), far(256 * 1024);
  iovec l{src.data(), src.size()};
  errno = 0;
  EXPECT_EQ(cross_memory(child, true, &l, 1, iovec{far.data(), far.size()}, true), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(Copier, ConcurrentCallersEachMoveTheirOwnBytes) {
  // One helper, four callers: whoever does not get it moves alone.
  constexpr int kThreads = 4, kRounds = 40;
  const std::size_t len = 320 * 1024;
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t, len, &bad] {
      Pages far(96);
      if (far.base == nullptr) {
        bad[t] = -1;
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        auto src = pattern(len, static_cast<unsigned>(t * 100 + r));
        iovec l{src.data(), len};
        if (cross_memory(::getpid(), true, &l, 1, iovec{far.base + r, len}, true) != static_cast<ssize_t>(len) ||
            std::memcmp(far.base + r, src.data(), len) != 0)
          ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(Copier, AChildAfterForkHasItsOwnHelper) {
  // Make sure this process has a helper, then fork: the child's transfers
  // must neither wait for the parent's thread (not in the child) nor fail.
  if (unit::kUnderThreadSanitizer)
    GTEST_SKIP() << "ThreadSanitizer stops a child of a threaded process that starts a thread";
  {
    std::vector<std::uint8_t> src(kSplitBytes * 2, 1), far(kSplitBytes * 2);
    iovec l{src.data(), src.size()};
    ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.data(), far.size()}, true),
              static_cast<ssize_t>(src.size()));
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No gtest here: the exit status says how it went.
    ::alarm(20);
    auto src = pattern(256 * 1024, 5);
    std::vector<std::uint8_t> far(src.size());
    iovec l{src.data(), src.size()};
    const std::uint64_t helped = copies_helped();
    for (int i = 0; i < 2000 && copies_helped() == helped; ++i)
      if (cross_memory(::getpid(), true, &l, 1, iovec{far.data(), far.size()}, true) !=
              static_cast<ssize_t>(src.size()) ||
          std::memcmp(far.data(), src.data(), src.size()) != 0)
        ::_exit(2);
    ::_exit(copies_helped() > helped ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: wrong bytes or a failed transfer; 3: no helper in the child";
}

}  // namespace
