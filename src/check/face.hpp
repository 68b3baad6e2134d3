// src/check/face.hpp - for the C faces: the cookie their consumer gave.
//
// A face may post with a cookie of its own (libdat posts a slot token and
// keeps the DAT_DTO_COOKIE in its table). remora-check's reports should
// name the consumer's cookie: the face holds a FaceCookie around the post.
// It also says when the consumer asked for no completion on success (a face
// that posts such an operation signalled, to release its own slot): the
// consumer never reaps one, so the checker treats the operation as
// unsignalled. Costs one thread-local store per post, checking or not.
#pragma once

#include <cstdint>

namespace remora::detail::check {

struct FaceCookieSlot {
  std::uint64_t cookie = 0;
  bool set = false;
  bool suppressed = false;  // no completion for the consumer on success
};
extern thread_local FaceCookieSlot face_cookie;

class FaceCookie {
 public:
  explicit FaceCookie(std::uint64_t c, bool suppressed = false) noexcept { face_cookie = {c, true, suppressed}; }
  ~FaceCookie() { face_cookie.set = false; }
  FaceCookie(const FaceCookie&) = delete;
  FaceCookie& operator=(const FaceCookie&) = delete;
};

}  // namespace remora::detail::check
