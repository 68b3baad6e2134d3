// 04-atomic-write: the layout of the remote log, shared by client and server.
#pragma once

#include <cstddef>
#include <cstdint>

namespace log_layout {

/// An 8-byte "used" counter (how many record bytes are valid) followed by
/// the records themselves. Readers trust only the first `used` bytes.
struct Log {
  std::uint64_t used;      // offset 0: 8-byte aligned, updated with atomic_write
  char records[4096 - 8];  // offset 8: appended with RDMA writes
};

inline constexpr std::uint64_t kUsedOffset = offsetof(Log, used);
inline constexpr std::uint64_t kRecordsOffset = offsetof(Log, records);
static_assert(alignof(Log) >= 8 && kUsedOffset % 8 == 0, "atomic_write needs an 8-byte aligned target");

}  // namespace log_layout
