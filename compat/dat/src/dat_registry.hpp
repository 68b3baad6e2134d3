// compat/dat/src/dat_registry.hpp - the dat.conf registry parser (the file
// DAT_OVERRIDE names), declared apart so fuzz/ can feed it bytes directly.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace remora_dat {

/// One usable dat.conf line: IA name, API version ("u1.x"), IA parameters.
struct ConfEntry {
  std::string name, api, ia_params;
};

/// Split a dat.conf line into fields; "quoted strings" are one field and a
/// '#' where a field would start ends the line.
std::vector<std::string> conf_fields(const std::string& line);

/// The usable entries of a dat.conf text: lines of at least 7 fields whose
/// API version is a uDAPL 1.x one; any other line is skipped.
std::vector<ConfEntry> parse_conf(std::istream& in);

}  // namespace remora_dat
