// tests/test_shared_helpers.cpp — the helpers that keep one fact in one place
// (issue #13): the policy names (policy_names() and what derives from it:
// the options table, config errors, CMake's GCPRESSURE_POLICY_NAMES), the
// JSON escaper (gcpressure/json.hpp) and the exception classification of
// the C entry points (Note [Errors at a C boundary]).
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/json.hpp"
#include "gcpressure/policy.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::contains;
using gcp_test::env_guard;
using gcp_test::json_check;

// --- policy names -------------------------------------------------------------

// The GCPRESSURE_POLICY row and the error for a bad policy name list every
// name of policy_names() (Note [The policy row names policy_names()]).
TEST(PolicyNames, OptionsTableRowAndErrorListThem) {
  std::string row;
  for (const option_info* t = options_table(); t->env; ++t)
    if (std::string(t->env) == "GCPRESSURE_POLICY") row = t->meaning;
  env_guard env;
  env.set("GCPRESSURE_POLICY", "nope");
  std::string err;
  try {
    (void)config_from_env();
  } catch (const gcpressure::logic_error& e) {
    err = e.what();
  }
  ASSERT_FALSE(err.empty()) << "a bad policy name was accepted";
  int names = 0;
  for (const char* const* n = policy_names(); *n; ++n, ++names) {
    EXPECT_TRUE(contains(row, *n)) << *n << " missing from: " << row;
    EXPECT_TRUE(contains(err, *n)) << *n << " missing from: " << err;
  }
  EXPECT_GE(names, 2);
  EXPECT_TRUE(contains(err, "'nope'")) << err;
}


TEST(PolicyNames, HelpersFollowTheList) {
  std::string semicolons;
  for (const char* const* n = policy_names(); *n; ++n) {
    EXPECT_TRUE(is_policy_name(*n)) << *n;
    semicolons += (semicolons.empty() ? "" : ";") + std::string(*n);
  }
  EXPECT_EQ(policy_names_text(";"), semicolons);
  EXPECT_FALSE(is_policy_name(""));
  EXPECT_FALSE(is_policy_name("Pressure"));
  EXPECT_FALSE(is_policy_name("pressure "));
  const std::string text = policy_names_text(", ", " or ");
  EXPECT_EQ(text.find(';'), std::string::npos);
  EXPECT_EQ(text.rfind(" or "), text.rfind(" or runtime_native")) << text;
}

// CMake's GCPRESSURE_POLICY_NAMES (the top CMakeLists.txt; examples/ makes
// one test per name from it) is the same list as policy_names().
TEST(PolicyNames, CMakeListIsPolicyNames) {
#ifndef GCPRESSURE_CMAKE_POLICY_NAMES
  GTEST_SKIP() << "built without the CMake list";
#else
  EXPECT_EQ(std::string(GCPRESSURE_CMAKE_POLICY_NAMES), policy_names_text(","))
      << "GCPRESSURE_POLICY_NAMES in CMakeLists.txt differs from gcpressure::policy_names()";
#endif
}


// --- JSON ---------------------------------------------------------------------

// gcpressure/json.hpp: the escaper every JSON writer uses.
TEST(Json, EscapeQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_escape("plain"), "plain");
  EXPECT_EQ(json_escape(""), "");
  EXPECT_EQ(json_escape("a\"b\\c"), "a\\\"b\\\\c");
  EXPECT_EQ(json_escape("x\ny\t\x01"), "x\\u000ay\\u0009\\u0001");
  EXPECT_EQ(json_escape(std::string_view("nul\0!", 5)), "nul\\u0000!");
  EXPECT_EQ(json_escape("\xc3\xa9 \x7f /"), "\xc3\xa9 \x7f /");  // UTF-8, DEL and '/' kept
  EXPECT_EQ(json_quote("say \"hi\""), "\"say \\\"hi\\\"\"");
  json_check chk("{\"k\":" + json_quote("we\"ird\\name\nline\x1f") + "}");
  EXPECT_TRUE(chk.valid()) << chk.error();
}

// --- exceptions at a C boundary -----------------------------------------------

namespace {

template <class E>
detail::caught_error classified(E e) {
  return detail::call_at_c_boundary([&]() -> detail::caught_error { throw e; },
                                    [](detail::caught_error c) { return c; });
}

}  // namespace

TEST(CBoundary, ClassifiesEachExceptionTypeWithItsMessage) {
  auto c = classified(out_of_memory("device full"));
  EXPECT_EQ(c.kind, detail::error_class::out_of_memory);
  EXPECT_EQ(c.message, "device full");
  c = classified(cuda_error("cudaMalloc failed"));
  EXPECT_EQ(c.kind, detail::error_class::cuda);
  EXPECT_EQ(c.message, "cudaMalloc failed");
  c = classified(gcpressure::logic_error("bad option"));
  EXPECT_EQ(c.kind, detail::error_class::invalid);
  EXPECT_EQ(c.message, "bad option");
  c = classified(std::bad_alloc());
  EXPECT_EQ(c.kind, detail::error_class::out_of_memory);
  EXPECT_EQ(c.message, "gcpressure: out of host memory");
  c = classified(std::runtime_error("boom"));
  EXPECT_EQ(c.kind, detail::error_class::internal);
  EXPECT_EQ(c.message, "boom");
  c = classified(42);
  EXPECT_EQ(c.kind, detail::error_class::internal);
  EXPECT_EQ(c.message, "gcpressure: unknown exception");
}

TEST(CBoundary, PassesTheResultThroughWhenNothingThrows) {
  int errors = 0;
  const int r = detail::call_at_c_boundary([] { return 7; }, [&](const detail::caught_error&) { return ++errors, -1; });
  EXPECT_EQ(r, 7);
  EXPECT_EQ(errors, 0);
  const int f = detail::call_at_c_boundary([]() -> int { GCPRESSURE_FAIL("named"); },
                                           [&](const detail::caught_error& e) {
                                             ++errors;
                                             EXPECT_TRUE(contains(e.message, "named")) << e.message;
                                             return -1;
                                           });
  EXPECT_EQ(f, -1);
  EXPECT_EQ(errors, 1);
}
