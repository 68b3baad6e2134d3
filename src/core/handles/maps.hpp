// The mappings of this process, as registration needs them: whether a range
// may be written, and which file a shared mapping maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace remora::detail {

/// One mapping of this process (a line of /proc/self/maps).
struct Mapping {
  std::uintptr_t start = 0, end = 0;
  bool read = false, write = false, shared = false;
  std::uint64_t offset = 0;  // in the mapped file
  unsigned major = 0, minor = 0;
  std::uint64_t inode = 0;
  /// The mapped file's path ("" for anonymous memory; a file removed since
  /// ends in " (deleted)"), when asked for.
  char path[4096 + 16] = {};
};

/// Reads this process's mappings from /proc/self/maps, in address order.
/// On Linux 6.11 and later each question is one PROCMAP_QUERY ioctl on the
/// open file, which the kernel answers for the one mapping asked about;
/// older kernels (Debian 12's 6.1) have no such ioctl (and a sandbox may
/// refuse it), and the text is read line by line instead, from the lowest
/// address up. The answers are the same (tests/unit/test_maps.cpp compares
/// them).
class Maps {
 public:
  /// `query`: use the ioctl where the kernel has it (false: the text).
  explicit Maps(bool query = true) noexcept;
  ~Maps();
  Maps(const Maps&) = delete;
  Maps& operator=(const Maps&) = delete;

  /// The file could be opened.
  bool ok() const noexcept { return fd_ >= 0; }

  /// The mapping holding `addr`, or the first one above it: false when
  /// there is none (or the file cannot be read). Questions reading the text
  /// must not go down: each address at or above the one before.
  bool at_or_after(std::uintptr_t addr, Mapping& out, bool want_path) noexcept;

  /// Every byte of [addr, addr+len) lies in a mapping this process may
  /// write (no hole, no read-only or inaccessible page).
  bool writable(std::uintptr_t addr, std::size_t len) noexcept;

  /// The ioctl answered the last question (false: the text did).
  bool queried() const noexcept { return query_; }

 private:
  bool from_text(std::uintptr_t addr, Mapping& out, bool want_path) noexcept;

  int fd_ = -1;
  bool query_ = true;
  std::FILE* text_ = nullptr;
  Mapping line_;  // the text's line read last
  bool have_line_ = false;
};

}  // namespace remora::detail
