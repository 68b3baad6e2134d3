// tools/svg_plot.hpp - a self-contained SVG writer for remora-perf --plot:
// bandwidth and latency against message size, one line per series, on a
// log2 size axis, with a legend. No dependencies beyond the standard
// library.
//
// The document is meant to be read by people and checked by programs
// (tools/smoke.sh parses it). Its structure:
//   <svg ...>
//     <title>TITLE</title>
//     <g class="panel" id="bandwidth" data-unit="GB/s">     axes, ticks, then
//       <polyline class="series" data-series="NAME" data-points="N" points="x,y ..."/>
//       <g class="markers" data-series="NAME"><circle ...><title>size: value</title></circle>...</g>
//     </g>
//     <g class="panel" id="latency" data-unit="us"> ... the same ... </g>
//     <g class="legend"><g class="legend-entry" data-series="NAME">...<text>NAME</text></g>...</g>
//   </svg>
// Every series has one polyline per panel with one vertex per point (a
// latency of 0, meaning "not measured", is left out of the latency panel).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace remora::plot {

struct Point {
  double size = 0;       ///< bytes, > 0
  double bandwidth = 0;  ///< in PlotOptions::bandwidth_unit
  double latency = 0;    ///< microseconds; 0: none
};

struct Series {
  std::string name;
  std::vector<Point> points;  ///< in size order
};

struct PlotOptions {
  std::string title = "remora-perf";
  std::string bandwidth_unit = "GB/s";
  std::string latency_label = "latency p50";
};

namespace detail {

inline std::string xml_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

/// A value for a tick label: up to 3 significant digits, no trailing zeros.
inline std::string tick_text(double v) {
  char buf[32];
  if (v >= 1000 && v < 1e9 && v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);  // 5000, not 5e+03
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

/// A byte count as 2, 64, 1K, 512K, 8M, 1G.
inline std::string size_text(double bytes) {
  static constexpr std::array<const char*, 4> kUnits{"", "K", "M", "G"};
  std::size_t u = 0;
  while (bytes >= 1024 && u + 1 < kUnits.size()) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%s", bytes, kUnits[u]);
  return buf;
}

/// Colours that stay apart for the first series (then they repeat).
inline constexpr std::array<const char*, 8> kColours{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/// A linear axis from 0 to a round maximum, with its ticks.
struct LinearScale {
  double max = 1;
  std::vector<double> ticks;
  explicit LinearScale(double data_max) {
    if (!(data_max > 0) || !std::isfinite(data_max)) data_max = 1;
    const double raw_step = data_max / 5;
    const double mag = std::pow(10.0, std::floor(std::log10(raw_step)));
    double step = mag;
    for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      step = m * mag;
      if (step >= raw_step) break;
    }
    max = std::ceil(data_max / step) * step;
    for (double t = 0; t <= max + step / 2; t += step) ticks.push_back(t);
  }
  double fraction(double v) const { return v / max; }
};

/// A log10 axis over whole decades covering [lo, hi], ticks at 1, 2, 5 x 10^k.
struct LogScale {
  double lo_exp = 0, hi_exp = 1;
  std::vector<double> ticks;
  LogScale(double lo, double hi) {
    if (!(lo > 0)) lo = 1;
    if (!(hi >= lo)) hi = lo;
    lo_exp = std::floor(std::log10(lo));
    hi_exp = std::ceil(std::log10(hi));
    if (hi_exp <= lo_exp) hi_exp = lo_exp + 1;
    const bool dense = hi_exp - lo_exp <= 3;
    for (double e = lo_exp; e <= hi_exp; ++e) {
      const double base = std::pow(10.0, e);
      ticks.push_back(base);
      if (dense && e < hi_exp) {
        ticks.push_back(2 * base);
        ticks.push_back(5 * base);
      }
    }
  }
  double fraction(double v) const { return (std::log10(v) - lo_exp) / (hi_exp - lo_exp); }
};

/// The size axis: log2, from the smallest to the largest size (a power of
/// two each), one tick per power of two, labels thinned to fit.
struct SizeScale {
  double lo = 0, hi = 1;  ///< log2 of the ends
  SizeScale(double min_size, double max_size) {
    lo = std::floor(std::log2(std::max(min_size, 1.0)));
    hi = std::ceil(std::log2(std::max(max_size, 1.0)));
    if (hi <= lo) {
      lo -= 1;
      hi += 1;
    }
  }
  double fraction(double size) const { return (std::log2(size) - lo) / (hi - lo); }
};

struct Box {
  double x, y, w, h;  ///< plotting area inside the axes
};

/// One panel: frame, grid, tick labels, axis titles, then the series.
template <class YScale, class Value>
std::string panel(std::string_view id, std::string_view unit, std::string_view y_title, const Box& b,
                  const SizeScale& xs, const YScale& ys, const std::vector<Series>& series, Value value) {
  std::string o = "<g class=\"panel\" id=\"" + std::string(id) + "\" data-unit=\"" + xml_escape(unit) + "\">\n";
  o += "<rect x=\"" + num(b.x) + "\" y=\"" + num(b.y) + "\" width=\"" + num(b.w) + "\" height=\"" + num(b.h) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";
  // Size ticks: every power of two, a label at most every ~45 px.
  const int n_ticks = static_cast<int>(xs.hi - xs.lo);
  const int label_every = std::max(1, static_cast<int>(std::ceil(45.0 * n_ticks / b.w)));
  for (int i = 0; i <= n_ticks; ++i) {
    const double e = xs.lo + i;
    const double x = b.x + b.w * (e - xs.lo) / (xs.hi - xs.lo);
    const bool labelled = static_cast<int>(e) % label_every == 0;
    o += "<line class=\"grid\" x1=\"" + num(x) + "\" y1=\"" + num(b.y) + "\" x2=\"" + num(x) + "\" y2=\"" +
         num(b.y + b.h) + "\" stroke=\"#ddd\"/>\n";
    if (labelled)
      o += "<text class=\"xtick\" x=\"" + num(x) + "\" y=\"" + num(b.y + b.h + 16) + "\" text-anchor=\"middle\">" +
           size_text(std::exp2(e)) + "</text>\n";
  }
  for (const double t : ys.ticks) {
    const double y = b.y + b.h * (1 - ys.fraction(t));
    o += "<line class=\"grid\" x1=\"" + num(b.x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(b.x + b.w) + "\" y2=\"" +
         num(y) + "\" stroke=\"#ddd\"/>\n";
    o += "<text class=\"ytick\" x=\"" + num(b.x - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" +
         tick_text(t) + "</text>\n";
  }
  o += "<text class=\"xlabel\" x=\"" + num(b.x + b.w / 2) + "\" y=\"" + num(b.y + b.h + 36) +
       "\" text-anchor=\"middle\">message size (bytes, log2)</text>\n";
  o += "<text class=\"ylabel\" x=\"" + num(b.x - 52) + "\" y=\"" + num(b.y + b.h / 2) +
       "\" text-anchor=\"middle\" transform=\"rotate(-90 " + num(b.x - 52) + " " + num(b.y + b.h / 2) + ")\">" +
       xml_escape(y_title) + "</text>\n";

  for (std::size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* colour = kColours[i % kColours.size()];
    std::string points, markers;
    std::size_t n = 0;
    for (const Point& p : s.points) {
      const double v = value(p);
      if (!(p.size > 0) || !std::isfinite(v) || !(v > 0 || std::is_same_v<YScale, LinearScale>)) continue;
      const double x = b.x + b.w * xs.fraction(p.size);
      const double y = b.y + b.h * (1 - std::clamp(ys.fraction(v), 0.0, 1.0));
      if (n++ != 0) points += ' ';
      points += num(x) + "," + num(y);
      markers += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"3\" fill=\"" + colour + "\"><title>" +
                 size_text(p.size) + " B: " + tick_text(v) + " " + xml_escape(unit) + "</title></circle>\n";
    }
    const std::string name = xml_escape(s.name);
    o += "<polyline class=\"series\" data-series=\"" + name + "\" data-points=\"" + std::to_string(n) +
         "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
    o += "<g class=\"markers\" data-series=\"" + name + "\">\n" + markers + "</g>\n";
  }
  return o + "</g>\n";
}

}  // namespace detail

/// The SVG document: the bandwidth panel above the latency panel (log10
/// microseconds), sharing the size axis, and the legend at the bottom.
inline std::string render_svg(const std::vector<Series>& series, const PlotOptions& opt) {
  using namespace detail;
  double min_size = 0, max_size = 0, max_bw = 0, min_lat = 0, max_lat = 0;
  for (const Series& s : series) {
    for (const Point& p : s.points) {
      if (!(p.size > 0)) continue;
      min_size = min_size == 0 ? p.size : std::min(min_size, p.size);
      max_size = std::max(max_size, p.size);
      if (std::isfinite(p.bandwidth)) max_bw = std::max(max_bw, p.bandwidth);
      if (p.latency > 0 && std::isfinite(p.latency)) {
        min_lat = min_lat == 0 ? p.latency : std::min(min_lat, p.latency);
        max_lat = std::max(max_lat, p.latency);
      }
    }
  }
  if (min_size == 0) min_size = max_size = 1;
  const SizeScale xs(min_size, max_size);
  const LinearScale bw_scale(max_bw);
  const LogScale lat_scale(min_lat > 0 ? min_lat : 1, max_lat > 0 ? max_lat : 10);

  constexpr double kWidth = 900, kLeft = 90, kRight = 30, kPanelH = 300, kTop = 50, kGap = 70;
  const double legend_rows = static_cast<double>((series.size() + 1) / 2);
  const double height = kTop + 2 * kPanelH + kGap + 60 + 22 * legend_rows + 20;
  const Box bw_box{kLeft, kTop, kWidth - kLeft - kRight, kPanelH};
  const Box lat_box{kLeft, kTop + kPanelH + kGap, kWidth - kLeft - kRight, kPanelH};

  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<title>" + xml_escape(opt.title) + "</title>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text class=\"title\" x=\"" + num(kWidth / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" +
       xml_escape(opt.title) + "</text>\n";
  o += panel("bandwidth", opt.bandwidth_unit, "bandwidth (" + opt.bandwidth_unit + ")", bw_box, xs, bw_scale, series,
             [](const Point& p) { return p.bandwidth; });
  o += panel("latency", "us", opt.latency_label + " (us, log10)", lat_box, xs, lat_scale, series,
             [](const Point& p) { return p.latency; });

  o += "<g class=\"legend\">\n";
  const double legend_y = lat_box.y + lat_box.h + 60;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double x = kLeft + static_cast<double>(i % 2) * (bw_box.w / 2);
    const double y = legend_y + 22 * static_cast<double>(i / 2);
    const char* colour = kColours[i % kColours.size()];
    o += "<g class=\"legend-entry\" data-series=\"" + xml_escape(series[i].name) + "\">";
    o += "<line x1=\"" + num(x) + "\" y1=\"" + num(y - 4) + "\" x2=\"" + num(x + 28) + "\" y2=\"" + num(y - 4) +
         "\" stroke=\"" + colour + "\" stroke-width=\"2\"/>";
    o += "<text x=\"" + num(x + 36) + "\" y=\"" + num(y) + "\">" + xml_escape(series[i].name) + "</text></g>\n";
  }
  o += "</g>\n</svg>\n";
  return o;
}

}  // namespace remora::plot
