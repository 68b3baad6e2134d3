// remora-bench-register: what registering memory costs.
//
//   remora-bench-register [--regions N] [--reps R] [--mappings M]
//
// One zone (the same-host path on, as between processes of one host by
// default). Each repetition registers N regions of 4 KiB, one per page of
// a buffer, then closes them all; for each kind of region below it prints
// the median over R repetitions of the wall time per registration and the
// CPU time per registration (this process, user + system), and the time
// per close. With --mappings M the process makes M more mappings below
// its buffers (alternating read-only and read-write pages, so the kernel
// cannot merge them): a larger program, whose /proc/self/maps is longer
// before the regions registered.
//
// The kinds:
//   heap-all       a heap buffer (not on a page), every access: the
//                  writability check reads the process's mappings
//   page-all       page-aligned anonymous memory, every access: the
//                  writability check and the look for a shared file
//   page-rread     page-aligned, remote read only: the look for a shared file
//   page-lread     page-aligned, local read only: neither
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench_stats.hpp"
#include "cli.hpp"
#include "remora/remora.hpp"

namespace {

using namespace remora;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "remora-bench-register: %s\n", why.c_str());
  std::exit(1);
}

struct Kind {
  const char* name;
  bool page;
  Access access;
};

struct Config {
  long regions = 1000, reps = 5, mappings = 0;
  bool help = false;
};

/// A count for `option`, from `least` to LONG_MAX.
long count(std::string_view option, std::string_view text, long least) {
  const std::uint64_t v = tools::parse_u64(option, text);
  if (v < static_cast<std::uint64_t>(least) || v > static_cast<std::uint64_t>(LONG_MAX))
    throw tools::UsageError(std::string(option) + ": from " + std::to_string(least) + " to " +
                            std::to_string(LONG_MAX));
  return static_cast<long>(v);
}

constexpr tools::Option<Config> kOptions[] = {
    {"--regions", "N", "regions registered per repetition, one 4 KiB page each (default 1000)",
     [](Config& c, std::string_view v) { c.regions = count("--regions", v, 1); }},
    {"--reps", "R", "repetitions; the figures are their medians (default 5)",
     [](Config& c, std::string_view v) { c.reps = count("--reps", v, 1); }},
    {"--mappings", "M", "more mappings, made after the buffers and so below them (default 0)",
     [](Config& c, std::string_view v) { c.mappings = count("--mappings", v, 0); }},
    {"--help", "", "this text", [](Config& c, std::string_view) { c.help = true; }},
};

std::string usage() {
  return "usage: remora-bench-register [--regions N] [--reps R] [--mappings M]\n\noptions:\n" +
         tools::options_help<Config>(kOptions);
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    tools::parse_options<Config>(kOptions, argc, argv, cfg);
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "remora-bench-register: %s\n%s", e.what(), usage().c_str());
    return 2;
  }
  if (cfg.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  const long regions = cfg.regions, reps = cfg.reps, mappings = cfg.mappings;
  const long page = ::sysconf(_SC_PAGESIZE);
  const auto psize = static_cast<std::size_t>(page);

  auto fabric = Fabric::open({.address = "127.0.0.1"});
  if (!fabric) die("open the fabric: " + fabric.error().message());
  auto zone = fabric->create_zone();
  if (!zone) die("create a zone: " + zone.error().message());

  const std::size_t bytes = static_cast<std::size_t>(regions) * psize;
  void* pages = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) die(bench::errno_text("mmap the buffer"));
  std::memset(pages, 1, bytes);
  std::vector<std::uint8_t> heap(bytes + 64, 1);

  // The extra mappings, each page its own (neighbours differ in
  // protection), made after the buffers: the kernel places new mappings
  // below the older ones, so they come before the buffers in
  // /proc/self/maps, whose text is read from the lowest address up.
  void* extra = MAP_FAILED;
  if (mappings > 0) {
    extra = ::mmap(nullptr, static_cast<std::size_t>(mappings) * psize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (extra == MAP_FAILED) die(bench::errno_text("mmap the extra mappings"));
    for (long m = 1; m < mappings; m += 2)
      if (::mprotect(static_cast<char*>(extra) + m * page, psize, PROT_READ) != 0) die(bench::errno_text("mprotect"));
    if (reinterpret_cast<std::uintptr_t>(extra) > reinterpret_cast<std::uintptr_t>(pages))
      std::fprintf(stderr, "remora-bench-register: the extra mappings lie above the buffer\n");
  }

  const Kind kinds[] = {
      {"heap-all", false, Access::all},
      {"page-all", true, Access::all},
      {"page-rread", true, Access::remote_read},
      {"page-lread", true, Access::local_read},
  };
  std::printf("%-11s %8s %5s %9s %12s %13s %9s\n", "kind", "regions", "reps", "mappings", "register_us", "reg_cpu_us",
              "close_us");
  for (const Kind& k : kinds) {
    std::vector<double> reg_us, cpu_us, close_us;
    for (long r = 0; r < reps; ++r) {
      std::vector<MemoryRegion> held;
      held.reserve(static_cast<std::size_t>(regions));
      const double cpu0 = bench::cpu_seconds();
      const auto t0 = Clock::now();
      for (long i = 0; i < regions; ++i) {
        std::uint8_t* at = k.page ? static_cast<std::uint8_t*>(pages) + static_cast<std::size_t>(i) * psize
                                  : heap.data() + 8 + static_cast<std::size_t>(i) * psize;
        auto mr = zone->register_memory(at, psize, k.access);
        if (!mr) die(std::string(k.name) + ": register: " + mr.error().message());
        held.push_back(std::move(*mr));
      }
      const auto t1 = Clock::now();
      const double cpu1 = bench::cpu_seconds();
      held.clear();
      const auto t2 = Clock::now();
      const auto n = static_cast<double>(regions);
      reg_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
      cpu_us.push_back((cpu1 - cpu0) * 1e6 / n);
      close_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / n);
    }
    std::printf("%-11s %8ld %5ld %9ld %12s %13s %9s\n", k.name, regions, reps, mappings,
                bench::fixed(bench::median(reg_us)).c_str(), bench::fixed(bench::median(cpu_us)).c_str(),
                bench::fixed(bench::median(close_us)).c_str());
  }
  ::munmap(pages, bytes);
  if (extra != MAP_FAILED) ::munmap(extra, static_cast<std::size_t>(mappings) * psize);
  return 0;
}
