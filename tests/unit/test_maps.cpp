// The process's mappings as registration asks them (src/core/handles/maps.hpp):
// the PROCMAP_QUERY ioctl (Linux 6.11 and later) and the text of
// /proc/self/maps give the same answers, about mappings this test makes
// (read-write, read-only, inaccessible, a hole, a shared file, a removed
// file) and about every mapping of the process; where the ioctl is refused
// (a seccomp filter), the text answers.
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/handles/maps.hpp"

namespace {

using remora::detail::Mapping;
using remora::detail::Maps;

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

/// Eight pages: 0 read-write, 1 read-only, 2 inaccessible, 3 unmapped,
/// 4 read-write, 5 a shared mapping of a file (file page 2), 6 a shared
/// mapping of a file removed since, 7 inaccessible (whatever the kernel
/// maps next is not ours).
struct Layout {
  std::uint8_t* base = nullptr;
  std::string file, gone;
  struct stat st {};

  Layout() {
    void* m = ::mmap(nullptr, 8 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base = static_cast<std::uint8_t*>(m);
    ::mprotect(page(1), kPage, PROT_READ);
    ::mprotect(page(2), kPage, PROT_NONE);
    ::munmap(page(3), kPage);
    ::mprotect(page(7), kPage, PROT_NONE);
    file = map_file(5, 2);
    gone = map_file(6, 0);
    ::unlink(gone.c_str());
  }
  ~Layout() {
    if (base != nullptr) ::munmap(base, 8 * kPage);
    if (!file.empty()) ::unlink(file.c_str());
  }
  std::uint8_t* page(int i) const { return base + static_cast<std::size_t>(i) * kPage; }
  std::uintptr_t at(int i) const { return reinterpret_cast<std::uintptr_t>(page(i)); }

  /// A new file of 4 pages mapped shared over page `i`, file page `from`.
  std::string map_file(int i, int from) {
    char name[] = "/tmp/remora-maps-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) return {};
    if (::ftruncate(fd, static_cast<off_t>(4 * kPage)) != 0 ||
        ::mmap(page(i), kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
               static_cast<off_t>(static_cast<std::size_t>(from) * kPage)) == MAP_FAILED) {
      ::close(fd);
      return {};
    }
    if (i == 5) ::fstat(fd, &st);
    ::close(fd);
    return name;
  }
};

/// Each way of asking: the ioctl (where the kernel has it) and the text.
class MapsTest : public ::testing::TestWithParam<bool> {};

TEST_P(MapsTest, WritableIsTrueOnlyWhereEveryByteMayBeWritten) {
  Layout l;
  ASSERT_NE(l.base, nullptr);
  ASSERT_FALSE(l.file.empty());
  // Each question on its own Maps: the text is read from the lowest address up.
  auto writable = [&](std::uintptr_t a, std::size_t n) { return Maps(GetParam()).writable(a, n); };
  EXPECT_TRUE(writable(l.at(0), kPage));
  EXPECT_TRUE(writable(l.at(0) + 100, 10));
  EXPECT_FALSE(writable(l.at(0), kPage + 1)) << "into the read-only page";
  EXPECT_FALSE(writable(l.at(1), 1)) << "read-only";
  EXPECT_FALSE(writable(l.at(2), 1)) << "inaccessible";
  EXPECT_FALSE(writable(l.at(3), 1)) << "not mapped";
  EXPECT_FALSE(writable(l.at(3) - 1, 2)) << "ends in the hole";
  EXPECT_TRUE(writable(l.at(4), kPage));
  EXPECT_TRUE(writable(l.at(4), 3 * kPage)) << "three mappings, each writable";
  EXPECT_FALSE(writable(l.at(4), 4 * kPage)) << "into the inaccessible page after them";
  EXPECT_FALSE(writable(UINTPTR_MAX - 10, 20)) << "wraps";
  // One Maps asked in address order, as registration asks it.
  Maps maps(GetParam());
  ASSERT_TRUE(maps.ok());
  EXPECT_TRUE(maps.writable(l.at(0), 10));
  EXPECT_FALSE(maps.writable(l.at(1), 10));
  EXPECT_TRUE(maps.writable(l.at(4), 10));
}

TEST_P(MapsTest, AMappingIsDescribedWithItsFile) {
  Layout l;
  ASSERT_NE(l.base, nullptr);
  ASSERT_FALSE(l.file.empty());
  Maps maps(GetParam());
  Mapping m;
  ASSERT_TRUE(maps.at_or_after(l.at(1), m, true));
  EXPECT_EQ(m.start, l.at(1));
  EXPECT_EQ(m.end, l.at(2));
  EXPECT_TRUE(m.read);
  EXPECT_FALSE(m.write);
  EXPECT_FALSE(m.shared);
  EXPECT_EQ(m.inode, 0u);
  ASSERT_TRUE(maps.at_or_after(l.at(2), m, true));
  EXPECT_FALSE(m.read || m.write) << "inaccessible";
  // The hole: the mapping above it.
  ASSERT_TRUE(maps.at_or_after(l.at(3) + 5, m, true));
  EXPECT_EQ(m.start, l.at(4));
  EXPECT_EQ(m.end, l.at(5));
  ASSERT_TRUE(maps.at_or_after(l.at(5) + 7, m, true));
  EXPECT_EQ(m.start, l.at(5));
  EXPECT_EQ(m.end, l.at(6));
  EXPECT_TRUE(m.read && m.write && m.shared);
  EXPECT_EQ(m.offset, 2 * kPage);
  EXPECT_EQ(m.inode, l.st.st_ino);
  EXPECT_EQ(m.major, major(l.st.st_dev));
  EXPECT_EQ(m.minor, minor(l.st.st_dev));
  EXPECT_STREQ(m.path, l.file.c_str());
  ASSERT_TRUE(maps.at_or_after(l.at(6), m, true));
  EXPECT_EQ(std::string(m.path), l.gone + " (deleted)");
  // The same mapping again (the text keeps its line), now without the path.
  ASSERT_TRUE(maps.at_or_after(l.at(6), m, false));
  EXPECT_EQ(m.start, l.at(6));
  EXPECT_STREQ(m.path, "");
}

TEST_P(MapsTest, NothingAboveTheLastMapping) {
  Maps maps(GetParam());
  Mapping m;
  // The highest user address on x86-64 and aarch64 (48-bit): above every
  // mapping a process can make ([vsyscall], which the text lists above it,
  // is no mapping of the process's own).
  EXPECT_FALSE(maps.at_or_after(std::uintptr_t{1} << 47, m, false) && m.start < (std::uintptr_t{1} << 56));
}

INSTANTIATE_TEST_SUITE_P(Both, MapsTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Query" : "Text"; });

TEST(Maps, TheQueryAndTheTextListTheSameMappings) {
  Layout l;  // some of each kind
  ASSERT_NE(l.base, nullptr);
  Maps query(true), text(false);
  Mapping q, t;
  if (!query.at_or_after(0, q, true) || !query.queried())
    GTEST_SKIP() << "this kernel has no PROCMAP_QUERY (Linux 6.11): the text alone is used";
  std::uintptr_t at = 0;
  int compared = 0;
  // User space only: the text's [vsyscall] is no mapping of the process's own.
  while (at < (std::uintptr_t{1} << 47) && query.at_or_after(at, q, true)) {
    if (q.start >= (std::uintptr_t{1} << 47)) break;
    ASSERT_TRUE(text.at_or_after(at, t, true)) << std::hex << at;
    EXPECT_EQ(q.start, t.start);
    EXPECT_EQ(q.end, t.end) << std::hex << q.start;
    EXPECT_EQ(q.read, t.read) << std::hex << q.start;
    EXPECT_EQ(q.write, t.write) << std::hex << q.start;
    EXPECT_EQ(q.shared, t.shared) << std::hex << q.start;
    EXPECT_EQ(q.inode, t.inode) << std::hex << q.start;
    if (q.inode != 0) {
      EXPECT_EQ(q.offset, t.offset) << std::hex << q.start;
      EXPECT_EQ(q.major, t.major) << std::hex << q.start;
      EXPECT_EQ(q.minor, t.minor) << std::hex << q.start;
      EXPECT_STREQ(q.path, t.path) << std::hex << q.start;
    }
    ++compared;
    at = q.end;
  }
  EXPECT_GT(compared, 10) << "the process has more mappings than that";
}

TEST(Maps, AnIoctlTheProcessMayNotMakeFallsBackToTheText) {
  // A sandbox that filters ioctls (here a seccomp filter refusing
  // PROCMAP_QUERY with EPERM, in a child) must not make every mapping look
  // absent: the text answers instead.
  Layout l;
  ASSERT_NE(l.base, nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[1])),   // its low half (little-endian)
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, _IOWR('f', 17, char[104]), 0, 1),  // PROCMAP_QUERY
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
      ::_exit(5);
    Maps maps(true);
    Mapping m;
    if (!maps.at_or_after(l.at(5), m, true)) ::_exit(2);
    if (maps.queried()) ::_exit(3);
    const bool right = m.start == l.at(5) && m.shared && std::string(m.path) == l.file;
    ::_exit(right && Maps(true).writable(l.at(4), kPage) && !Maps(true).writable(l.at(1), 1) ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  if (WEXITSTATUS(status) == 5) GTEST_SKIP() << "no seccomp filter could be installed here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no mapping found; 3: the ioctl answered; 4: wrong answers";
}

}  // namespace
