// tests/test_config.cpp — size parsing, the GCPRESSURE_* environment, the
// environment as the default layer under explicit options, unknown
// GCPRESSURE_* variables, source locations in messages. The options table and
// set_option are tests/test_options_table.cpp.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/types.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::contains;
using gcp_test::env_guard;

namespace {

constexpr std::size_t TiB = std::size_t{1} << 40;

std::size_t bytes_of(const char* text) {
  const size_spec s = parse_size(text, "TEST_VALUE");
  EXPECT_LT(s.percent, 0) << text << " must parse as bytes, not a percentage";
  return s.bytes;
}

// parse_size must throw gcpressure::logic_error whose message names both the
// variable and the offending value.
void expect_bad_size(const std::string& text) {
  SCOPED_TRACE("value '" + text + "'");
  try {
    const size_spec s = parse_size(text, "GCPRESSURE_SOFT_LIMIT");
    ADD_FAILURE() << "accepted: bytes=" << s.bytes << " percent=" << s.percent;
  } catch (const gcpressure::logic_error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "GCPRESSURE_SOFT_LIMIT")) << "message does not name the variable: " << msg;
    if (!text.empty()) {
      EXPECT_TRUE(contains(msg, text)) << "message does not name the value: " << msg;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type " << typeid(e).name() << ": " << e.what();
  }
}

}  // namespace

// --- parse_size: accepted forms ---------------------------------------------

TEST(ParseSize, PlainBytes) {
  EXPECT_EQ(bytes_of("1"), 1u);
  EXPECT_EQ(bytes_of("1048576"), 1048576u);
  EXPECT_EQ(bytes_of("123456789012"), std::size_t{123456789012});
}

TEST(ParseSize, BinarySuffixesAllSpellings) {
  EXPECT_EQ(bytes_of("1K"), KiB);
  EXPECT_EQ(bytes_of("1KB"), KiB);
  EXPECT_EQ(bytes_of("1KiB"), KiB);
  EXPECT_EQ(bytes_of("3K"), 3 * KiB);
  EXPECT_EQ(bytes_of("512MiB"), 512 * MiB);
  EXPECT_EQ(bytes_of("512MB"), 512 * MiB);
  EXPECT_EQ(bytes_of("512M"), 512 * MiB);
  EXPECT_EQ(bytes_of("4GiB"), 4 * GiB);
  EXPECT_EQ(bytes_of("4GB"), 4 * GiB);
  EXPECT_EQ(bytes_of("4G"), 4 * GiB);
  EXPECT_EQ(bytes_of("2T"), 2 * TiB);
  EXPECT_EQ(bytes_of("2TB"), 2 * TiB);
  EXPECT_EQ(bytes_of("2TiB"), 2 * TiB);
  // All suffixes are binary: 4G == 4GiB.
  EXPECT_EQ(bytes_of("4G"), bytes_of("4GiB"));
  EXPECT_EQ(bytes_of("4G"), bytes_of("4096M"));
}

TEST(ParseSize, Percent) {
  const size_spec s = parse_size("80%", "GCPRESSURE_HARD_LIMIT");
  EXPECT_DOUBLE_EQ(s.percent, 80.0);
  EXPECT_TRUE(s.is_set());
  EXPECT_DOUBLE_EQ(parse_size("100%").percent, 100.0);
  EXPECT_DOUBLE_EQ(parse_size("1%").percent, 1.0);
}

TEST(ParseSize, IsSetReflectsValue) {
  EXPECT_FALSE(size_spec{}.is_set());
  EXPECT_TRUE(parse_size("1").is_set());
  EXPECT_TRUE(parse_size("4G").is_set());
}

// --- parse_size: rejected forms ---------------------------------------------

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"abc", "", "G", "GiB", "%", "12XB", "5MiBs", "4GiBx", "0x10", "1 2", "80%%", "K1"})
    expect_bad_size(bad);
}

TEST(ParseSize, RejectsNegative) {
  expect_bad_size("-1");
  expect_bad_size("-4G");
  expect_bad_size("-5%");
}

TEST(ParseSize, RejectsPercentAbove100) {
  expect_bad_size("150%");
  expect_bad_size("100.5%");
}

TEST(ParseSize, RejectsOverflow) {
  expect_bad_size("99999999999TiB");           // ~1.1e23 bytes
  expect_bad_size("18446744073709551616");      // 2^64
  expect_bad_size("999999999999999999999999");  // far past 2^64
  expect_bad_size("17179869184G");              // 2^34 GiB == 2^64 bytes
}

TEST(ParseSize, ErrorNamesDefaultWhat) {
  // The default `what` is "size"; the value must still be named.
  try {
    (void)parse_size("zz9");
    ADD_FAILURE() << "accepted zz9";
  } catch (const gcpressure::logic_error& e) {
    EXPECT_TRUE(contains(e.what(), "zz9")) << e.what();
  }
}

// --- size_spec::resolve ------------------------------------------------------

TEST(SizeSpec, ResolveBytesIgnoresTotal) {
  size_spec s;
  s.bytes = 12345;
  EXPECT_EQ(s.resolve(1000), 12345u);
  EXPECT_EQ(s.resolve(16 * GiB), 12345u);
}

TEST(SizeSpec, ResolvePercentOfTotal) {
  EXPECT_EQ(parse_size("50%").resolve(1000), 500u);
  EXPECT_EQ(parse_size("80%").resolve(1000), 800u);
  EXPECT_EQ(parse_size("25%").resolve(GiB), GiB / 4);
  EXPECT_EQ(parse_size("100%").resolve(16 * GiB), 16 * GiB);
  // Percent is applied to the device total, not clamped to anything else.
  const std::size_t r = parse_size("80%").resolve(16 * GiB);
  EXPECT_NEAR(static_cast<double>(r), 0.8 * static_cast<double>(16 * GiB), 1.0);
}

TEST(SizeSpec, ResolveUnsetIsZero) {
  EXPECT_EQ(size_spec{}.resolve(16 * GiB), 0u);
}

TEST(SizeSpec, ToStringShowsValue) {
  EXPECT_TRUE(contains(parse_size("80%").to_string(), "80")) << parse_size("80%").to_string();
  EXPECT_TRUE(contains(parse_size("80%").to_string(), "%")) << parse_size("80%").to_string();
  EXPECT_FALSE(parse_size("512MiB").to_string().empty());
  EXPECT_FALSE(contains(parse_size("512MiB").to_string(), "%"));
}

TEST(FormatBytes, HumanReadable) {
  EXPECT_EQ(format_bytes(std::size_t{3} << 29), "1.50 GiB");  // the example in config.hpp
  EXPECT_TRUE(contains(format_bytes(512), "512")) << format_bytes(512);
  EXPECT_TRUE(contains(format_bytes(4 * GiB), "GiB")) << format_bytes(4 * GiB);
  EXPECT_TRUE(contains(format_bytes(2 * MiB), "MiB")) << format_bytes(2 * MiB);
}

TEST(Types, BackendNames) {
  EXPECT_STREQ(to_string(backend_kind::host), "host");
  EXPECT_STREQ(to_string(backend_kind::cuda), "cuda");
  EXPECT_STREQ(to_string(backend_kind::cuda_async), "cuda_async");
}

// --- config_from_env --------------------------------------------------------

namespace {
// Every variable, to a value that is not its default.
void set_every_variable(env_guard& env) {
  env.set("GCPRESSURE_SOFT_LIMIT", "512MiB");
  env.set("GCPRESSURE_HARD_LIMIT", "80%");
  env.set("GCPRESSURE_BACKEND", "host");
  env.set("GCPRESSURE_POLICY", "every_iteration");
  env.set("GCPRESSURE_GC_BUDGET", "0.1");
  env.set("GCPRESSURE_DEVICE", "1");
  env.set("GCPRESSURE_HOST_CAPACITY", "1GiB");
  env.set("GCPRESSURE_POOL", "0");
  env.set("GCPRESSURE_ASYNC_RELEASE_THRESHOLD", "64MiB");
  env.set("GCPRESSURE_EVERY_N", "4");
  env.set("GCPRESSURE_VERBOSE", "1");
}

void expect_built_in_defaults(const config& d) {
  const config ref{};
  EXPECT_EQ(d.backend, ref.backend);
  EXPECT_EQ(d.device, ref.device);
  EXPECT_EQ(d.host_capacity, ref.host_capacity);
  EXPECT_FALSE(d.soft_limit.is_set());
  EXPECT_FALSE(d.hard_limit.is_set());
  EXPECT_EQ(d.pool, ref.pool);
  EXPECT_EQ(d.async_release_threshold, ref.async_release_threshold);
  EXPECT_EQ(d.policy, ref.policy);
  EXPECT_DOUBLE_EQ(d.gc_budget, ref.gc_budget);
  EXPECT_EQ(d.every_n, ref.every_n);
  EXPECT_EQ(d.verbose, ref.verbose);
}
}  // namespace

TEST(ConfigFromEnv, NoVariablesGivesBase) {
  env_guard env;
  expect_built_in_defaults(config_from_env());

  config base;
  base.policy = "custom_policy";
  base.host_capacity = 123 * MiB;
  base.gc_budget = 0.25;
  const config b = config_from_env(base);
  EXPECT_EQ(b.policy, "custom_policy");
  EXPECT_EQ(b.host_capacity, 123 * MiB);
  EXPECT_DOUBLE_EQ(b.gc_budget, 0.25);
}

TEST(ConfigFromEnv, ReadsEveryVariable) {
  env_guard env;
  set_every_variable(env);

  const config c = config_from_env();
  EXPECT_EQ(c.soft_limit.bytes, 512 * MiB);
  EXPECT_LT(c.soft_limit.percent, 0);
  EXPECT_DOUBLE_EQ(c.hard_limit.percent, 80.0);
  EXPECT_EQ(c.backend, backend_choice::host);
  EXPECT_EQ(c.policy, "every_iteration");
  EXPECT_DOUBLE_EQ(c.gc_budget, 0.1);
  EXPECT_EQ(c.device, 1);
  EXPECT_EQ(c.host_capacity, GiB);
  EXPECT_FALSE(c.pool);
  EXPECT_EQ(c.async_release_threshold, 64 * MiB);
  EXPECT_EQ(c.every_n, 4);
  EXPECT_TRUE(c.verbose);
}

TEST(ConfigFromEnv, EnvOverridesBase) {
  env_guard env;
  config base;
  base.policy = "from_base";
  base.pool = false;
  env.set("GCPRESSURE_POLICY", "pressure");
  env.set("GCPRESSURE_POOL", "1");
  const config c = config_from_env(base);
  EXPECT_EQ(c.policy, "pressure");
  EXPECT_TRUE(c.pool);
}

TEST(ConfigFromEnv, BackendChoices) {
  env_guard env;
  const std::pair<const char*, backend_choice> cases[] = {{"auto", backend_choice::automatic},
                                                          {"host", backend_choice::host},
                                                          {"cuda", backend_choice::cuda},
                                                          {"cuda_async", backend_choice::cuda_async}};
  for (const auto& [text, want] : cases) {
    env.set("GCPRESSURE_BACKEND", text);
    EXPECT_EQ(config_from_env().backend, want) << text;
  }
}

namespace {
void expect_bad_env(const char* var, const char* value) {
  SCOPED_TRACE(std::string(var) + "=" + value);
  env_guard env;
  env.set(var, value);
  try {
    (void)config_from_env();
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    EXPECT_TRUE(contains(e.what(), var)) << "does not name the variable: " << e.what();
    EXPECT_TRUE(contains(e.what(), value)) << "does not name the value: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type " << typeid(e).name() << ": " << e.what();
  }
}
}  // namespace

TEST(ConfigFromEnv, BadSizesNameVariableAndValue) {
  expect_bad_env("GCPRESSURE_SOFT_LIMIT", "abc");
  expect_bad_env("GCPRESSURE_HARD_LIMIT", "12XB");
  expect_bad_env("GCPRESSURE_HARD_LIMIT", "150%");
  expect_bad_env("GCPRESSURE_HARD_LIMIT", "-1");
  expect_bad_env("GCPRESSURE_SOFT_LIMIT", "99999999999TiB");
  expect_bad_env("GCPRESSURE_HOST_CAPACITY", "lots");
  expect_bad_env("GCPRESSURE_ASYNC_RELEASE_THRESHOLD", "1QB");
}

TEST(ConfigFromEnv, BadScalarsNameVariableAndValue) {
  expect_bad_env("GCPRESSURE_BACKEND", "gpu");
  expect_bad_env("GCPRESSURE_GC_BUDGET", "abc");
  expect_bad_env("GCPRESSURE_GC_BUDGET", "-0.5");
  expect_bad_env("GCPRESSURE_DEVICE", "first");
  expect_bad_env("GCPRESSURE_EVERY_N", "x");
  expect_bad_env("GCPRESSURE_POOL", "maybe");
  expect_bad_env("GCPRESSURE_VERBOSE", "loud");
}

// The environment is read at each call, not once: a variable set, changed or
// removed between two calls is what the next call sees (a cached first read
// would give every later allocator the first one's options). Also what the
// other ConfigFromEnv tests rely on: env_guard's restore reaches the library.
TEST(ConfigFromEnv, ReadsTheEnvironmentAtEachCall) {
  ::setenv("GCPRESSURE_POLICY", "at_limit", 1);
  EXPECT_EQ(config_from_env().policy, "at_limit");
  {
    env_guard env;
    EXPECT_EQ(config_from_env().policy, config{}.policy) << "GCPRESSURE_POLICY cleared, the default expected";
    env.set("GCPRESSURE_POLICY", "every_iteration");
    EXPECT_EQ(config_from_env().policy, "every_iteration");
  }
  EXPECT_EQ(config_from_env().policy, "at_limit") << "the value restored by env_guard";
  ::unsetenv("GCPRESSURE_POLICY");
  EXPECT_EQ(config_from_env().policy, config{}.policy);
}

// --- the environment is the default layer ------------------------------------------

TEST(ResolveConfig, NothingSetGivesBuiltInDefaults) {
  env_guard env;
  expect_built_in_defaults(resolve_config());
}

TEST(ResolveConfig, UnsetFieldsComeFromTheEnvironment) {
  env_guard env;
  env.set("GCPRESSURE_HARD_LIMIT", "3GiB");
  env.set("GCPRESSURE_POLICY", "at_limit");
  env.set("GCPRESSURE_BACKEND", "host");
  options o;
  o.gc_budget = 0.2;  // set explicitly; the rest left unset
  const config c = resolve_config(o);
  EXPECT_EQ(c.hard_limit.bytes, 3 * GiB);
  EXPECT_EQ(c.policy, "at_limit");
  EXPECT_EQ(c.backend, backend_choice::host);
  EXPECT_DOUBLE_EQ(c.gc_budget, 0.2);
  EXPECT_EQ(c.every_n, config{}.every_n);
}

TEST(ResolveConfig, ExplicitOptionsOverrideTheEnvironment) {
  env_guard env;
  set_every_variable(env);
  options o;
  o.backend = backend_choice::automatic;
  o.device = 0;
  o.host_capacity = 512 * MiB;
  o.soft_limit = parse_size("50%");
  o.hard_limit = parse_size("256MiB");
  o.pool = true;
  o.async_release_threshold = 0;
  o.policy = "pressure";
  o.gc_budget = 0.05;
  o.every_n = 1;
  o.verbose = false;
  const config c = resolve_config(o);
  EXPECT_EQ(c.backend, backend_choice::automatic);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(c.host_capacity, 512 * MiB);
  EXPECT_DOUBLE_EQ(c.soft_limit.percent, 50.0);
  EXPECT_EQ(c.hard_limit.bytes, 256 * MiB);
  EXPECT_TRUE(c.pool);
  EXPECT_EQ(c.async_release_threshold, 0u);
  EXPECT_EQ(c.policy, "pressure");
  EXPECT_DOUBLE_EQ(c.gc_budget, 0.05);
  EXPECT_EQ(c.every_n, 1);
  EXPECT_FALSE(c.verbose);
}

TEST(ResolveConfig, BadEnvironmentFailsEvenWhenTheOptionIsSet) {
  // A bad value fails at start-up, naming the variable, whatever the program sets.
  env_guard env;
  env.set("GCPRESSURE_GC_BUDGET", "lots");
  options o;
  o.gc_budget = 0.1;
  EXPECT_THROW((void)resolve_config(o), gcpressure::logic_error);
}

namespace {
void expect_bad_option(const options& o, const char* field) {
  SCOPED_TRACE(field);
  try {
    (void)apply_options(o, config{});
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    EXPECT_TRUE(contains(e.what(), std::string("options.") + field)) << e.what();
  }
}
}  // namespace

TEST(ApplyOptions, BadExplicitValuesNameTheOption) {
  options o;
  o.device = -1;
  expect_bad_option(o, "device");
  o = {};
  o.host_capacity = 0;
  expect_bad_option(o, "host_capacity");
  o = {};
  o.policy = "presure";
  expect_bad_option(o, "policy");
  o = {};
  o.gc_budget = 0;
  expect_bad_option(o, "gc_budget");
  o = {};
  o.gc_budget = 1.5;
  expect_bad_option(o, "gc_budget");
  o = {};
  o.every_n = 0;
  expect_bad_option(o, "every_n");
  o = {};
  size_spec pct;
  pct.percent = 120;
  o.hard_limit = pct;
  expect_bad_option(o, "hard_limit");
}

TEST(ApplyOptions, UnsetOptionsKeepTheBase) {
  config base;
  base.policy = "dotnet";
  base.every_n = 9;
  const config c = apply_options(options{}, base);
  EXPECT_EQ(c.policy, "dotnet");
  EXPECT_EQ(c.every_n, 9);
}

// --- unknown GCPRESSURE_* variables ----------------------------------------------

namespace {
// Sets a variable the env_guard does not know about, and removes it after.
struct extra_env {
  std::string name;
  extra_env(std::string n, const char* v) : name(std::move(n)) { ::setenv(name.c_str(), v, 1); }
  ~extra_env() { ::unsetenv(name.c_str()); }
};
}  // namespace

TEST(UnknownEnv, ClosestOptionName) {
  EXPECT_EQ(detail::closest_option_name("GCPRESSURE_HARD_LIMT"), "GCPRESSURE_HARD_LIMIT");
  EXPECT_EQ(detail::closest_option_name("GCPRESSURE_POLCY"), "GCPRESSURE_POLICY");
  EXPECT_EQ(detail::closest_option_name("GCPRESSURE_GCBUDGET"), "GCPRESSURE_GC_BUDGET");
  EXPECT_EQ(detail::closest_option_name("GCPRESSURE_SOFTLIMIT"), "GCPRESSURE_SOFT_LIMIT");
  EXPECT_EQ(detail::closest_option_name("GCPRESSURE_ZZZZZZZZZZZZZZZZZ"), "");
}

TEST(UnknownEnv, MisspellingIsReportedWithTheClosestName) {
  env_guard env;
  extra_env typo("GCPRESSURE_HARD_LIMT", "1GiB");
  extra_env other("GCPRESSURE_QQQQQQQQQQQQQQQ", "1");
  extra_env tool("GCPRESSURE_TEST_SOMETHING", "1");
  extra_env torch("GCPRESSURE_TORCH_LIB", "/x.so");
  extra_env fuzz("GCPRESSURE_FUZZ_SECONDS", "5");
  const auto w = detail::unknown_env_warnings();
  std::string all;
  for (const auto& m : w) all += m + "\n";
  EXPECT_TRUE(contains(all, "GCPRESSURE_HARD_LIMT is not a gcpressure option")) << all;
  EXPECT_TRUE(contains(all, "did you mean GCPRESSURE_HARD_LIMIT?")) << all;
  EXPECT_TRUE(contains(all, "GCPRESSURE_QQQQQQQQQQQQQQQ is not a gcpressure option")) << all;
  EXPECT_FALSE(contains(all, "GCPRESSURE_TEST_SOMETHING")) << all;
  EXPECT_FALSE(contains(all, "GCPRESSURE_TORCH_LIB")) << all;
  EXPECT_FALSE(contains(all, "GCPRESSURE_FUZZ_SECONDS")) << all;
  for (const auto& var : gcp_test::gcpressure_env_vars()) EXPECT_FALSE(contains(all, var + " ")) << all;
}

TEST(UnknownEnv, WarnsOncePerNameOnStderr) {
  env_guard env;
  extra_env typo("GCPRESSURE_VERBOS", "1");  // a name no other test uses
  testing::internal::CaptureStderr();
  (void)config_from_env();
  (void)resolve_config();
  const std::string err = testing::internal::GetCapturedStderr();
  std::size_t n = 0;
  for (std::size_t at = err.find("GCPRESSURE_VERBOS "); at != std::string::npos;
       at = err.find("GCPRESSURE_VERBOS ", at + 1))
    ++n;
  EXPECT_EQ(n, 1u) << err;
  EXPECT_TRUE(contains(err, "gcpressure: warning: ")) << err;
  EXPECT_TRUE(contains(err, "did you mean GCPRESSURE_VERBOSE?")) << err;
}

// --- no absolute source paths in messages -------------------------------------------

TEST(ErrorMessages, ConfigurationErrorsCarryNoSourceLocation) {
  env_guard env;
  env.set("GCPRESSURE_POLICY", "nope");
  try {
    (void)config_from_env();
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    const std::string msg = e.what();
    EXPECT_FALSE(contains(msg, ".cpp")) << msg;
    EXPECT_FALSE(contains(msg, "/")) << msg;
  }
}

TEST(ErrorMessages, LibraryErrorsNameTheFileRelativeToTheTree) {
  try {
    GCPRESSURE_FAIL("test failure");
    ADD_FAILURE() << "did not throw";
  } catch (const gcpressure::logic_error& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "(tests/test_config.cpp:")) << msg;
    EXPECT_FALSE(contains(msg, "(/")) << msg;
  }
  EXPECT_EQ(detail::source_name("/somewhere/else/file.cpp"), "file.cpp");
  EXPECT_EQ(detail::source_name("relative/file.cpp"), "relative/file.cpp");
  EXPECT_EQ(detail::source_name(""), "");
}
