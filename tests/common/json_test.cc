#include "common/json.h"

#include <cmath>

#include <gtest/gtest.h>

namespace torchfuse::json {
namespace {

TEST(JsonTest, ParsesEveryKind) {
  auto v = Parse(R"( {"a": [1, -2, 3.5, 1e3, true, false, null], "b": {"c": "x\"y\u00e9\n"}} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  const Value* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 7u);
  EXPECT_TRUE(a->items()[0].is_int());
  EXPECT_EQ(a->items()[0].as_int(), 1);
  EXPECT_EQ(a->items()[1].as_int(), -2);
  EXPECT_EQ(a->items()[2].kind(), Value::Kind::kDouble);
  EXPECT_DOUBLE_EQ(a->items()[2].as_double(), 3.5);
  EXPECT_DOUBLE_EQ(a->items()[3].as_double(), 1000.0);
  EXPECT_TRUE(a->items()[4].as_bool());
  EXPECT_FALSE(a->items()[5].as_bool());
  EXPECT_TRUE(a->items()[6].is_null());
  EXPECT_EQ(v->Find("b")->Find("c")->as_string(), "x\"y\xc3\xa9\n");
  EXPECT_EQ(v->Find("missing"), nullptr);
}

TEST(JsonTest, KeepsLargeIntegersExact) {
  auto v = Parse("[9007199254740993, -9223372036854775807]");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->items()[0].as_int(), 9007199254740993LL);
  EXPECT_EQ(v->items()[1].as_int(), -9223372036854775807LL);
}

TEST(JsonTest, ReadsPythonNonFiniteFloats) {
  auto v = Parse("[NaN, Infinity, -Infinity]");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(std::isnan(v->items()[0].as_double()));
  EXPECT_EQ(v->items()[1].as_double(), HUGE_VAL);
  EXPECT_EQ(v->items()[2].as_double(), -HUGE_VAL);
}

TEST(JsonTest, RejectsMalformedDocumentsWithTheOffset) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "\"abc", "[1] x", "01x", "-", "{1:2}",
                          "\"\\q\"", "[1.]", "tru"}) {
    auto v = Parse(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(std::string(v.status().message()).find("at byte"), std::string::npos) << bad;
  }
}

TEST(JsonTest, QuoteRoundTrips) {
  const std::string s = "a\"b\\c\nd\te\x01";
  auto v = Parse(Quote(s));
  ASSERT_TRUE(v.ok()) << Quote(s);
  EXPECT_EQ(v->as_string(), s);
}

}  // namespace
}  // namespace torchfuse::json
