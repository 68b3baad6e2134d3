// remora-bench-cma-split: what splitting a cross-memory write over two
// threads gives (src/core/direct/copier.hpp), by the kind of the peer's
// pages and by where the write lies.
//
//   remora-bench-cma-split [--size BYTES] [--reps N] [-D SECONDS]
//
// A forked child holds two target areas of four page tables' reach each
// (the kernel's huge page size, 2 MiB on x86-64), one in 4 KiB pages (MADV_NOHUGEPAGE) and one
// moved into huge pages (MADV_COLLAPSE; reported when the kernel refuses).
// This process writes --size bytes (default 1 MiB) into them with the
// copier's own cross_memory(), as one call (`one`) and split over two
// threads at the middle (`split`), at two places: inside one page table
// (`inside`; the kernel pins every 4 KiB page under that table's lock) and
// across a boundary between two tables a third of the way in (`across`).
// The source is one buffer (`hot`, in the caches) or walks 64 MiB (`cold`,
// read from memory, as a program streaming its data). For each case it
// prints the median GB/s over N repetitions of D seconds (default 5 x 0.3
// s), the lowest and highest, this process's CPU time per write (both
// threads), and the split's GB/s as a ratio to one call's.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench_stats.hpp"
#include "cli.hpp"
#include "core/direct/copier.hpp"
#include "core/direct/huge_pages.hpp"

namespace {

using remora::detail::direct::cross_memory;
using Clock = std::chrono::steady_clock;

/// One page table's reach: the kernel's huge page size (2 MiB on x86-64).
std::size_t table_span() {
  const std::size_t huge = remora::detail::direct::huge_page_size();
  return huge != 0 ? huge : std::size_t{2} << 20;
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "remora-bench-cma-split: %s\n", why.c_str());
  std::exit(1);
}

/// Four page tables' reach from a table boundary, touched; in huge pages
/// when `huge` (with a note where the kernel refuses).
std::uint8_t* target_area(std::size_t table, bool huge) {
  void* m = ::mmap(nullptr, 5 * table, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) die(remora::bench::errno_text("mmap the target"));
  auto* at = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(m) + table - 1) & ~(table - 1));
  (void)::madvise(at, 4 * table, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::memset(at, 0xA5, 4 * table);
  if (huge && ::madvise(at, 4 * table, 25 /* MADV_COLLAPSE */) != 0)
    std::fprintf(stderr, "remora-bench-cma-split: MADV_COLLAPSE: %s (the huge rows are in 4 KiB pages)\n",
                 std::strerror(errno));
  return at;
}

struct Config {
  std::size_t size = 1 << 20;
  unsigned reps = 5;
  double seconds = 0.3;
  bool help = false;
};

constexpr remora::tools::Option<Config> kOptions[] = {
    {"--size", "BYTES", "bytes per write (k, m suffixes; default 1m; from 256k to a page table's reach less 8k)",
     [](Config& c, std::string_view v) { c.size = remora::tools::parse_size("--size", v, std::size_t{1} << 30); }},
    {"--reps", "N", "repetitions of every case; the figures are their medians (default 5)",
     [](Config& c, std::string_view v) {
       const auto n = remora::tools::parse_u64("--reps", v);
       if (n == 0 || n > 1000) throw remora::tools::UsageError("--reps: between 1 and 1000");
       c.reps = static_cast<unsigned>(n);
     }},
    {"-D|--duration", "SECONDS", "length of one repetition (default 0.3)",
     [](Config& c, std::string_view v) { c.seconds = remora::tools::parse_seconds("--duration", v, 0.001, 60); }},
    {"--help", "", "this text", [](Config& c, std::string_view) { c.help = true; }},
};

std::string usage() {
  return "usage: remora-bench-cma-split [--size BYTES] [--reps N] [-D SECONDS]\n\n"
         "One call against a split over two threads, for same-host cross-memory writes into a child's\n"
         "memory in 4 KiB pages or huge pages, inside one page table or across two.\n\noptions:\n" +
         remora::tools::options_help<Config>(kOptions);
}

struct Result {
  double gbps, lo, hi, cpu_us;
};

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    remora::tools::parse_options<Config>(kOptions, argc, argv, cfg);
  } catch (const remora::tools::UsageError& e) {
    std::fprintf(stderr, "remora-bench-cma-split: %s\n%s", e.what(), usage().c_str());
    return 2;
  }
  if (cfg.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  const std::size_t table = table_span();
  const std::size_t size = cfg.size;
  if (size < remora::detail::direct::kSplitBytes || size > table - 8192)
    die("--size: from " + std::to_string(remora::detail::direct::kSplitBytes) + " to " + std::to_string(table - 8192) +
        " bytes");

  int to_parent[2], to_child[2];
  if (::pipe(to_parent) != 0 || ::pipe(to_child) != 0) die(remora::bench::errno_text("pipe"));
  const pid_t child = ::fork();
  if (child < 0) die(remora::bench::errno_text("fork"));
  if (child == 0) {
    ::close(to_child[1]);
    ::close(to_parent[0]);
    std::uint8_t* areas[2] = {target_area(table, false), target_area(table, true)};
    if (::write(to_parent[1], areas, sizeof areas) != static_cast<ssize_t>(sizeof areas)) ::_exit(1);
    char c;
    (void)::read(to_child[0], &c, 1);  // until the parent is done (EOF)
    ::_exit(0);
  }
  ::close(to_child[0]);
  ::close(to_parent[1]);
  std::uint8_t* areas[2] = {};
  if (::read(to_parent[0], areas, sizeof areas) != static_cast<ssize_t>(sizeof areas)) die("the child did not start");

  const std::size_t cold_bytes = std::size_t{64} << 20;
  std::vector<std::uint8_t> source(cold_bytes, 0x5A);
  auto measure = [&](std::uint8_t* at, bool cold, bool split) {
    std::vector<double> gbps, cpu;
    for (unsigned r = 0; r < cfg.reps; ++r) {
      std::size_t from = 0;
      std::uint64_t n = 0;
      const double cpu0 = remora::bench::cpu_seconds();
      const auto t0 = Clock::now();
      const auto until = t0 + std::chrono::duration<double>(cfg.seconds);
      while (Clock::now() < until) {
        iovec l{source.data() + from, size};
        if (cross_memory(child, true, &l, 1, iovec{at, size}, split) != static_cast<ssize_t>(size))
          die(remora::bench::errno_text("process_vm_writev"));
        ++n;
        if (cold && (from += size) + size > cold_bytes) from = 0;
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      gbps.push_back(static_cast<double>(n * size) / s / 1e9);
      cpu.push_back((remora::bench::cpu_seconds() - cpu0) * 1e6 / static_cast<double>(n));
    }
    const auto [lo, hi] = std::minmax_element(gbps.begin(), gbps.end());
    return Result{remora::bench::median(gbps), *lo, *hi, remora::bench::median(cpu)};
  };
  auto row = [](const char* target, const char* where, bool cold, const char* how, const Result& r, double ratio) {
    std::printf("%-6s %-7s %-5s %-6s %9s %8s-%-8s %10s %8s\n", target, where, cold ? "cold" : "hot", how,
                remora::bench::fixed(r.gbps).c_str(), remora::bench::fixed(r.lo).c_str(),
                remora::bench::fixed(r.hi).c_str(), remora::bench::fixed(r.cpu_us).c_str(),
                ratio > 0 ? remora::bench::fixed(ratio).c_str() : "-");
  };
  std::printf("%-6s %-7s %-5s %-6s %9s %17s %10s %8s\n", "pages", "where", "src", "how", "GB/s", "range", "CPU us/op",
              "split/1");
  for (int huge = 0; huge < 2; ++huge) {
    for (int across = 0; across < 2; ++across) {
      // Inside the second table, or a third of it below the boundary
      // between the first two.
      std::uint8_t* at = across ? areas[huge] + table - size / 3 : areas[huge] + table + 4096;
      for (int cold = 0; cold < 2; ++cold) {
        const Result one = measure(at, cold != 0, false);
        const Result split = measure(at, cold != 0, true);
        const char* pages = huge ? "huge" : "4k";
        const char* where = across ? "across" : "inside";
        row(pages, where, cold != 0, "one", one, 0);
        row(pages, where, cold != 0, "split", split, one.gbps > 0 ? split.gbps / one.gbps : 0);
      }
    }
  }
  std::fflush(stdout);
  ::close(to_child[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return 0;
}
