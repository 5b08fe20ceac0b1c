// Writes indented CUDA C++ with scoped braces and fresh names.
#ifndef TORCHFUSE_CODEGEN_NVRTC_CUDA_WRITER_H_
#define TORCHFUSE_CODEGEN_NVRTC_CUDA_WRITER_H_

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace torchfuse::codegen {

/// Accumulates source text. Names come from per-prefix counters, so the same sequence of
/// calls always writes the same bytes.
class CudaWriter {
 public:
  /// Writes one line at the current indent.
  template <typename... Args>
  void Line(const Args&... parts) {
    text_.append(static_cast<size_t>(indent_) * 2, ' ');
    absl::StrAppend(&text_, parts...);
    text_ += '\n';
  }
  /// Writes an empty line.
  void Blank() { text_ += '\n'; }
  /// Writes text verbatim (e.g. the device prelude).
  void Raw(absl::string_view text) { absl::StrAppend(&text_, text); }

  /// `header {` on entry, `}` + `trailer` on exit, indenting what is written in between.
  class Scope {
   public:
    Scope(CudaWriter* w, absl::string_view header, absl::string_view trailer = "")
        : w_(w), trailer_(trailer) {
      w_->Line(header, header.empty() ? "{" : " {");
      ++w_->indent_;
    }
    ~Scope() {
      --w_->indent_;
      w_->Line("}", trailer_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CudaWriter* w_;
    std::string trailer_;
  };

  /// A new name `prefix` + counter (v0, v1, ...).
  std::string FreshName(const std::string& prefix) {
    return absl::StrCat(prefix, counters_[prefix]++);
  }

  const std::string& str() const { return text_; }

 private:
  std::string text_;
  int indent_ = 0;
  std::map<std::string, int> counters_;
};

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_CUDA_WRITER_H_
