// Status helpers for Abseil 20220623, which ships no status macros.
#ifndef TORCHFUSE_COMMON_STATUS_MACROS_H_
#define TORCHFUSE_COMMON_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TF_STATUS_CONCAT_INNER(a, b) a##b
#define TF_STATUS_CONCAT(a, b) TF_STATUS_CONCAT_INNER(a, b)

/// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define TF_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    ::absl::Status tf_status_ = (expr);                \
    if (!tf_status_.ok()) return tf_status_;           \
  } while (0)

#define TF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                             \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

/// `TF_ASSIGN_OR_RETURN(auto x, F());` binds the value of a StatusOr or returns its error.
#define TF_ASSIGN_OR_RETURN(lhs, rexpr) \
  TF_ASSIGN_OR_RETURN_IMPL(TF_STATUS_CONCAT(tf_statusor_, __COUNTER__), lhs, rexpr)

/// Internal invariant: aborts with file and line when `cond` is false. Never for user input.
#define TF_CHECK(cond)                                                          \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: TF_CHECK failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                      \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

#endif  // TORCHFUSE_COMMON_STATUS_MACROS_H_
