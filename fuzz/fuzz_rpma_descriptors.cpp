// fuzz/fuzz_rpma_descriptors.cpp - the librpma face's descriptor parsers,
// which take what the peer sent in private data or any other channel:
// rpma_mr_remote_from_descriptor (a remote region: u64 address, u64 length,
// u32 key, u8 usage, all little-endian; more bytes are ignored) and
// rpma_peer_cfg_from_descriptor (one byte: direct write to PMem). Neither
// needs a peer, so no fabric is opened.
//
// Invariants: a failure is RPMA_E_INVAL and leaves the output pointer
// alone; a success gives an object whose getters report the input's
// fields, and which frees cleanly (LeakSanitizer sees any object lost).
#include "fuzz_common.hpp"
#include "internal.hpp"  // rpma_mr_remote's fields, to compare with the bytes

using namespace remora_fuzz;

namespace {

std::uint64_t le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

Bytes mr_descriptor(std::uint64_t addr, std::uint64_t len, std::uint32_t key, std::uint8_t usage) {
  Bytes b;
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(addr >> (8 * i)));
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(len >> (8 * i)));
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(key >> (8 * i)));
  b.push_back(usage);
  return b;
}

// Formats every message as the built-in function would, but keeps it from
// syslog and stderr: rejected descriptors are the common case here.
void quiet_log(enum rpma_log_level, const char*, int, const char*, const char* fmt, ...) { (void)fmt; }

void check_mr(const std::uint8_t* data, std::size_t size) {
  rpma_mr_remote* mr = nullptr;
  const int rc = rpma_mr_remote_from_descriptor(data, size, &mr);
  if (rc != 0) {
    FUZZ_CHECK(rc == RPMA_E_INVAL && mr == nullptr);
    FUZZ_CHECK(size < rpma_compat::kMrDescriptorSize || data[20] == 0);
    return;
  }
  FUZZ_CHECK(mr != nullptr && size >= rpma_compat::kMrDescriptorSize && data[20] != 0);
  const int usage = data[20];
  FUZZ_CHECK(mr->usage == usage);
  FUZZ_CHECK(mr->rr.address() == le(data, 8) && mr->rr.length() == le(data + 8, 8) && mr->rr.key() == le(data + 16, 4));
  FUZZ_CHECK(mr->rr.access() == rpma_compat::remote_access_for(usage));
  FUZZ_CHECK(mr->rr.persistent() == ((usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) != 0));
  std::size_t len = 0;
  FUZZ_CHECK(rpma_mr_remote_get_size(mr, &len) == 0 && len == le(data + 8, 8));
  int flush = -1;
  FUZZ_CHECK(rpma_mr_remote_get_flush_type(mr, &flush) == 0);
  FUZZ_CHECK(flush == (usage & (RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT)));
  FUZZ_CHECK(rpma_mr_remote_delete(&mr) == 0 && mr == nullptr);
}

void check_peer_cfg(const std::uint8_t* data, std::size_t size) {
  rpma_peer_cfg* cfg = nullptr;
  const int rc = rpma_peer_cfg_from_descriptor(data, size, &cfg);
  if (rc != 0) {
    FUZZ_CHECK(rc == RPMA_E_INVAL && cfg == nullptr && size == 0);
    return;
  }
  FUZZ_CHECK(cfg != nullptr && size >= 1);
  bool direct = false;
  FUZZ_CHECK(rpma_peer_cfg_get_direct_write_to_pmem(cfg, &direct) == 0 && direct == (data[0] != 0));
  std::size_t n = 0;
  FUZZ_CHECK(rpma_peer_cfg_get_descriptor_size(cfg, &n) == 0 && n == 1);
  std::uint8_t out = 0xaa;
  FUZZ_CHECK(rpma_peer_cfg_get_descriptor(cfg, &out) == 0 && out == (direct ? 1 : 0));
  // What we would send back parses to the same setting.
  rpma_peer_cfg* back = nullptr;
  FUZZ_CHECK(rpma_peer_cfg_from_descriptor(&out, n, &back) == 0);
  bool direct_back = !direct;
  FUZZ_CHECK(rpma_peer_cfg_get_direct_write_to_pmem(back, &direct_back) == 0 && direct_back == direct);
  FUZZ_CHECK(rpma_peer_cfg_delete(&back) == 0 && back == nullptr);
  FUZZ_CHECK(rpma_peer_cfg_delete(&cfg) == 0 && cfg == nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<Bytes> seeds;
  seeds.push_back(
      mr_descriptor(0x7f0000001000, 4096, 0x1234,
                    RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY));
  seeds.push_back(
      mr_descriptor(0x7f0000001000, 1 << 20, 7, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT));
  seeds.push_back(mr_descriptor(~std::uint64_t{0}, 2, 0xffffffff, RPMA_MR_USAGE_READ_SRC));  // wraps: the target checks
  seeds.push_back(mr_descriptor(4096, 64, 1, 0));                                            // usage not set
  Bytes longer = mr_descriptor(4096, 64, 1, RPMA_MR_USAGE_RECV);
  longer.insert(longer.end(), {1, 2, 3});
  seeds.push_back(longer);
  Bytes shorter = mr_descriptor(4096, 64, 1, RPMA_MR_USAGE_READ_SRC);
  shorter.pop_back();
  seeds.push_back(shorter);
  seeds.push_back({0});
  seeds.push_back({1});
  seeds.push_back({});
  write_seeds_if_asked(seeds);
  // Set after the seed hook so writing seeds stays free of library state.
  rpma_log_set_function(quiet_log);
  rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_DEBUG);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_mr(data, size);
  check_peer_cfg(data, size);
  return 0;
}
