// remora/completion.hpp - what a finished operation reports.
#pragma once

#include <cstdint>
#include <system_error>

namespace remora {

enum class Opcode : std::uint8_t {
  write,           ///< RDMA write (also write with immediate, at the initiator)
  read,            ///< RDMA read
  send,            ///< send (also send with immediate, at the initiator)
  recv,            ///< a message arrived in a posted receive
  recv_write_imm,  ///< a write with immediate data arrived; it consumed a posted receive
  atomic_write,    ///< 8-byte atomic write
  flush,           ///< flush to visibility or persistence
};

const char* to_string(Opcode op) noexcept;

/// One completed operation. `status` is empty on success; on failure it is a
/// remora::Errc (remote_access, flushed, length_error, ...). The cookie is the
/// one given when the operation was posted, on success and on error alike.
struct Completion {
  std::uint64_t cookie = 0;
  Opcode op = Opcode::write;
  std::error_code status;
  std::uint64_t length = 0;  ///< bytes transferred (receives: bytes placed)
  std::uint32_t imm = 0;     ///< immediate data, valid when has_imm
  bool has_imm = false;
  std::uint64_t endpoint_id = 0;  ///< Endpoint::id() of the endpoint it belongs to
};

}  // namespace remora
