// Text helpers for tests that check generated source or printed output.
#ifndef TORCHFUSE_TESTS_SUPPORT_TEXT_H_
#define TORCHFUSE_TESTS_SUPPORT_TEXT_H_

#include <string>

namespace torchfuse::test_support {

// How many times `what` occurs in `s` (overlapping occurrences count).
inline int CountOccurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace torchfuse::test_support

#endif  // TORCHFUSE_TESTS_SUPPORT_TEXT_H_
