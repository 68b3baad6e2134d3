// test_dto_status.cpp - the DAT_DTO_COMPLETION_STATUS of a DTO event for
// each Remora completion status (dto_status(), src/dat_dto_status.hpp).
//
// No DAT 1.2 operation of this face can make a target answer io_error or
// not_supported: those come only from the core's control requests (atomic
// write and flush), and the face posts only sends, receives, RDMA reads and
// RDMA writes. The table is therefore checked directly, through the header
// the library's dto_status() is made of. C++, unlike the other DAT tests:
// the table takes a std::error_code.
#include <cstdio>
#include <system_error>

#include "dat_dto_status.hpp"

using remora::Errc;
using remora_dat::dto_status_of;

namespace {

int g_failures = 0;

const char* name(DAT_DTO_COMPLETION_STATUS s) {
  switch (s) {
    case DAT_DTO_SUCCESS: return "DAT_DTO_SUCCESS";
    case DAT_DTO_ERR_FLUSHED: return "DAT_DTO_ERR_FLUSHED";
    case DAT_DTO_ERR_LOCAL_LENGTH: return "DAT_DTO_ERR_LOCAL_LENGTH";
    case DAT_DTO_ERR_LOCAL_EP: return "DAT_DTO_ERR_LOCAL_EP";
    case DAT_DTO_ERR_LOCAL_PROTECTION: return "DAT_DTO_ERR_LOCAL_PROTECTION";
    case DAT_DTO_ERR_BAD_RESPONSE: return "DAT_DTO_ERR_BAD_RESPONSE";
    case DAT_DTO_ERR_REMOTE_ACCESS: return "DAT_DTO_ERR_REMOTE_ACCESS";
    case DAT_DTO_ERR_REMOTE_RESPONDER: return "DAT_DTO_ERR_REMOTE_RESPONDER";
    case DAT_DTO_ERR_TRANSPORT: return "DAT_DTO_ERR_TRANSPORT";
    case DAT_DTO_ERR_RECEIVER_NOT_READY: return "DAT_DTO_ERR_RECEIVER_NOT_READY";
    case DAT_DTO_ERR_PARTIAL_PACKET: return "DAT_DTO_ERR_PARTIAL_PACKET";
    case DAT_RMR_OPERATION_FAILED: return "DAT_RMR_OPERATION_FAILED";
  }
  return "?";
}

void expect(std::error_code ec, DAT_DTO_COMPLETION_STATUS want) {
  const DAT_DTO_COMPLETION_STATUS got = dto_status_of(ec);
  if (got != want) {
    std::fprintf(stderr, "%s (%s): got %s, want %s\n", ec.message().c_str(), ec.category().name(), name(got),
                 name(want));
    ++g_failures;
  }
}

}  // namespace

int main() {
  // The target's reasons for a failed control operation: compat-dapl reports
  // both verbs equivalents (IBV_WC_REM_OP_ERR, IBV_WC_REM_INV_REQ_ERR) as
  // DAT_DTO_ERR_REMOTE_RESPONDER.
  expect(make_error_code(Errc::io_error), DAT_DTO_ERR_REMOTE_RESPONDER);
  expect(make_error_code(Errc::not_supported), DAT_DTO_ERR_REMOTE_RESPONDER);
  // ... and they stay distinct from a refusal.
  expect(make_error_code(Errc::remote_access), DAT_DTO_ERR_REMOTE_ACCESS);

  // The rest of the table, unchanged.
  expect({}, DAT_DTO_SUCCESS);
  expect(make_error_code(Errc::flushed), DAT_DTO_ERR_FLUSHED);
  expect(make_error_code(Errc::not_connected), DAT_DTO_ERR_FLUSHED);
  expect(make_error_code(Errc::length_error), DAT_DTO_ERR_LOCAL_LENGTH);
  expect(make_error_code(Errc::privileges), DAT_DTO_ERR_LOCAL_PROTECTION);
  expect(make_error_code(Errc::zone_mismatch), DAT_DTO_ERR_LOCAL_PROTECTION);
  for (Errc e : {Errc::invalid_handle, Errc::invalid_argument, Errc::invalid_state, Errc::queue_full, Errc::timeout,
                 Errc::connection_rejected, Errc::unreachable, Errc::address_in_use, Errc::provider_error,
                 Errc::malformed, Errc::no_memory})
    expect(make_error_code(e), DAT_DTO_ERR_TRANSPORT);
  // Errors of another category (e.g. errno values) are transport errors.
  expect(std::make_error_code(std::errc::io_error), DAT_DTO_ERR_TRANSPORT);

  if (g_failures != 0) {
    std::fprintf(stderr, "test_dto_status: %d failure(s)\n", g_failures);
    return 1;
  }
  std::printf("test_dto_status: ok\n");
  return 0;
}
