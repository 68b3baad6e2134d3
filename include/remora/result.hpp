// remora/result.hpp - Result<T>: a value or a std::error_code.
#pragma once

#include <cstdlib>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "remora/error.hpp"

namespace remora {

/// A value or an error. Accessing the value of a failed result throws
/// std::system_error carrying the error (a programming mistake, not a
/// runtime condition).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}   // NOLINT(implicit)
  Result(std::error_code ec) : v_(ec) {}      // NOLINT(implicit)
  Result(Errc e) : v_(make_error_code(e)) {}  // NOLINT(implicit)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  std::error_code error() const noexcept { return ok() ? std::error_code{} : std::get<1>(v_); }

  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  void check() const {
    if (!ok()) throw std::system_error(std::get<1>(v_), "remora::Result::value");
  }
  std::variant<T, std::error_code> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(std::error_code ec) : ec_(ec) {}      // NOLINT(implicit)
  Result(Errc e) : ec_(make_error_code(e)) {}  // NOLINT(implicit)
  bool ok() const noexcept { return !ec_; }
  explicit operator bool() const noexcept { return ok(); }
  std::error_code error() const noexcept { return ec_; }
  void value() const {
    if (ec_) throw std::system_error(ec_, "remora::Result::value");
  }

 private:
  std::error_code ec_;
};

}  // namespace remora
