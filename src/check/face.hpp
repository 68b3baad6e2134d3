// src/check/face.hpp - for the C faces: the cookie their consumer gave.
//
// A face may post with a cookie of its own (libdat posts a slot token and
// keeps the DAT_DTO_COOKIE in its table). remora-check's reports should
// name the consumer's cookie: the face holds a FaceCookie around the post.
// Costs one thread-local store per post, checking or not.
#pragma once

#include <cstdint>

namespace remora::detail::check {

struct FaceCookieSlot {
  std::uint64_t cookie = 0;
  bool set = false;
};
extern thread_local FaceCookieSlot face_cookie;

class FaceCookie {
 public:
  explicit FaceCookie(std::uint64_t c) noexcept { face_cookie = {c, true}; }
  ~FaceCookie() { face_cookie.set = false; }
  FaceCookie(const FaceCookie&) = delete;
  FaceCookie& operator=(const FaceCookie&) = delete;
};

}  // namespace remora::detail::check
