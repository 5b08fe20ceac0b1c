// Sets an environment variable for a scope and restores its earlier value (or its absence)
// after: tuning and compile settings are read from the environment when a module compiles.
#ifndef TORCHFUSE_TESTS_SUPPORT_SCOPED_ENV_H_
#define TORCHFUSE_TESTS_SUPPORT_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace torchfuse::test_support {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace torchfuse::test_support

#endif  // TORCHFUSE_TESTS_SUPPORT_SCOPED_ENV_H_
