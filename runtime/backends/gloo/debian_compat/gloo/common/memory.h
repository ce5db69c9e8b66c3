// Debian's libgloo-dev (0.0~git20220518) leaves out gloo/common/memory.h, which
// gloo/transport/tcp/pair.h includes: without it no program can name Gloo's TCP pair, which
// gloo_pair_shutdown.cc must. Where the real header is installed it is used instead; otherwise
// this declares the three pointer boxes tcp/pair.h names, with Gloo's members (one standard
// smart pointer each), so that the pair's layout reads as libgloo built it. meshrt never
// constructs one: Gloo's own code does.
#pragma once

#if __has_include_next(<gloo/common/memory.h>)
#include_next <gloo/common/memory.h>
#else
#include <memory>

namespace gloo {

template <typename T>
class ShareableNonOwningPtr final {
 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
 private:
  std::weak_ptr<T> ptr_;
};

template <typename T>
class NonOwningPtr final {
 private:
  std::shared_ptr<T> ptr_;
};

}  // namespace gloo
#endif
