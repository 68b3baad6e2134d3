// Cross-memory transfers split over two threads (src/core/direct/copier.hpp):
// the bytes land where one process_vm_writev/readv call would put them, the
// helper thread moves the second part (or the caller takes it back), and a
// half that fails makes the whole transfer fail the way the caller expects.
// The transfers here go to this process's own pid, as the same-host tests'
// do; the fork test's child to its own. write_ranges (the writes of a
// batch) is tested the same way: every byte where one call would put it,
// the last bytes of each write after the writes before it, writes into the
// same bytes leaving the last one posted, and a fault counting only writes
// placed in full; read_ranges (the reads of a batch) the same way, cut where
// the bytes land here. Copies through a mapping (the pid kThisProcess) are
// cut and ordered the same way.
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
#include "core/direct/split_choice.hpp"
#include "unit_support.hpp"

namespace {

using remora::detail::direct::copies_helped;
using remora::detail::direct::copies_taken_back;
using remora::detail::direct::cross_memory;
using remora::detail::direct::kLastBytes;
using remora::detail::direct::kSplitBytes;
using remora::detail::direct::kThisProcess;
using remora::detail::direct::read_ranges;
using remora::detail::direct::write_ranges;

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

/// A split write of `len` bytes from three local segments at 100 bytes
/// into page 1 of 80 (not page-aligned at either end) by process `pid`
/// (this one: its own pid, or kThisProcess, the pages as a mapping), then a
/// split read of it back into three segments in another order of local
/// memory: every byte where it belongs and nothing else touched, each
/// transfer split.
void split_write_and_read(pid_t pid, std::size_t len, unsigned seed) {
  const std::size_t off = kPage + 100;
  Pages far(80);
  ASSERT_NE(far.base, nullptr);
  auto src = pattern(len, seed);
  auto local = three(src);
  const std::uint64_t before = splits();
  const ssize_t moved = cross_memory(pid, true, local.data(), local.size(), iovec{far.base + off, len}, /*split=*/true);
  ASSERT_EQ(moved, static_cast<ssize_t>(len)) << std::strerror(errno);
  EXPECT_EQ(splits(), before + 1) << "a transfer of " << len << " bytes was not split";
  EXPECT_EQ(0, std::memcmp(far.base + off, src.data(), len));
  EXPECT_TRUE(std::all_of(far.base, far.base + off, [](std::uint8_t b) { return b == 0xA5; }));
  EXPECT_TRUE(std::all_of(far.base + off + len, far.base + far.len, [](std::uint8_t b) { return b == 0xA5; }));

  std::vector<std::uint8_t> back(len + 2 * kPage, 0x5A);
  const std::size_t a = 70000, b = 150001;
  std::vector<iovec> into = {iovec{back.data() + len - a + kPage, a}, iovec{back.data(), b},
                             iovec{back.data() + b + 10, len - a - b}};
  ASSERT_EQ(cross_memory(pid, false, into.data(), into.size(), iovec{far.base + off, len}, true),
            static_cast<ssize_t>(len));
  EXPECT_EQ(splits(), before + 2);
  EXPECT_EQ(0, std::memcmp(back.data() + len - a + kPage, src.data(), a));
  EXPECT_EQ(0, std::memcmp(back.data(), src.data() + a, b));
  EXPECT_EQ(0, std::memcmp(back.data() + b + 10, src.data() + a + b, len - a - b));
  EXPECT_TRUE(std::all_of(back.data() + b, back.data() + b + 10, [](std::uint8_t v) { return v == 0x5A; }));
}

TEST(Copier, ASplitWriteAndReadMoveEveryByteAndNothingElse) { split_write_and_read(::getpid(), 300 * 1024, 1); }

/// What a program polling the last byte of a write sees (as on RDMA NICs,
/// which place a write's bytes in order): for rounds 1 to `rounds` (but for
/// the pages' own fill and 0, values already there), `place(r)` writes the
/// byte r over all of [base, base + len), while a watcher thread looks at
/// the last byte and, when it turns to the round's value, at the last byte
/// of every page before it. Counts the rounds where one of those was not
/// written yet (`early`); `placed` is false when a `place` failed (the
/// rounds stop there).
struct LastByteWatch {
  int early = 0;
  bool placed = true;
};
template <typename Place>
LastByteWatch watch_last_byte(std::uint8_t* base, std::size_t len, int rounds, Place place) {
  std::atomic<int> round{0};
  std::atomic<int> early{0};
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    // Relaxed atomic loads of the bytes the other thread's system call
    // writes: the kernel's stores are invisible to the compiler.
    auto at = [&](std::size_t i) { return std::atomic_ref<std::uint8_t>(base[i]).load(std::memory_order_acquire); };
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
  LastByteWatch w;
  for (int r = 1; r <= rounds && w.placed; ++r) {
    if ((r & 0xff) == 0xA5 || (r & 0xff) == 0) continue;
    round.store(r, std::memory_order_release);
    w.placed = place(static_cast<std::uint8_t>(r));
  }
  stop = true;
  watcher.join();
  w.early = early.load();
  return w;
}

/// watch_last_byte over split writes of 256 KiB by process `pid` (this
/// one: its own pid, or kThisProcess), each counted as split.
LastByteWatch watch_split_writes(pid_t pid) {
  const std::size_t len = 256 * 1024;
  Pages far(64);
  if (far.base == nullptr) return LastByteWatch{0, false};
  std::vector<std::uint8_t> src(len);
  return watch_last_byte(far.base, len, 2000, [&](std::uint8_t v) {
    std::memset(src.data(), v, len);
    iovec l{src.data(), len};
    const std::uint64_t before = splits();
    return cross_memory(pid, true, &l, 1, iovec{far.base, len}, true) == static_cast<ssize_t>(len) &&
           splits() == before + 1;
  });
}

TEST(Copier, TheLastBytesOfASplitWriteArePlacedLast) {
  // A program polling the last byte of a write must find the rest written
  // once it changes.
  const LastByteWatch w = watch_split_writes(::getpid());
  ASSERT_TRUE(w.placed) << std::strerror(errno);
  EXPECT_EQ(w.early, 0) << "the last byte was placed before the rest of the write";
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

/// Split transfers of 256 KiB by process `pid` (its own pid, or
/// kThisProcess) until the helper thread moved a second part (bounded at
/// 10 s): either thread may move one, but over a stream the helper, awake
/// after the first, must take some.
void expect_helper_moves_parts(pid_t pid, unsigned seed) {
  Pages far(64);
  ASSERT_NE(far.base, nullptr);
  auto src = pattern(256 * 1024, seed);
  iovec l{src.data(), src.size()};
  const std::uint64_t helped = copies_helped();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (copies_helped() == helped && std::chrono::steady_clock::now() < until)
    ASSERT_EQ(cross_memory(pid, true, &l, 1, iovec{far.base, src.size()}, true), static_cast<ssize_t>(src.size()));
  EXPECT_GT(copies_helped(), helped) << "the helper thread never moved a part in 10 s";
  EXPECT_EQ(0, std::memcmp(far.base, src.data(), src.size()));
}

TEST(Copier, TheHelperMovesSecondParts) { expect_helper_moves_parts(::getpid(), 3); }

// ---- copies through a mapping of the peer's region (kThisProcess) ----

TEST(Copier, ALargeCopyThroughAMappingIsSplitAndMovesEveryByteAndNothingElse) {
  split_write_and_read(kThisProcess, 300 * 1024 + 7, 4);

  // Smaller, unsplit, or local bytes that do not add up to the range: one
  // copy, of the bytes both have (as the system call).
  Pages far(80);
  ASSERT_NE(far.base, nullptr);
  const std::uint64_t before = splits();
  auto small = pattern(kSplitBytes, 5);
  iovec l{small.data(), kSplitBytes - 1};
  EXPECT_EQ(cross_memory(kThisProcess, true, &l, 1, iovec{far.base, l.iov_len}, true), static_cast<ssize_t>(l.iov_len));
  l.iov_len = kSplitBytes;
  EXPECT_EQ(cross_memory(kThisProcess, true, &l, 1, iovec{far.base, l.iov_len}, /*split=*/false),
            static_cast<ssize_t>(l.iov_len));
  EXPECT_EQ(cross_memory(kThisProcess, true, &l, 1, iovec{far.base, kSplitBytes + 4096}, true),
            static_cast<ssize_t>(kSplitBytes));
  EXPECT_EQ(splits(), before);
  EXPECT_EQ(0, std::memcmp(far.base, small.data(), kSplitBytes));
}

TEST(Copier, TheLastBytesOfASplitCopyThroughAMappingAreStoredLast) {
  // The watcher reads bytes that memcpy stores in this process: a race by
  // the language's rules, which ThreadSanitizer reports (the reader of a
  // mapping is another process, where no such rule applies).
  if (unit::kUnderThreadSanitizer) GTEST_SKIP() << "a watcher of plain stores in one process";
  const LastByteWatch w = watch_split_writes(kThisProcess);
  ASSERT_TRUE(w.placed);
  EXPECT_EQ(w.early, 0) << "the last byte was stored before the rest of the copy";
}

TEST(Copier, TheHelperCopiesSecondPartsThroughAMapping) { expect_helper_moves_parts(kThisProcess, 6); }

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

/// A batch of `n` writes of `len` bytes each into `far`, `gap` bytes apart
/// (starting `gap` in), each from two local segments of `src` (cut at a
/// third of the write): the local and remote lists write_ranges takes.
struct Batch {
  Batch(std::uint8_t* far, std::size_t n, std::size_t len, std::size_t gap, unsigned seed)
      : src(pattern(n * len, seed)) {
    for (std::size_t k = 0; k < n; ++k) {
      std::uint8_t* from = src.data() + k * len;
      local.push_back(iovec{from, len / 3});
      local.push_back(iovec{from + len / 3, len - len / 3});
      remote.push_back(iovec{far + gap + k * (len + gap), len});
    }
  }
  ssize_t write(bool split) {
    return write_ranges(::getpid(), local.data(), local.size(), remote.data(), remote.size(), split);
  }
  std::vector<std::uint8_t> src;
  std::vector<iovec> local, remote;
};

TEST(Copier, TheWritesOfALargeBatchAreSplitIntoTwoListsAndMoveEveryByteAndNothingElse) {
  // 16 writes of 64 KiB less 100 bytes, 100 bytes apart: no range starts or
  // ends on a page boundary.
  const std::size_t n = 16, len = 64 * 1024 - 100, gap = 100;
  Pages far(n * 17);
  ASSERT_NE(far.base, nullptr);
  Batch b(far.base, n, len, gap, 11);
  const std::uint64_t before = splits();
  ASSERT_EQ(b.write(/*split=*/true), static_cast<ssize_t>(n * len)) << std::strerror(errno);
  EXPECT_EQ(splits(), before + 1) << "a batch of " << n * len << " bytes was not split";
  for (std::size_t k = 0; k < n; ++k) {
    auto* at = static_cast<std::uint8_t*>(b.remote[k].iov_base);
    EXPECT_EQ(0, std::memcmp(at, b.src.data() + k * len, len)) << "write " << k;
    EXPECT_TRUE(std::all_of(at - gap, at, [](std::uint8_t v) { return v == 0xA5; })) << "before write " << k;
  }
  auto* end = static_cast<std::uint8_t*>(b.remote[n - 1].iov_base) + len;
  EXPECT_TRUE(std::all_of(end, far.base + far.len, [](std::uint8_t v) { return v == 0xA5; }));

  // Not split: below kSplitBytes, one range, or split off.
  Batch small(far.base, 3, kSplitBytes / 4, gap, 12);
  ASSERT_EQ(small.write(true), static_cast<ssize_t>(3 * (kSplitBytes / 4)));
  Batch one(far.base, 1, kSplitBytes, gap, 13);
  ASSERT_EQ(one.write(true), static_cast<ssize_t>(kSplitBytes));
  Batch off(far.base, 8, kSplitBytes / 4, gap, 14);
  ASSERT_EQ(off.write(false), static_cast<ssize_t>(2 * kSplitBytes));
  EXPECT_EQ(splits(), before + 1);
  for (std::size_t k = 0; k < 8; ++k)
    EXPECT_EQ(0, std::memcmp(off.remote[k].iov_base, off.src.data() + k * (kSplitBytes / 4), kSplitBytes / 4));
}

TEST(Copier, ABatchWhoseLocalSegmentsCrossItsWritesIsPlacedAsOneCallWouldPlaceIt) {
  // The local bytes are one stream, as for one call: segments need not end
  // where writes do. 16 writes of 16401 bytes (262416 in all, just past
  // kSplitBytes) from 128 local segments of 2050 bytes (the last longer),
  // so that nearly every write starts and ends inside a segment.
  const std::size_t n = 16, len = 16401, total = n * len, gap = 3000;
  ASSERT_GE(total, kSplitBytes);
  Pages far(n * 6 + 2);
  ASSERT_NE(far.base, nullptr);
  std::vector<std::uint8_t> src = pattern(total, 41);
  std::vector<iovec> local, remote;
  for (std::size_t i = 0; i < 128; ++i)
    local.push_back(iovec{src.data() + i * 2050, i == 127 ? total - 127 * 2050 : 2050});
  for (std::size_t k = 0; k < n; ++k) remote.push_back(iovec{far.base + gap + k * (len + gap), len});
  const std::uint64_t before = splits();
  ASSERT_EQ(write_ranges(::getpid(), local.data(), local.size(), remote.data(), n, true), static_cast<ssize_t>(total));
  EXPECT_EQ(splits(), before + 1);
  for (std::size_t k = 0; k < n; ++k)
    EXPECT_EQ(0, std::memcmp(remote[k].iov_base, src.data() + k * len, len)) << "write " << k;
  // And from one segment.
  std::vector<std::uint8_t> src2 = pattern(total, 42);
  iovec one{src2.data(), total};
  ASSERT_EQ(write_ranges(::getpid(), &one, 1, remote.data(), n, true), static_cast<ssize_t>(total));
  EXPECT_EQ(splits(), before + 2);
  for (std::size_t k = 0; k < n; ++k)
    EXPECT_EQ(0, std::memcmp(remote[k].iov_base, src2.data() + k * len, len)) << "write " << k;
}

TEST(Copier, WritesOfASplitBatchIntoTheSameBytesLeaveTheLastPosted) {
  // Eight writes of 64 KiB into the same bytes, each its own pattern (what
  // a benchmark writing one buffer over and over posts): cut by address,
  // each byte is moved by one thread, the writes to it in posting order.
  const std::size_t len = 64 * 1024;
  Pages far(20);
  ASSERT_NE(far.base, nullptr);
  for (int round = 0; round < 50; ++round) {
    Batch b(far.base, 8, len, 0, 21 + static_cast<unsigned>(round));
    for (auto& r : b.remote) r.iov_base = far.base + kPage + 8;
    const std::uint64_t before = splits();
    ASSERT_EQ(b.write(true), static_cast<ssize_t>(8 * len));
    EXPECT_EQ(splits(), before + 1) << "round " << round;
    ASSERT_EQ(0, std::memcmp(far.base + kPage + 8, b.src.data() + 7 * len, len))
        << "round " << round << ": the last write posted is not what stays";
  }
}

TEST(Copier, ABatchWhoseLastBytesALaterWriteCoversIsOneCall) {
  // Write 3 starts half-way into the others' range, so their last bytes lie
  // in its body: placed after every body, they would be left on top of it.
  const std::size_t len = 64 * 1024;
  Pages far(28);
  ASSERT_NE(far.base, nullptr);
  Batch b(far.base, 8, len, 0, 22);
  for (auto& r : b.remote) r.iov_base = far.base + kPage;
  b.remote[3].iov_base = far.base + kPage + len / 2;
  const std::uint64_t before = splits();
  ASSERT_EQ(b.write(true), static_cast<ssize_t>(8 * len));
  EXPECT_EQ(splits(), before) << "a batch whose last bytes a later write covers was split";
  EXPECT_EQ(0, std::memcmp(far.base + kPage, b.src.data() + 7 * len, len));
  EXPECT_EQ(0, std::memcmp(far.base + kPage + len, b.src.data() + 3 * len + len / 2, len / 2));
}

TEST(Copier, TheLastBytesOfEachWriteOfASplitBatchLandAfterEveryWriteBeforeIt) {
  // A program that polls the last byte of a write of a batch must find that
  // write and all those posted before it in place once it changes: watched
  // at the last byte of the batch's last write.
  const std::size_t n = 8, len = 64 * 1024;
  Pages far(n * 16 + 1);
  ASSERT_NE(far.base, nullptr);
  std::uint8_t* const base = far.base + kPage;
  std::vector<std::uint8_t> src(n * len);
  std::vector<iovec> local, remote;
  for (std::size_t k = 0; k < n; ++k) {
    local.push_back(iovec{src.data() + k * len, len});
    remote.push_back(iovec{base + k * len, len});  // back to back: disjoint
  }
  const std::uint64_t before = splits();
  const LastByteWatch w = watch_last_byte(base, n * len, 3000, [&](std::uint8_t v) {
    std::memset(src.data(), v, src.size());
    return write_ranges(::getpid(), local.data(), n, remote.data(), n, true) == static_cast<ssize_t>(n * len);
  });
  ASSERT_TRUE(w.placed) << std::strerror(errno);
  EXPECT_GT(splits(), before);
  EXPECT_EQ(w.early, 0) << "the last byte of a batch was placed before the rest of it";
}

TEST(Copier, AFaultInASplitBatchCountsOnlyTheWritesPlacedInFull) {
  // 16 writes of 64 KiB, each starting 64 bytes into a page, a page apart:
  // writes 0-7 lie below the cut (this thread), 8-15 above (the helper). A
  // page made inaccessible in one of them stops the count at that write:
  // the writes before it get their last bytes and count, it and those after
  // it do not.
  const std::size_t n = 16, len = 64 * 1024;
  auto start = [&](std::size_t k) { return k * len; };  // in the stream of the batch's bytes
  struct Case {
    const char* what;
    std::size_t write;  // the write with the hole
    std::size_t page;   // the hole: this page of the write's range
  };
  const Case cases[] = {
      {"a hole in write 3, below the cut", 3, 5},
      {"a hole in write 12, above the cut", 12, 5},
      {"a hole in write 14's last bytes only", 14, 16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Pages far(n * 17 + 2);
    ASSERT_NE(far.base, nullptr);
    std::vector<std::uint8_t> src = pattern(n * len, 31);
    std::vector<iovec> local, remote;
    for (std::size_t k = 0; k < n; ++k) {
      local.push_back(iovec{src.data() + k * len, len});
      remote.push_back(iovec{far.base + kPage + kLastBytes + k * (len + kPage), len});
    }
    // The write's pages: its range starts kLastBytes into a page, so its
    // 17th page (16) holds only its last kLastBytes.
    auto* hole = reinterpret_cast<std::uint8_t*>(
        (reinterpret_cast<std::uintptr_t>(remote[c.write].iov_base) & ~std::uintptr_t{kPage - 1}) + c.page * kPage);
    ASSERT_EQ(::mprotect(hole, kPage, PROT_NONE), 0);
    const std::uint64_t before = splits();
    errno = 0;
    const ssize_t moved = write_ranges(::getpid(), local.data(), n, remote.data(), n, true);
    EXPECT_EQ(splits(), before + 1);
    EXPECT_EQ(moved, static_cast<ssize_t>(start(c.write)));
    EXPECT_EQ(errno, EFAULT);
    // The writes counted are all there.
    for (std::size_t k = 0; k < c.write; ++k)
      EXPECT_EQ(0, std::memcmp(remote[k].iov_base, src.data() + k * len, len)) << "write " << k;
    ASSERT_EQ(::mprotect(hole, kPage, PROT_READ | PROT_WRITE), 0);
  }
}

TEST(Copier, ABatchToAPeerThatIsGoneIsReportedAsGone) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::vector<std::uint8_t> src(kSplitBytes * 2, 1), far(kSplitBytes * 2 + 64);
  iovec l{src.data(), src.size()};
  iovec r[2] = {iovec{far.data(), kSplitBytes}, iovec{far.data() + kSplitBytes + 64, kSplitBytes}};
  errno = 0;
  EXPECT_EQ(write_ranges(child, &l, 1, r, 2, true), -1);
  EXPECT_EQ(errno, ESRCH);
}

/// `n` reads of `len` bytes each from ranges of `far` (`gap` bytes apart,
/// each its own pattern) into destinations in `near` (`gap` bytes apart) in
/// the opposite order of addresses: read k lands below read k - 1.
struct ReadBatch {
  ReadBatch(std::uint8_t* far, std::uint8_t* near, std::size_t n, std::size_t len, std::size_t gap, unsigned seed)
      : src(pattern(n * len, seed)) {
    for (std::size_t k = 0; k < n; ++k) {
      std::uint8_t* from = far + gap + k * (len + gap);
      std::memcpy(from, src.data() + k * len, len);
      remote.push_back(iovec{from, len});
      local.push_back(iovec{near + gap + (n - 1 - k) * (len + gap), len});
    }
  }
  ssize_t read(bool split) {
    return read_ranges(::getpid(), local.data(), local.size(), remote.data(), remote.size(), split);
  }
  std::vector<std::uint8_t> src;
  std::vector<iovec> local, remote;
};

TEST(Copier, TheReadsOfALargeBatchAreSplitIntoTwoListsAndMoveEveryByteAndNothingElse) {
  // 16 reads of 64 KiB less 100 bytes, 100 bytes apart at both ends: no
  // range starts or ends on a page boundary, and the cut (by where the
  // bytes land here) falls across the posting order.
  const std::size_t n = 16, len = 64 * 1024 - 100, gap = 100;
  Pages far(n * 17), near(n * 17);
  ASSERT_NE(far.base, nullptr);
  ASSERT_NE(near.base, nullptr);
  ReadBatch b(far.base, near.base, n, len, gap, 51);
  const std::uint64_t before = splits();
  ASSERT_EQ(b.read(/*split=*/true), static_cast<ssize_t>(n * len)) << std::strerror(errno);
  EXPECT_EQ(splits(), before + 1) << "a batch of " << n * len << " bytes of reads was not split";
  for (std::size_t k = 0; k < n; ++k) {
    auto* at = static_cast<std::uint8_t*>(b.local[k].iov_base);
    EXPECT_EQ(0, std::memcmp(at, b.src.data() + k * len, len)) << "read " << k;
    EXPECT_TRUE(std::all_of(at - gap, at, [](std::uint8_t v) { return v == 0xA5; })) << "before read " << k;
  }
  auto* end = static_cast<std::uint8_t*>(b.local[0].iov_base) + len;
  EXPECT_TRUE(std::all_of(end, near.base + near.len, [](std::uint8_t v) { return v == 0xA5; }));

  // Not split, and still every byte: below kSplitBytes, one range, split
  // off, or a read into two segments.
  Pages far2(70), near2(70);
  ASSERT_NE(far2.base, nullptr);
  ASSERT_NE(near2.base, nullptr);
  ReadBatch small(far2.base, near2.base, 3, kSplitBytes / 4, gap, 52);
  ASSERT_EQ(small.read(true), static_cast<ssize_t>(3 * (kSplitBytes / 4)));
  ReadBatch one(far2.base, near2.base, 1, kSplitBytes, gap, 53);
  ASSERT_EQ(one.read(true), static_cast<ssize_t>(kSplitBytes));
  ReadBatch off(far2.base, near2.base, 4, kSplitBytes / 4 + 8, gap, 54);
  ASSERT_EQ(off.read(false), static_cast<ssize_t>(4 * (kSplitBytes / 4 + 8)));
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_EQ(0, std::memcmp(off.local[k].iov_base, off.src.data() + k * (kSplitBytes / 4 + 8), kSplitBytes / 4 + 8));
  ReadBatch two(far2.base, near2.base, 4, kSplitBytes / 4 + 8, gap, 55);
  const iovec whole0 = two.local[0];
  two.local[0].iov_len = 1000;
  two.local.insert(two.local.begin() + 1,
                   iovec{static_cast<std::uint8_t*>(whole0.iov_base) + 1000, whole0.iov_len - 1000});
  ASSERT_EQ(two.read(true), static_cast<ssize_t>(4 * (kSplitBytes / 4 + 8)));
  EXPECT_EQ(0, std::memcmp(whole0.iov_base, two.src.data(), whole0.iov_len));
  EXPECT_EQ(splits(), before + 1);
}

TEST(Copier, ReadsOfASplitBatchIntoTheSameBytesLeaveTheLastPosted) {
  // Eight reads of 64 KiB, each from its own pattern, into the same bytes
  // (what a benchmark reading into one buffer over and over posts): cut
  // where they land, each byte here is written by one thread, the reads
  // into it in posting order.
  const std::size_t n = 8, len = 64 * 1024;
  Pages far(n * 17 + 1), near(20);
  ASSERT_NE(far.base, nullptr);
  ASSERT_NE(near.base, nullptr);
  for (int round = 0; round < 50; ++round) {
    ReadBatch b(far.base, near.base, n, len, kPage, 61 + static_cast<unsigned>(round));
    for (auto& l : b.local) l.iov_base = near.base + kPage + 8;
    const std::uint64_t before = splits();
    ASSERT_EQ(b.read(true), static_cast<ssize_t>(n * len));
    EXPECT_EQ(splits(), before + 1) << "round " << round;
    ASSERT_EQ(0, std::memcmp(near.base + kPage + 8, b.src.data() + (n - 1) * len, len))
        << "round " << round << ": the last read posted is not what stays";
  }
}

TEST(Copier, AFaultInASplitBatchOfReadsCountsOnlyTheReadsMovedInFull) {
  // 16 reads of 64 KiB into destinations a page apart in posting order:
  // reads 0-7 land below the cut (this thread), 8-15 above (the helper). A
  // destination page made read-only stops the count at its read.
  const std::size_t n = 16, len = 64 * 1024;
  for (const std::size_t bad : {std::size_t{3}, std::size_t{12}}) {
    SCOPED_TRACE("a read-only page in read " + std::to_string(bad));
    Pages far(n * 17 + 2), near(n * 17 + 2);
    ASSERT_NE(far.base, nullptr);
    ASSERT_NE(near.base, nullptr);
    ReadBatch b(far.base, near.base, n, len, kPage, 71);
    for (std::size_t k = 0; k < n; ++k) b.local[k].iov_base = near.base + kPage + k * (len + kPage);
    std::uint8_t* hole = static_cast<std::uint8_t*>(b.local[bad].iov_base) + 5 * kPage;
    ASSERT_EQ(::mprotect(hole, kPage, PROT_READ), 0);
    const std::uint64_t before = splits();
    errno = 0;
    const ssize_t moved = b.read(true);
    EXPECT_EQ(splits(), before + 1);
    EXPECT_EQ(moved, static_cast<ssize_t>(bad * len));
    EXPECT_EQ(errno, EFAULT);
    for (std::size_t k = 0; k < bad; ++k)
      EXPECT_EQ(0, std::memcmp(b.local[k].iov_base, b.src.data() + k * len, len)) << "read " << k;
    ASSERT_EQ(::mprotect(hole, kPage, PROT_READ | PROT_WRITE), 0);
  }
}

TEST(Copier, ABatchOfReadsFromAPeerThatIsGoneIsReportedAsGone) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  std::vector<std::uint8_t> dst(kSplitBytes * 2 + 64), far(kSplitBytes * 2 + 64);
  iovec l[2] = {iovec{dst.data(), kSplitBytes}, iovec{dst.data() + kSplitBytes + 64, kSplitBytes}};
  iovec r[2] = {iovec{far.data(), kSplitBytes}, iovec{far.data() + kSplitBytes + 64, kSplitBytes}};
  errno = 0;
  EXPECT_EQ(read_ranges(child, l, 2, r, 2, true), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(Copier, AChildAfterForkHasItsOwnHelper) {
  // Make sure this process has a helper, then fork: the child's transfers
  // must neither wait for the parent's thread (not in the child) nor fail.
  if (unit::kUnderThreadSanitizer)
    GTEST_SKIP() << "ThreadSanitizer stops a child of a threaded process that starts a thread";
  // The parent's helper must be in its loop before the fork, not starting:
  // a thread of the parent that holds a lock of AddressSanitizer's
  // allocator when fork(2) copies the process (a new thread fills its
  // allocation cache as it starts) leaves that lock held in the child for
  // good, and the child's helper, whose first allocation needs it, never
  // runs (the libasan of GCC 12 takes no locks around fork). The CI's ASan
  // pass found the child's helper asleep on a futex in the allocator's
  // size-class table, three runs in five, while its caller took every part
  // back for 10 s. So: transfers until the helper has moved a part (at
  // most 10 s).
  {
    std::vector<std::uint8_t> src(kSplitBytes * 2, 1), far(kSplitBytes * 2);
    iovec l{src.data(), src.size()};
    const std::uint64_t helped = copies_helped();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (copies_helped() == helped && std::chrono::steady_clock::now() < until)
      ASSERT_EQ(cross_memory(::getpid(), true, &l, 1, iovec{far.data(), far.size()}, true),
                static_cast<ssize_t>(src.size()));
    ASSERT_GT(copies_helped(), helped) << "the parent's helper moved no part in 10 s";
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No gtest here: the exit status says how it went. Transfers until the
    // helper moved a part (it may not get a CPU in time while other tests
    // load the machine: the caller then takes its part back), for at most
    // 10 s.
    ::alarm(20);
    auto src = pattern(256 * 1024, 5);
    std::vector<std::uint8_t> far(src.size());
    iovec l{src.data(), src.size()};
    const std::uint64_t helped = copies_helped(), taken = copies_taken_back();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (copies_helped() == helped && std::chrono::steady_clock::now() < until)
      if (cross_memory(::getpid(), true, &l, 1, iovec{far.data(), far.size()}, true) !=
              static_cast<ssize_t>(src.size()) ||
          std::memcmp(far.data(), src.data(), src.size()) != 0)
        ::_exit(2);
    // 3: the helper never started a part in time; 4: no part was even
    // offered to one (no helper could be started in the child).
    ::_exit(copies_helped() > helped ? 0 : copies_taken_back() > taken ? 3 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: wrong bytes or a failed transfer; 3: the child's helper took no part in "
                                       "10 s; 4: no helper in the child";
}

}  // namespace

// --- SplitChoice (split_choice.hpp): split or whole, by what each took ---

namespace split_choice_tests {
using remora::detail::direct::kSplitBytes;
using remora::detail::direct::SplitChoice;

/// Ask `c` about `count` transfers of `bytes`, telling it each took
/// `split_ns` split and `whole_ns` whole when it is to be timed; how many
/// it split.
std::uint32_t run(SplitChoice& c, std::uint64_t bytes, std::uint32_t count, std::int64_t split_ns,
                  std::int64_t whole_ns) {
  std::uint32_t splits = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    const SplitChoice::Way way = c.choose(bytes);
    splits += way.split ? 1 : 0;
    if (way.timed) c.took(bytes, way.split, way.split ? split_ns : whole_ns);
  }
  return splits;
}

TEST(SplitChoice, TheFirstTransfersAreSplitThenATrialMovesSomeWhole) {
  SplitChoice c;
  EXPECT_EQ(run(c, 1 << 20, SplitChoice::kWarm, 1000, 1000), SplitChoice::kWarm);
  EXPECT_EQ(c.ns_per_kib(1 << 20, false), 0.0) << "nothing was moved whole yet";
  // The next kTrial go whole, the first kSettle of them untimed.
  for (std::uint32_t i = 0; i < SplitChoice::kTrial; ++i) {
    const SplitChoice::Way way = c.choose(1 << 20);
    EXPECT_FALSE(way.split) << "trial transfer " << i;
    EXPECT_EQ(way.timed, i >= SplitChoice::kSettle) << "trial transfer " << i;
    if (way.timed) c.took(1 << 20, false, 3000);
  }
  EXPECT_GT(c.ns_per_kib(1 << 20, false), 0.0);
}

TEST(SplitChoice, KeepsToTheFasterWayAndTriesTheOtherOncePerPeriod) {
  // Split twice as fast: all but the trials split.
  SplitChoice fast_split;
  const std::uint32_t n = SplitChoice::kWarm + 4 * SplitChoice::kPeriod;
  EXPECT_EQ(run(fast_split, 1 << 20, n, 1000, 2000), n - 4 * SplitChoice::kTrial);
  // Whole twice as fast: after the warm-up, only the trials split.
  SplitChoice fast_whole;
  EXPECT_EQ(run(fast_whole, 1 << 20, n, 2000, 1000), SplitChoice::kWarm + 3 * SplitChoice::kTrial);
}

TEST(SplitChoice, FollowsTheMachineWhenTheFasterWayChanges) {
  SplitChoice c;
  const std::uint32_t period = SplitChoice::kPeriod;
  (void)run(c, 1 << 20, SplitChoice::kWarm + 2 * period, 2000, 1000);  // whole preferred
  EXPECT_GT(c.ns_per_kib(1 << 20, true), c.ns_per_kib(1 << 20, false));
  // Now splits are the faster: the trials (splits) find it out.
  const std::uint32_t later = 20 * period;
  EXPECT_GT(run(c, 1 << 20, later, 500, 1000), later - 4 * period) << "did not go back to splitting";
}

TEST(SplitChoice, SizeClassesAreTimedApartAndShortTransfersNotAtAll) {
  SplitChoice c;
  (void)run(c, 512 * 1024, SplitChoice::kWarm + 2 * SplitChoice::kPeriod, 2000, 1000);
  EXPECT_GT(c.ns_per_kib(512 * 1024, false), 0.0);
  EXPECT_EQ(c.ns_per_kib(8 << 20, false), 0.0) << "another size class was timed";
  EXPECT_EQ(c.ns_per_kib(8 << 20, true), 0.0);
  EXPECT_TRUE(c.choose(8 << 20).split) << "a class of its own starts split";
  EXPECT_EQ(c.ns_per_kib(kSplitBytes, false), 0.0) << "256 KiB is a class below 512 KiB";
  SplitChoice d;
  d.took(kSplitBytes - 1, true, 1000);
  EXPECT_EQ(d.ns_per_kib(kSplitBytes, true), 0.0) << "a transfer too short to split was timed";
  d.took(64ull << 20, true, 1000);
  EXPECT_GT(d.ns_per_kib(16ull << 20, true), 0.0) << "64 MiB is not in the last class, with 16 MiB";
}
}  // namespace split_choice_tests
