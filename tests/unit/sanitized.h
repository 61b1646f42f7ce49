// Whether this test binary is built with a sanitizer that slows every event and replaces malloc (ASan, TSan: the
// sanitizer builds of scripts/test.sh). Tests use it to print what they would otherwise bound by time, or to skip
// what only glibc's allocator has.
#pragma once

namespace mopt::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace mopt::test
