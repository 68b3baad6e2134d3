// tools/smaps.hpp - what /proc/self/smaps says of one mapping of this
// process: the part of it in anonymous huge pages. remora-perf waits for the
// library's huge-page moves with it; the same-host tests check them with it.
// Header-only, standard library only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace remora::tools {

/// Bytes of the mapping of this process that holds `addr` in anonymous huge
/// pages (AnonHugePages in /proc/self/smaps); 0 when it has none or the
/// file cannot be read.
inline std::size_t anon_huge_bytes(const void* addr) {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    const auto dash = line.find('-'), space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      const std::uintptr_t lo = std::strtoull(line.substr(0, dash).c_str(), nullptr, 16);
      const std::uintptr_t hi = std::strtoull(line.substr(dash + 1, space - dash - 1).c_str(), nullptr, 16);
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return static_cast<std::size_t>(std::strtoull(line.c_str() + 14, nullptr, 10)) * 1024;
    }
  }
  return 0;
}

}  // namespace remora::tools
