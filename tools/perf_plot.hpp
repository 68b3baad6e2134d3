// tools/perf_plot.hpp - remora-perf --plot-json: reads the JSON lines that
// remora-perf and remora-bench-raw print (--json; bench/compare.sh keeps
// them) and draws them with svg_plot.hpp, one series per file (or per
// engine, operation and completion when a file holds several).
//
// Header-only and standard library only.
#pragma once

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "json_read.hpp"
#include "svg_plot.hpp"

namespace remora::perf {

/// A failure reading or writing the files; the tool prints it and exits 1.
class PlotError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One --plot-json argument: FILE or FILE=LABEL.
struct PlotInput {
  std::string file;
  std::string label;  ///< empty: from the JSON (engine, op, completion)
};

inline PlotInput parse_plot_input(std::string_view spec) {
  PlotInput in;
  const auto eq = spec.find('=');
  in.file = spec.substr(0, eq);
  if (eq != std::string_view::npos) in.label = spec.substr(eq + 1);
  return in;
}

/// The series of the files, in order. `gbits`: bandwidth in Gb/s. Sizes
/// that occur more than once in a series take the median of their values.
inline std::vector<plot::Series> series_from_json(const std::vector<PlotInput>& inputs, bool gbits) {
  struct Acc {
    std::string name;
    std::map<double, std::vector<std::pair<double, double>>> by_size;  // size -> (bandwidth, latency)
  };
  std::vector<Acc> accs;
  std::map<std::string, std::size_t> names;  // name -> accs index
  for (const PlotInput& in : inputs) {
    std::ifstream f(in.file);
    if (!f) throw PlotError("cannot read " + in.file);
    std::string line;
    std::size_t lineno = 0, objects = 0;
    while (std::getline(f, line)) {
      ++lineno;
      const auto first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] != '{') continue;  // tables, comments
      json::Value v;
      try {
        v = json::parse(line);
      } catch (const json::ParseError& e) {
        throw PlotError(in.file + ":" + std::to_string(lineno) + ": " + e.what());
      }
      const double size = v.number_or("size", 0);
      if (size <= 0) continue;  // not a result line
      ++objects;
      std::string name = in.label;
      if (name.empty()) {
        name = v.string_or("engine", "?") + " " + v.string_or("op", "?") + " (" + v.string_or("completion", "?") + ")";
        if (const json::Value* s = v.get("settings")) {
          const double conns = s->number_or("connections", 1);
          if (conns > 1) name += ", " + std::to_string(static_cast<long>(conns)) + " connections";
          if (s->bool_or("bidirectional", false)) name += ", bidirectional";
        }
      }
      auto it = names.find(name);
      if (it == names.end()) {
        it = names.emplace(name, accs.size()).first;
        accs.push_back({name, {}});
      }
      const double gbps = v.number_or("gbps", 0);
      const double bw = gbits ? v.number_or("gbits", gbps * 8) : gbps;
      accs[it->second].by_size[size].emplace_back(bw, v.number_or("lat_p50_us", 0));
    }
    if (objects == 0) throw PlotError(in.file + ": no result lines (JSON from --json)");
  }
  auto median = [](std::vector<double> xs) {
    std::sort(xs.begin(), xs.end());
    const std::size_t n = xs.size();
    return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  };
  std::vector<plot::Series> out;
  for (const Acc& a : accs) {
    plot::Series s;
    s.name = a.name;
    for (const auto& [size, values] : a.by_size) {
      std::vector<double> bw, lat;
      for (const auto& [b, l] : values) {
        bw.push_back(b);
        lat.push_back(l);
      }
      s.points.push_back({size, median(bw), median(lat)});
    }
    out.push_back(std::move(s));
  }
  return out;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw PlotError("cannot write " + path);
}

/// --plot-json: every input's series into one SVG at `svg`.
inline void plot_json_files(const std::vector<std::string>& specs, const std::string& svg, bool gbits,
                            const std::string& title) {
  std::vector<PlotInput> inputs;
  for (const auto& s : specs) inputs.push_back(parse_plot_input(s));
  plot::PlotOptions po;
  po.title = title.empty() ? "remora-perf" : title;
  po.bandwidth_unit = gbits ? "Gb/s" : "GB/s";
  write_file(svg, plot::render_svg(series_from_json(inputs, gbits), po));
}

}  // namespace remora::perf
