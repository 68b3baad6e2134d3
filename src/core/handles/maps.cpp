// The mappings of this process (maps.hpp).
#include "core/handles/maps.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>

namespace remora::detail {
namespace {

// The PROCMAP_QUERY ioctl of /proc/<pid>/maps (Linux 6.11, <linux/fs.h>),
// spelled out: the kernel headers of Debian 12 predate it. The layout and
// values are the kernel's ABI.
struct ProcmapQuery {
  std::uint64_t size;
  std::uint64_t query_flags;
  std::uint64_t query_addr;
  std::uint64_t vma_start;
  std::uint64_t vma_end;
  std::uint64_t vma_flags;
  std::uint64_t vma_page_size;
  std::uint64_t vma_offset;
  std::uint64_t inode;
  std::uint32_t dev_major;
  std::uint32_t dev_minor;
  std::uint32_t vma_name_size;
  std::uint32_t build_id_size;
  std::uint64_t vma_name_addr;
  std::uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr std::uint64_t kVmaReadable = 0x01, kVmaWritable = 0x02, kVmaShared = 0x08;
constexpr std::uint64_t kCoveringOrNext = 0x10;

}  // namespace

Maps::Maps(bool query) noexcept : fd_(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC)), query_(query) {}

Maps::~Maps() {
  if (text_ != nullptr)
    std::fclose(text_);  // closes fd_
  else if (fd_ >= 0)
    ::close(fd_);
}

bool Maps::at_or_after(std::uintptr_t addr, Mapping& out, bool want_path) noexcept {
  if (fd_ < 0) return false;
  if (query_) {
    ProcmapQuery q{};
    q.size = sizeof q;
    q.query_flags = kCoveringOrNext;
    q.query_addr = addr;
    if (want_path) {
      // Cleared first: tools that do not know the ioctl (valgrind) then see
      // the name as written.
      std::memset(out.path, 0, sizeof out.path);
      q.vma_name_size = sizeof out.path;
      q.vma_name_addr = reinterpret_cast<std::uintptr_t>(out.path);
    }
    if (::ioctl(fd_, kProcmapQuery, &q) == 0) {
      out.start = q.vma_start;
      out.end = q.vma_end;
      out.read = (q.vma_flags & kVmaReadable) != 0;
      out.write = (q.vma_flags & kVmaWritable) != 0;
      out.shared = (q.vma_flags & kVmaShared) != 0;
      out.offset = q.vma_offset;
      out.major = q.dev_major;
      out.minor = q.dev_minor;
      out.inode = q.inode;
      if (!want_path || q.vma_name_size == 0) out.path[0] = '\0';
      return true;
    }
    if (errno == ENOENT) return false;  // nothing at or above addr
    // ENOTTY: a kernel before 6.11. Any other refusal (a sandbox that
    // filters ioctls, say) is no answer either: the text is.
    query_ = false;
  }
  return from_text(addr, out, want_path);
}

bool Maps::from_text(std::uintptr_t addr, Mapping& out, bool want_path) noexcept {
  if (text_ == nullptr) {
    text_ = ::fdopen(fd_, "r");
    if (text_ == nullptr) return false;
  }
  char line[sizeof line_.path + 256];
  while (!have_line_ || line_.end <= addr) {
    if (std::fgets(line, sizeof line, text_) == nullptr) return false;
    // A line longer than the buffer (a path near PATH_MAX): the rest is
    // skipped, and the path not kept.
    const bool whole = std::strchr(line, '\n') != nullptr;
    for (char rest[256];
         !whole && std::fgets(rest, sizeof rest, text_) != nullptr && std::strchr(rest, '\n') == nullptr;) {
    }
    char perms[8] = {};
    int path_at = 0;
    have_line_ = std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &line_.start,
                             &line_.end, perms, &line_.offset, &line_.major, &line_.minor, &line_.inode, &path_at) >= 7;
    if (!have_line_) continue;
    line_.read = perms[0] == 'r';
    line_.write = perms[1] == 'w';
    line_.shared = perms[3] == 's';
    const char* path = whole ? line + path_at : "";
    const std::size_t n = std::strcspn(path, "\n");
    std::memcpy(line_.path, path, n);
    line_.path[n] = '\0';
  }
  out.start = line_.start;
  out.end = line_.end;
  out.read = line_.read;
  out.write = line_.write;
  out.shared = line_.shared;
  out.offset = line_.offset;
  out.major = line_.major;
  out.minor = line_.minor;
  out.inode = line_.inode;
  if (want_path)
    std::memcpy(out.path, line_.path, std::strlen(line_.path) + 1);
  else
    out.path[0] = '\0';
  return true;
}

bool Maps::writable(std::uintptr_t addr, std::size_t len) noexcept {
  const std::uintptr_t end = addr + len;
  if (end < addr) return false;
  Mapping m;
  for (std::uintptr_t at = addr; at < end; at = m.end)
    if (!at_or_after(at, m, false) || m.start > at || !m.write) return false;  // a hole, or not writable
  return true;
}

}  // namespace remora::detail
