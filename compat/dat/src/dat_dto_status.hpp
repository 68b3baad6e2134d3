// compat/dat/src/dat_dto_status.hpp - the DAT_DTO_COMPLETION_STATUS a DTO
// event reports for the status of a Remora completion. dto_status()
// (dat_core.cpp) is this function; it lives in a header of its own so a test
// can check the table without going through libdat.so.1's hidden symbols.
//
// The error values follow what compat-dapl's openib providers report for the
// verbs statuses the librpma face gives the same Remora errors:
//   flushed, not_connected -> DAT_DTO_ERR_FLUSHED        (IBV_WC_WR_FLUSH_ERR)
//   remote_access          -> DAT_DTO_ERR_REMOTE_ACCESS  (IBV_WC_REM_ACCESS_ERR)
//   length_error           -> DAT_DTO_ERR_LOCAL_LENGTH   (IBV_WC_LOC_LEN_ERR)
//   privileges, zone_mismatch -> DAT_DTO_ERR_LOCAL_PROTECTION
//   io_error               -> DAT_DTO_ERR_REMOTE_RESPONDER (IBV_WC_REM_OP_ERR:
//                             the target's write-back of a flush failed)
//   not_supported          -> DAT_DTO_ERR_REMOTE_RESPONDER (IBV_WC_REM_INV_REQ_ERR:
//                             the target cannot carry out the request)
//   anything else          -> DAT_DTO_ERR_TRANSPORT      (IBV_WC_GENERAL_ERR)
#pragma once

#include <system_error>

#include <remora/error.hpp>

extern "C" {
#include "dat/udat.h"
}

namespace remora_dat {

inline DAT_DTO_COMPLETION_STATUS dto_status_of(std::error_code ec) noexcept {
  if (!ec) return DAT_DTO_SUCCESS;
  if (ec.category() != remora::remora_category()) return DAT_DTO_ERR_TRANSPORT;
  using remora::Errc;
  switch (static_cast<Errc>(ec.value())) {
    case Errc::flushed: return DAT_DTO_ERR_FLUSHED;
    case Errc::remote_access: return DAT_DTO_ERR_REMOTE_ACCESS;
    case Errc::length_error: return DAT_DTO_ERR_LOCAL_LENGTH;
    case Errc::privileges:
    case Errc::zone_mismatch: return DAT_DTO_ERR_LOCAL_PROTECTION;
    case Errc::not_connected: return DAT_DTO_ERR_FLUSHED;
    // The responder's own failures: a completion only carries these when
    // the target answered so (the initiator refuses what it can see itself
    // before posting).
    case Errc::io_error:
    case Errc::not_supported: return DAT_DTO_ERR_REMOTE_RESPONDER;
    default: return DAT_DTO_ERR_TRANSPORT;
  }
}

}  // namespace remora_dat
