// A small JSON reader: enough for the graphs the Python side and torch.export write.
#ifndef TORCHFUSE_COMMON_JSON_H_
#define TORCHFUSE_COMMON_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace torchfuse::json {

/// A parsed JSON value. Numbers keep whether they were written as integers.
class Value {
 public:
  enum class Kind { kNull, kBool, kInt, kDouble, kString, kArray, kObject };

  Value() = default;
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Double(double d);
  static Value String(std::string s);
  static Value Array(std::vector<Value> items);
  static Value Object(std::map<std::string, Value> members);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kDouble; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kInt ? i_ : static_cast<int64_t>(d_); }
  double as_double() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& as_string() const { return s_; }
  const std::vector<Value>& items() const { return items_; }
  const std::map<std::string, Value>& members() const { return members_; }

  /// The member `key` of an object, or nullptr (also when this is not an object).
  const Value* Find(std::string_view key) const;
  /// The member `key`, or a null value when there is none (for chained reads of optional data).
  const Value& Get(std::string_view key) const;

  /// The kind's name, for error messages ("object", "string").
  static const char* KindName(Kind k);

 private:
  Kind kind_ = Kind::kNull;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0.0;
  std::string s_;
  std::vector<Value> items_;
  std::map<std::string, Value> members_;
};

/// Parses one JSON document (RFC 8259). Errors name the byte offset.
absl::StatusOr<Value> Parse(std::string_view text);

/// Writes `s` as a JSON string literal, quotes included.
std::string Quote(std::string_view s);

}  // namespace torchfuse::json

#endif  // TORCHFUSE_COMMON_JSON_H_
