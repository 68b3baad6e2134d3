#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rbench {
namespace {

double percentile_us(const std::vector<std::uint64_t>& sorted, double q) {
    if (sorted.empty()) return 0;
    auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    rank = std::clamp<std::size_t>(rank, 1, sorted.size());
    return static_cast<double>(sorted[rank - 1]) / 1000.0;
}

std::string format(const char* fmt, auto... args) {
    char buf[512];
    const int n = std::snprintf(buf, sizeof buf, fmt, args...);
    return std::string(buf, n < 0 ? 0 : std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
}

}  // namespace

Summary summarize(Measurement& m) {
    std::sort(m.lat_ns.begin(), m.lat_ns.end());
    Summary s;
    if (m.seconds > 0) {
        s.gbps = static_cast<double>(m.size) * static_cast<double>(m.iters) / m.seconds / 1e9;
        s.mops = static_cast<double>(m.iters) / m.seconds / 1e6;
    }
    s.p50_us = percentile_us(m.lat_ns, 0.50);
    s.p99_us = percentile_us(m.lat_ns, 0.99);
    s.p999_us = percentile_us(m.lat_ns, 0.999);
    return s;
}

std::string table_header(std::string_view op, std::string_view completion, unsigned qd) {
    std::string out = format("# engine %.*s  op %.*s  completion %.*s  qd %u\n",
                             static_cast<int>(kEngine.size()), kEngine.data(),
                             static_cast<int>(op.size()), op.data(),
                             static_cast<int>(completion.size()), completion.data(), qd);
    out += format("%12s %10s %10s %12s %12s %12s\n", "size", "GB/s", "Mops", "lat p50 us",
                  "lat p99 us", "lat p99.9 us");
    return out;
}

std::string table_row(const Measurement& m, const Summary& s) {
    return format("%12zu %10.3f %10.4f %12.2f %12.2f %12.2f\n", m.size, s.gbps, s.mops, s.p50_us,
                  s.p99_us, s.p999_us);
}

std::string json_line(const Measurement& m, const Summary& s) {
    return format(
        "{\"op\":\"%s\",\"size\":%zu,\"iters\":%llu,\"qd\":%u,\"gbps\":%.6f,\"mops\":%.6f,"
        "\"lat_p50_us\":%.3f,\"lat_p99_us\":%.3f,\"lat_p999_us\":%.3f,\"engine\":\"%.*s\","
        "\"completion\":\"%s\"}",
        m.op.c_str(), m.size, static_cast<unsigned long long>(m.iters), m.qd, s.gbps, s.mops,
        s.p50_us, s.p99_us, s.p999_us, static_cast<int>(kEngine.size()), kEngine.data(),
        m.completion.c_str());
}

}  // namespace rbench
