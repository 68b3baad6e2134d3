// fuzz/fuzz_remote_region.cpp - remora::RemoteRegion::parse, the public
// parser of region descriptors received over any out-of-band channel.
//
// Invariants: parse either fails with Errc::malformed or yields a region
// whose range does not wrap and whose serialize() gives back exactly the
// input bytes (the format has no two encodings of one region).
#include <span>

#include "fuzz_common.hpp"
#include "remora/remora.hpp"

using remora::Access;
using remora::RemoteRegion;
using namespace remora_fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<Bytes> seeds;
  const Access kinds[] = {Access::none, Access::remote_read, Access::remote_write,
                          Access::remote_read | Access::remote_write};
  for (Access a : kinds)
    for (bool persistent : {false, true})
      seeds.push_back(RemoteRegion(0x7f0000001000, 4096, 0x1234, a, persistent).serialize());
  seeds.push_back(RemoteRegion(0, 0, 0, Access::none, false).serialize());
  seeds.push_back(RemoteRegion(~std::uint64_t{0} - 16, 16, ~std::uint64_t{0}, Access::remote_read, false).serialize());
  // Invalid ones: empty, short, long, a wrapping range, an unknown flag.
  seeds.push_back({});
  Bytes good = RemoteRegion(4096, 64, 7, Access::remote_write, false).serialize();
  seeds.push_back(Bytes(good.begin(), good.begin() + 39));
  Bytes longer = good;
  longer.push_back(0);
  seeds.push_back(longer);
  Bytes wrap = RemoteRegion(~std::uint64_t{0}, 2, 1, Access::remote_read, false).serialize();
  seeds.push_back(wrap);
  Bytes flag = good;
  flag[5] |= 0x80;
  seeds.push_back(flag);
  write_seeds_if_asked(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> in(data, size);
  auto r = RemoteRegion::parse(in);
  if (!r) {
    FUZZ_CHECK(r.error() == remora::Errc::malformed);
    return 0;
  }
  FUZZ_CHECK(size == RemoteRegion::kSerializedSize);
  FUZZ_CHECK(r->address() + r->length() >= r->address());
  FUZZ_CHECK((r->access() & (Access::remote_read | Access::remote_write)) == r->access());
  const auto out = r->serialize();
  FUZZ_CHECK(out.size() == size && std::memcmp(out.data(), data, size) == 0);
  auto again = RemoteRegion::parse(out);
  FUZZ_CHECK(again && *again == *r);
  return 0;
}
