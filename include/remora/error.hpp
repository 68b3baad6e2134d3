// remora/error.hpp - the error codes every Remora call and completion uses.
#pragma once

#include <string>
#include <system_error>

namespace remora {

/// Error values of the `remora` category. Zero is success. Each local check
/// has its own value so callers (and the DAT/librpma layers) can map them to
/// their documented codes without guessing.
enum class Errc : int {
  invalid_handle = 1,   ///< a closed, moved-from or foreign object was passed
  invalid_argument,     ///< bad value: segment outside its region, misaligned, ...
  length_error,         ///< data does not fit the remote range or the peer's buffer
  zone_mismatch,        ///< a region belongs to another protection zone
  privileges,           ///< a region lacks the access the operation needs
  invalid_state,        ///< the endpoint is not in a state that allows the call
  not_supported,        ///< the operation is not possible on this region/provider
  queue_full,           ///< the endpoint's request queue is full
  timeout,              ///< a blocking wait ran out of time
  remote_access,        ///< the target refused the operation (key, bounds, privilege)
                        ///< or the connection broke before it completed
  flushed,              ///< the operation was cancelled: the endpoint left the connected state
  connection_rejected,  ///< the peer rejected the connection request
  unreachable,          ///< no listener at that address, or no route to it
  not_connected,        ///< the connection is gone
  address_in_use,       ///< the listening address/port is taken
  provider_error,       ///< libfabric failed in a way not listed above
  io_error,             ///< persisting a range failed (msync / pmem2)
  malformed,            ///< bytes that do not parse as the expected structure
  no_memory,            ///< allocation or registration ran out of resources
};

const std::error_category& remora_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept { return {static_cast<int>(e), remora_category()}; }

}  // namespace remora

template <>
struct std::is_error_code_enum<remora::Errc> : std::true_type {};
