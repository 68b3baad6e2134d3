// fuzz/fuzz_common.hpp - what the libFuzzer targets share: the seed hook and
// a check that stops the run with a message when an invariant fails.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace remora_fuzz {

using Bytes = std::vector<std::uint8_t>;

inline Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

template <class T>
void append(Bytes& out, const T& v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

/// Each target calls this from LLVMFuzzerInitialize with its seeds, built
/// with the project's own encoders where there are some. When the
/// environment variable REMORA_FUZZ_SEEDS names a directory, the seeds are
/// written there (seed-000, seed-001, ...) and the process exits, so
/// scripts/fuzz.sh can start each run from them; otherwise nothing happens.
inline void write_seeds_if_asked(const std::vector<Bytes>& seeds) {
  const char* dir = std::getenv("REMORA_FUZZ_SEEDS");
  if (dir == nullptr || *dir == '\0') return;
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "/seed-%03zu", i);
    std::string path = std::string(dir) + name;
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
      std::exit(1);
    }
  }
  std::fprintf(stderr, "wrote %zu seeds to %s\n", seeds.size(), dir);
  std::exit(0);
}

/// An invariant of a parser: report and abort (libFuzzer saves the input).
#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

}  // namespace remora_fuzz
