// Results of one size and how they are printed (table or JSON lines).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rbench {

struct Measurement {
    std::string op;
    std::string completion;  // "default", "delivery" or "commit"
    std::size_t size = 0;
    std::uint64_t iters = 0;
    unsigned qd = 0;
    double seconds = 0;                  // first post to last completion
    std::vector<std::uint64_t> lat_ns;   // per operation, post to completion
};

struct Summary {
    double gbps = 0;  // 1e9 bytes per second
    double mops = 0;  // 1e6 operations per second
    double p50_us = 0;
    double p99_us = 0;
    double p999_us = 0;
};

// Sorts m.lat_ns and computes the summary (nearest-rank percentiles).
Summary summarize(Measurement& m);

inline constexpr std::string_view kEngine = "raw-libfabric";

// The table: a header (once), then one row per size.
std::string table_header(std::string_view op, std::string_view completion, unsigned qd);
std::string table_row(const Measurement& m, const Summary& s);

// One JSON object, no trailing newline.
std::string json_line(const Measurement& m, const Summary& s);

}  // namespace rbench
