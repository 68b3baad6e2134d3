// remora-info: which libfabric providers and interfaces Remora can use on
// this machine, and what each of them supports.
//
//   remora-info [--provider NAME] [--json] [--all] [--help]
//
// Exit status: 0 when at least one usable provider/interface was found,
// 1 when none was (or enumeration failed), 2 on a bad command line.
#include <remora/remora.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

namespace {

using remora::tools::Option;
using remora::tools::UsageError;

constexpr std::string_view kProgram = "remora-info";

// ---- command line -----------------------------------------------------------

struct Options {
  std::string provider;  // empty: every provider
  bool json = false;
  bool all = false;
  bool help = false;
};

constexpr std::array<Option<Options>, 4> kOptions{{
    {"--provider", "NAME", "only this libfabric provider (tcp, verbs, ...)",
     [](Options& o, std::string_view v) {
       if (v.empty()) throw UsageError("--provider: empty name");
       o.provider = v;
     }},
    {"--json", "", "print a JSON array instead of the table", [](Options& o, std::string_view) { o.json = true; }},
    {"--all", "",
     "also list the entries Remora cannot open (e.g. IPv6-only\n"
     "interfaces), with the reason",
     [](Options& o, std::string_view) { o.all = true; }},
    {"--help", "", "show this help", [](Options& o, std::string_view) { o.help = true; }},
}};

std::string usage() {
  std::string out = "usage: " + std::string(kProgram) + " [--provider NAME] [--json] [--all]\n\n";
  out +=
      "Lists the libfabric provider/interface pairs Remora can use here (FI_EP_MSG\n"
      "with RMA) and what each supports. Every usable entry is opened once to check it.\n\n"
      "options:\n";
  out += remora::tools::options_help<Options>(kOptions);
  return out;
}

// ---- the engine: enumerate and check ------------------------------------------

struct Entry {
  remora::FabricInfo info;
  bool usable = false;
  std::string reason;  // why not, when !usable
};

// Features Remora itself provides on every usable entry, whatever the
// provider has natively: both go through the target agent's control protocol.
struct RemoraFeatures {
  static constexpr bool atomic_write = true;
  static constexpr bool flush_visibility = true;
  static constexpr bool flush_persistent = true;  // to regions declared persistent
  static constexpr std::string_view via = "target_agent";
};

std::vector<Entry> collect(const std::string& provider) {
  auto list = remora::list_fabrics(provider);
  if (!list) throw std::runtime_error("enumerating libfabric providers failed: " + list.error().message());
  std::vector<Entry> out;
  for (auto& info : *list) {
    Entry e;
    e.info = std::move(info);
    if (e.info.address.empty()) {
      e.reason = "no IPv4 address (Remora binds interfaces by IPv4 address)";
    } else {
      remora::FabricOptions fo;
      fo.provider = e.info.provider;
      fo.address = e.info.address;
      auto fabric = remora::Fabric::open(fo);
      if (fabric) {
        e.usable = true;
      } else {
        e.reason = "Fabric::open failed: " + fabric.error().message();
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// ---- rendering ----------------------------------------------------------------

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string human_bytes(std::size_t n) {
  if (n == std::numeric_limits<std::size_t>::max() || n >= (std::size_t{1} << 62)) return "unlimited";
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  std::size_t v = n;
  while (unit + 1 < kUnits.size() && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++unit;
  }
  return std::to_string(v) + (unit == 0 ? "" : std::string(" ") + kUnits[unit]);
}

std::string render_table(const std::vector<Entry>& entries, bool all) {
  const std::vector<std::string> head = {"provider",    "fabric",        "interface", "address",
                                         "segs",        "max msg",       "inject",    "native atomics",
                                         "virt addr",   "requires sync", "odp",       "remora atomic write",
                                         "remora flush"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : entries) {
    if (!e.usable) continue;
    const auto& i = e.info;
    rows.push_back({i.provider, i.fabric_name, i.domain_name, i.address, std::to_string(i.max_segments),
                    human_bytes(i.max_message), human_bytes(i.inject_size), yes_no(i.native_atomics),
                    yes_no(i.virtual_addressing), yes_no(i.requires_sync), yes_no(i.odp), "yes (agent)",
                    "vis+pers (agent)"});
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      s += r[c];
      if (c + 1 < r.size()) s += std::string(width[c] - r[c].size() + 2, ' ');
    }
    return s + "\n";
  };
  std::string out = line(head);
  for (const auto& r : rows) out += line(r);
  out +=
      "\nsegs: gather/scatter entries per operation; max msg: largest message; inject: largest\n"
      "inline send. native atomics: the provider's own FI_ATOMIC. requires sync: memory is not\n"
      "cache coherent (dat_lmr_sync_* needed). odp: registered memory is never pinned.\n"
      "remora atomic write / remora flush: always available through Remora's target agent,\n"
      "whatever the provider offers: 8-byte atomic write, and flush to visibility and to\n"
      "persistence (persistence: regions made with ProtectionZone::map_file or registered\n"
      "as persistent).\n";
  const auto unusable =
      static_cast<std::size_t>(std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return !e.usable; }));
  if (unusable > 0 && !all) {
    out += "\n" + std::to_string(unusable) + " more entr" + (unusable == 1 ? "y" : "ies") +
           " Remora cannot use (--all lists them with the reason).\n";
  } else if (unusable > 0) {
    out += "\nnot usable by Remora:\n";
    for (const auto& e : entries)
      if (!e.usable)
        out += "  " + e.info.provider + " " + e.info.domain_name + " (" + e.info.fabric_name + "): " + e.reason + "\n";
  }
  return out;
}

std::string render_json(const std::vector<Entry>& entries, bool all) {
  using remora::tools::json_escape;
  std::string out = "[";
  bool first = true;
  for (const auto& e : entries) {
    if (!e.usable && !all) continue;
    const auto& i = e.info;
    out += first ? "\n" : ",\n";
    first = false;
    out += "  {\"provider\":\"" + json_escape(i.provider) + "\",\"fabric\":\"" + json_escape(i.fabric_name) +
           "\",\"domain\":\"" + json_escape(i.domain_name) + "\",\"address\":\"" + json_escape(i.address) +
           "\",\"max_segments\":" + std::to_string(i.max_segments) +
           ",\"max_message\":" + std::to_string(i.max_message) + ",\"inject_size\":" + std::to_string(i.inject_size) +
           ",\"native_atomics\":" + (i.native_atomics ? "true" : "false") +
           ",\"virtual_addressing\":" + (i.virtual_addressing ? "true" : "false") +
           ",\"requires_sync\":" + (i.requires_sync ? "true" : "false") + ",\"odp\":" + (i.odp ? "true" : "false") +
           ",\"usable\":" + (e.usable ? "true" : "false");
    if (!e.usable) out += ",\"reason\":\"" + json_escape(e.reason) + "\"";
    if (e.usable) {
      out += ",\"remora\":{\"atomic_write\":" + std::string(RemoraFeatures::atomic_write ? "true" : "false") +
             ",\"flush_visibility\":" + (RemoraFeatures::flush_visibility ? "true" : "false") +
             ",\"flush_persistent\":" + (RemoraFeatures::flush_persistent ? "true" : "false") + ",\"via\":\"" +
             std::string(RemoraFeatures::via) + "\"}";
    }
    out += "}";
  }
  out += first ? "]\n" : "\n]\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    remora::tools::parse_options<Options>(kOptions, argc, argv, opts);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
    return 2;
  }
  if (opts.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    const std::vector<Entry> entries = collect(opts.provider);
    const bool any_usable = std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return e.usable; });
    if (opts.json) {
      std::fputs(render_json(entries, opts.all).c_str(), stdout);
    } else if (any_usable || opts.all) {
      std::fputs(render_table(entries, opts.all).c_str(), stdout);
    }
    if (!any_usable) {
      std::fprintf(stderr, "%s: no usable libfabric provider/interface found%s%s%s\n", kProgram.data(),
                   opts.provider.empty() ? "" : " for provider '", opts.provider.c_str(),
                   opts.provider.empty() ? " (is libfabric installed with the tcp provider? try FI_LOG_LEVEL=warn)"
                                         : "' (check the name; try without --provider)");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    return 1;
  }
  return 0;
}
