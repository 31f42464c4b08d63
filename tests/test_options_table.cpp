// tests/test_options_table.cpp — the options table (every variable, as the
// README documents it), allocator_options::from_config, the backend
// vocabulary, the one default for the simulated device, and set_option.
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/types.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::contains;
using gcp_test::env_guard;

// --- options table ------------------------------------------------------------

TEST(OptionsTable, ListsEveryVariable) {
  const option_info* t = options_table();
  ASSERT_NE(t, nullptr);
  std::set<std::string> names;
  int rows = 0;
  for (; t->env != nullptr; ++t) {
    ASSERT_LT(++rows, 1000) << "table not terminated by a nullptr env row";
    EXPECT_NE(t->default_value, nullptr) << t->env;
    ASSERT_NE(t->meaning, nullptr) << t->env;
    EXPECT_STRNE(t->meaning, "") << t->env;
    EXPECT_TRUE(names.insert(t->env).second) << "duplicate row " << t->env;
  }
  for (const auto& var : gcp_test::gcpressure_env_vars())
    EXPECT_TRUE(names.count(var)) << var << " missing from options_table()";
}

// The README's configuration table documents exactly this table: the same
// variables with the same defaults.
TEST(OptionsTable, MatchesTheReadme) {
  // CMake's absolute path (ccache's CCACHE_BASEDIR makes __FILE__ relative).
  std::ifstream readme(GCPRESSURE_README);
  ASSERT_TRUE(readme) << "cannot read " << GCPRESSURE_README;
  std::map<std::string, std::string> documented;  // variable -> default, backticks removed
  std::map<std::string, std::string> meanings;    // variable -> its meaning cell
  bool in_section = false;  // rows of the "## Configuration" section only
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Configuration";
    if (!in_section || line.rfind("| `GCPRESSURE_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      std::string clean;
      for (char ch : cell)
        if (ch != '`') clean += ch;
      const std::size_t b = clean.find_first_not_of(' '), e = clean.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : clean.substr(b, e - b + 1));
    }
    ASSERT_GE(cells.size(), 3u) << line;
    documented[cells[0]] = cells[1];
    meanings[cells[0]] = cells[2];
  }
  std::size_t rows = 0;
  for (const option_info* t = options_table(); t->env; ++t, ++rows) {
    ASSERT_TRUE(documented.count(t->env)) << t->env << " is missing from README.md's configuration table";
    EXPECT_EQ(documented[t->env], t->default_value) << t->env << ": README.md and options_table() disagree";
    // The names a user writes: every backend name and alias, every policy.
    if (t->kind == option_kind::backend) {
      for (const char* name : {"auto", "host", "cuda", "cuda_async", "cuda_sync", "cuda-async"}) {
        EXPECT_TRUE(contains(meanings[t->env], name)) << t->env << ": README.md does not name " << name;
      }
    }
  }
  for (const char* const* p = policy_names(); *p; ++p)
    EXPECT_TRUE(contains(meanings["GCPRESSURE_POLICY"], *p)) << "README.md's GCPRESSURE_POLICY row lacks " << *p;
  EXPECT_EQ(documented.size(), rows) << "README.md documents a variable options_table() does not have";
}

// --- allocator_options::from_config ------------------------------------------

TEST(AllocatorOptions, FromConfigCopiesFields) {
  config c;
  c.backend = backend_choice::host;
  c.device = 0;
  c.host_capacity = 256 * MiB;
  c.soft_limit = parse_size("64MiB");
  c.hard_limit = parse_size("50%");
  c.pool = false;
  c.async_release_threshold = 8 * MiB;
  const allocator_options o = allocator_options::from_config(c);
  EXPECT_EQ(o.backend, backend_kind::host);
  EXPECT_EQ(o.host_capacity, 256 * MiB);
  EXPECT_EQ(o.soft_limit.bytes, 64 * MiB);
  EXPECT_DOUBLE_EQ(o.hard_limit.percent, 50.0);
  EXPECT_FALSE(o.pool);
  EXPECT_EQ(o.async_release_threshold, 8 * MiB);
}

#ifndef GCPRESSURE_HAVE_CUDA
TEST(AllocatorOptions, AutoIsHostWithoutCuda) {
  config c;
  c.backend = backend_choice::automatic;
  EXPECT_EQ(allocator_options::from_config(c).backend, backend_kind::host);
}

TEST(AllocatorOptions, CudaBackendWithoutCudaIsLogicError) {
  allocator_options o;
  o.backend = backend_kind::cuda;
  EXPECT_THROW((void)make_resource(o), gcpressure::logic_error);
  o.backend = backend_kind::cuda_async;
  EXPECT_THROW((void)make_resource(o), gcpressure::logic_error);
}
#endif

// --- one vocabulary for backends ---------------------------------------------

TEST(Backend, ParseAndNameRoundTrip) {
  for (backend_choice b :
       {backend_choice::automatic, backend_choice::host, backend_choice::cuda, backend_choice::cuda_async})
    EXPECT_EQ(parse_backend(to_string(b)), b) << to_string(b);
  EXPECT_EQ(parse_backend(" CUDA_Async "), backend_choice::cuda_async);
  EXPECT_STREQ(to_string(backend_choice::automatic), "auto");
}

TEST(Backend, BadNameListsTheVocabulary) {
  try {
    (void)parse_backend("gpu", "--backend");
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    for (const char* word : {"--backend", "'gpu'", "auto", "host", "cuda (cudaMalloc; alias cuda_sync)", "cuda_async (cudaMallocAsync)"})
      EXPECT_TRUE(contains(e.what(), word)) << word << " missing: " << e.what();
  }
}

// --- one default for the simulated device -----------------------------------------

TEST(HostCapacity, OneDefaultEverywhere) {
  EXPECT_EQ(default_host_capacity, 16 * GiB);
  EXPECT_EQ(config{}.host_capacity, default_host_capacity);
  EXPECT_EQ(allocator_options{}.host_capacity, default_host_capacity);
  env_guard env;
  EXPECT_EQ(allocator_options::from_config(resolve_config()).host_capacity, default_host_capacity);
  bool documented = false;
  for (const option_info* t = options_table(); t->env; ++t)
    if (std::string(t->env) == "GCPRESSURE_HOST_CAPACITY") documented = parse_size(t->default_value).bytes == 16 * GiB;
  EXPECT_TRUE(documented) << "the options table documents another default";
}

// --- set_option: the one way text becomes an option ---------------------------------

TEST(SetOption, EveryRowParsesItsDefaultOrAGoodValue) {
  const std::map<std::string, std::string> good = {
      {"backend", "cuda_sync"}, {"device", "3"},          {"devices", "0, 1"},  {"host_capacity", "64 MB"},
      {"host_shared", "/tmp/x"}, {"soft_limit", "80%avail"}, {"hard_limit", "1GB"}, {"pool", "off"},
      {"async_release_threshold", "0"}, {"policy", "at_limit"}, {"gc_budget", "0.5"}, {"every_n", "7"},
      {"verbose", "yes"}};
  std::size_t rows = 0;
  for (const option_info* t = options_table(); t->env; ++t, ++rows) {
    SCOPED_TRACE(t->name);
    ASSERT_TRUE(good.count(t->name)) << "no good value for a new row";
    config c;
    EXPECT_NO_THROW(set_option(c, t->name, good.at(t->name)));
    EXPECT_EQ(find_option(t->env), t) << "the variable's name finds the row";
    EXPECT_EQ(find_option(t->name), t);
  }
  EXPECT_EQ(rows, good.size());
  config c;
  set_option(c, "hard_limit", "1GB");
  EXPECT_EQ(c.hard_limit.bytes, GiB) << "GB is binary, as everywhere";
  set_option(c, "backend", "cuda_sync");
  EXPECT_EQ(c.backend, backend_choice::cuda);
  set_option(c, "GCPRESSURE_BACKEND", "CUDA-ASYNC");
  EXPECT_EQ(c.backend, backend_choice::cuda_async);
  set_option(c, "async_release_threshold", "0");
  EXPECT_EQ(c.async_release_threshold, 0u);
  set_option(c, "pool", "off");
  EXPECT_FALSE(c.pool);
  options o;
  set_option(o, "every_n", "7");
  ASSERT_TRUE(o.every_n.has_value());
  EXPECT_EQ(*o.every_n, 7);
}

TEST(SetOption, UnknownNameListsTheNames) {
  config c;
  try {
    set_option(c, "hard_limt", "1GiB");
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    EXPECT_TRUE(contains(e.what(), "unknown option 'hard_limt'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "hard_limit")) << e.what();
  }
}

TEST(SetOption, JunkBooleanIsAnError) {
  config c;
  EXPECT_THROW(set_option(c, "verbose", "maybe"), gcpressure::logic_error);
  EXPECT_THROW(set_option(c, "pool", "2"), gcpressure::logic_error);
}

TEST(SetOption, ErrorsNameTheCallersSpellingAndNothingElse) {
  config c;
  try {
    set_option(c, "gc_budget", "2", "--gc-budget");
    ADD_FAILURE() << "accepted";
  } catch (const gcpressure::logic_error& e) {
    EXPECT_STREQ(e.what(), "gcpressure: invalid value for --gc-budget: '2' (expected a number in (0, 1])");
  }
}
