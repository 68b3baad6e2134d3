// tools/json_read.hpp - a small JSON reader for remora-perf --plot-json: it
// reads the JSON lines that remora-perf and remora-bench-raw print (objects
// of numbers, strings, booleans, null, arrays and nested objects). Not a
// general-purpose library: no \u escapes beyond Latin-1, numbers as double.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace remora::json {

struct Value {
  enum class Type { null, boolean, number, string, array, object };
  Type type = Type::null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<Value> items;              ///< array
  std::map<std::string, Value> members;  ///< object

  /// The member `key` of an object, or nullptr.
  const Value* get(std::string_view key) const {
    if (type != Type::object) return nullptr;
    const auto it = members.find(std::string(key));
    return it == members.end() ? nullptr : &it->second;
  }
  double number_or(std::string_view key, double fallback) const {
    const Value* v = get(key);
    return v != nullptr && v->type == Type::number ? v->n : fallback;
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    const Value* v = get(key);
    return v != nullptr && v->type == Type::string ? v->s : fallback;
  }
  bool bool_or(std::string_view key, bool fallback) const {
    const Value* v = get(key);
    return v != nullptr && v->type == Type::boolean ? v->b : fallback;
  }
};

class ParseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

class Parser {
 public:
  explicit Parser(std::string_view text) : t_(text) {}

  Value document() {
    Value v = value(0);
    skip_ws();
    if (i_ != t_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw ParseError(what + " at offset " + std::to_string(i_)); }
  void skip_ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    skip_ws();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(std::string_view w) {
    if (t_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  Value value(int depth) {
    if (depth > 32) fail("nested too deeply");
    skip_ws();
    if (i_ >= t_.size()) fail("unexpected end");
    Value v;
    const char c = t_[i_];
    if (c == '{') {
      ++i_;
      v.type = Value::Type::object;
      if (eat('}')) return v;
      do {
        skip_ws();
        std::string key = string();
        expect(':');
        v.members[key] = value(depth + 1);
      } while (eat(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.type = Value::Type::array;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      expect(']');
    } else if (c == '"') {
      v.type = Value::Type::string;
      v.s = string();
    } else if (word("true")) {
      v.type = Value::Type::boolean;
      v.b = true;
    } else if (word("false")) {
      v.type = Value::Type::boolean;
    } else if (word("null")) {
    } else {
      v.type = Value::Type::number;
      const std::string rest(t_.substr(i_, std::min<std::size_t>(t_.size() - i_, 64)));
      char* end = nullptr;
      v.n = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) fail("bad value");
      i_ += static_cast<std::size_t>(end - rest.c_str());
    }
    return v;
  }

  std::string string() {
    if (i_ >= t_.size() || t_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < t_.size() && t_[i_] != '"') {
      char c = t_[i_++];
      if (c == '\\') {
        if (i_ >= t_.size()) break;
        c = t_[i_++];
        switch (c) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'u': {
            if (i_ + 4 > t_.size()) fail("bad \\u escape");
            const unsigned long code = std::strtoul(std::string(t_.substr(i_, 4)).c_str(), nullptr, 16);
            i_ += 4;
            out += code < 0x80 ? static_cast<char>(code) : '?';
            break;
          }
          default: out += c;  // '"', '\\', '/'
        }
      } else {
        out += c;
      }
    }
    if (i_ >= t_.size()) fail("unterminated string");
    ++i_;
    return out;
  }

  std::string_view t_;
  std::size_t i_ = 0;
};

}  // namespace detail

/// Parses one JSON document. Throws ParseError.
inline Value parse(std::string_view text) { return detail::Parser(text).document(); }

}  // namespace remora::json
