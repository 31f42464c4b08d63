// tests/test_options_everywhere.cpp — one behaviour per input, everywhere:
// each bad value of tests/bad_options.txt is fed to every entry point of
// this build that takes its option (the GCPRESSURE_* variable through
// gcpressure_create, gcpressure_options_set, forward_loop's flag and its
// variable) and must get the same error after the entry point's own name
// for the option. Also the soft-above-hard rule and the no-GPU message,
// which every entry point words alike.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gcpressure/gcpressure.h"

namespace {

struct bad_row {
  std::string option, value;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<bad_row> bad_rows() {
  std::ifstream in(GCPRESSURE_BAD_OPTIONS);
  EXPECT_TRUE(in) << "cannot read " << GCPRESSURE_BAD_OPTIONS;
  std::vector<bad_row> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto bar = line.find(" | ");
    EXPECT_NE(bar, std::string::npos) << line;
    if (bar != std::string::npos) rows.push_back({trim(line.substr(0, bar)), line.substr(bar + 3)});
  }
  return rows;
}

std::string env_name(const std::string& option) {
  std::string v = "GCPRESSURE_";
  for (char c : option) v += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v;
}

// forward_loop's flags that are options of the table.
const std::set<std::string> k_flag_options = {"hard_limit", "soft_limit",    "backend", "policy",  "gc_budget",
                                              "every_n",    "host_capacity", "device",  "devices"};

std::string flag_name(const std::string& option) {
  std::string f = "--" + option;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

// "... invalid value for WHAT: 'VALUE' (REASON)": WHAT must be `what`; the
// rest is returned (what every entry point must share).
std::string reason_after(const std::string& msg, const std::string& what) {
  const std::string key = "gcpressure: invalid value for " + what + ": ";
  const auto at = msg.find(key);
  if (at == std::string::npos) return "<no '" + key + "' in: " + msg.substr(0, msg.find('\n')) + ">";
  std::string rest = msg.substr(at + key.size());
  if (const auto nl = rest.find('\n'); nl != std::string::npos) rest.resize(nl);
  return rest;
}

// Everything forward_loop writes to stderr; exit status into *rc.
std::string run_forward_loop(const std::string& args, int* rc) {
  const std::string cmd = std::string(GCPRESSURE_FORWARD_LOOP) + " " + args + " --iters 1 --quiet 2>&1 >/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "<popen failed>";
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int st = ::pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::string quoted(const std::string& v) { return "'" + v + "'"; }

// A host allocator created through the C API with `name`=`value` set by
// gcpressure_options_set (empty name: nothing set); the message, or "".
std::string create_message(const std::vector<std::pair<std::string, std::string>>& set) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  for (const auto& [name, value] : set)
    if (gcpressure_options_set(&o, name.c_str(), value.c_str()) != GCPRESSURE_OK) return gcpressure_last_error();
  gcpressure_allocator* a = nullptr;
  if (gcpressure_create(&o, &a) != GCPRESSURE_OK) return gcpressure_last_error();
  gcpressure_destroy(a);
  return "";
}

class scoped_env {
 public:
  scoped_env(const std::string& name, const std::string& value) : name_(name) {
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~scoped_env() { ::unsetenv(name_.c_str()); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::string name_;
};

}  // namespace

TEST(OptionsEverywhere, TheTableCoversEveryOption) {
  std::set<std::string> covered;
  for (const auto& r : bad_rows()) covered.insert(r.option);
  for (const char* const* n = gcpressure_option_names(); *n; ++n)
    if (std::string(*n) != "host_shared") {  // any text is a path
      EXPECT_TRUE(covered.count(*n)) << *n << " has no bad value in bad_options.txt";
    }
}

TEST(OptionsEverywhere, EachBadValueGetsOneErrorAtEveryEntryPoint) {
  const auto rows = bad_rows();
  ASSERT_GE(rows.size(), 20u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.option + " = '" + r.value + "'");
    const std::string env = env_name(r.option);
    std::map<std::string, std::string> reasons;  // entry point -> text after its name

    gcpressure_options o;
    gcpressure_options_init(&o);
    const gcpressure_options before = o;
    EXPECT_EQ(gcpressure_options_set(&o, r.option.c_str(), r.value.c_str()), GCPRESSURE_ERR_INVALID);
    EXPECT_EQ(std::memcmp(&o, &before, sizeof o), 0) << "a rejected value changed the options";
    reasons["gcpressure_options_set"] = reason_after(gcpressure_last_error(), r.option);
    {
      scoped_env e(env, r.value);
      reasons["C API, " + env] = reason_after(create_message({}), env);
      int rc = 0;
      const std::string err = run_forward_loop("", &rc);
      EXPECT_EQ(rc, 2) << err;
      reasons["forward_loop, " + env] = reason_after(err, env);
    }
    if (k_flag_options.count(r.option)) {
      int rc = 0;
      const std::string err = run_forward_loop(flag_name(r.option) + " " + quoted(r.value), &rc);
      EXPECT_EQ(rc, 2) << err;
      reasons["forward_loop " + flag_name(r.option)] = reason_after(err, flag_name(r.option));
    }
    const std::string expected = reasons["gcpressure_options_set"];
    EXPECT_EQ(expected.rfind(quoted(r.value) + " (", 0), 0u) << "the value is not quoted first: " << expected;
    for (const auto& [where, reason] : reasons) EXPECT_EQ(reason, expected) << where;
  }
}

TEST(OptionsEverywhere, GoodValuesAreAcceptedAlike) {
  // The forms the issue found read differently at different entry points.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"hard_limit", "64 MB"}, {"backend", "cuda_sync"}, {"backend", "cuda-async"}, {"verbose", "on"}}) {
    SCOPED_TRACE(name + " = " + value);
    gcpressure_options o;
    gcpressure_options_init(&o);
    EXPECT_EQ(gcpressure_options_set(&o, name.c_str(), value.c_str()), GCPRESSURE_OK) << gcpressure_last_error();
  }
  std::size_t a = 0, b = 0;
  ASSERT_EQ(gcpressure_parse_size("64 MB", 0, &a), GCPRESSURE_OK);
  ASSERT_EQ(gcpressure_parse_size("64MiB", 0, &b), GCPRESSURE_OK);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, std::size_t{64} << 20);
  int rc = 0;
  const std::string err = run_forward_loop("--backend host --hard-limit '64 MB'", &rc);
  EXPECT_EQ(rc, 0) << err;
  {
    scoped_env e("GCPRESSURE_BACKEND", "cuda_sync");
    gcpressure_options o;
    gcpressure_options_init(&o);
    const std::string msg = create_message({});
    EXPECT_EQ(msg.find("invalid value"), std::string::npos) << "GCPRESSURE_BACKEND=cuda_sync refused: " << msg;
  }
}

TEST(OptionsEverywhere, SoftAboveHardIsRejectedWithOneMessage) {
  std::vector<std::pair<std::string, std::string>> got;  // entry point -> message
  got.emplace_back("gcpressure_options_set",
                   create_message({{"backend", "host"}, {"soft_limit", "512MiB"}, {"hard_limit", "256MiB"}}));
  {
    scoped_env s("GCPRESSURE_SOFT_LIMIT", "512MiB"), h("GCPRESSURE_HARD_LIMIT", "256MiB"), b("GCPRESSURE_BACKEND", "host");
    got.emplace_back("C API, GCPRESSURE_*", create_message({}));
    int rc = 0;
    got.emplace_back("forward_loop, GCPRESSURE_*", run_forward_loop("", &rc));
    EXPECT_NE(rc, 0);
  }
  int rc = 0;
  got.emplace_back("forward_loop flags", run_forward_loop("--backend host --soft-limit 512MiB --hard-limit 256MiB", &rc));
  EXPECT_NE(rc, 0);
  got.emplace_back("forward_loop default hard limit (256MiB on host)", run_forward_loop("--backend host --soft-limit 512MiB", &rc));
  EXPECT_NE(rc, 0);
  const std::regex one("gcpressure: soft limit above hard limit \\(soft 512\\.00 MiB, hard 256\\.00 MiB\\); lower the "
                       "soft limit or raise the hard one");
  for (const auto& [where, msg] : got) {
    EXPECT_TRUE(std::regex_search(msg, one)) << where << ": " << msg;
    EXPECT_EQ(msg.find("gcpressure_create"), std::string::npos) << where << " names an internal: " << msg;
  }
}

TEST(OptionsEverywhere, CudaWithoutAUsableDeviceSaysWhatToDo) {
  gcpressure_options o;
  gcpressure_options_init(&o);
  ASSERT_EQ(gcpressure_options_set(&o, "backend", "cuda"), GCPRESSURE_OK);
  gcpressure_allocator* a = nullptr;
  const gcpressure_status st = gcpressure_create(&o, &a);
  if (st == GCPRESSURE_OK) {
    gcpressure_destroy(a);
    GTEST_SKIP() << "a CUDA device is usable here";
  }
  EXPECT_EQ(st, GCPRESSURE_ERR_UNSUPPORTED);
  const std::regex c_msg("^gcpressure: no usable CUDA device \\(.+\\); use backend host or auto$");
  EXPECT_TRUE(std::regex_search(gcpressure_last_error(), c_msg)) << gcpressure_last_error();
  int rc = 0;
  const std::string err = run_forward_loop("--backend cuda", &rc);
  EXPECT_NE(rc, 0);
  const std::regex cli_msg("no usable CUDA device \\(.+\\); use --backend host or auto");
  EXPECT_TRUE(std::regex_search(err, cli_msg)) << err;
  EXPECT_EQ(err.find("cudaSetDevice"), std::string::npos) << err;
}

namespace {

// The device ordinals of a forward_loop JSON result, in order.
std::vector<int> json_devices(const std::string& j) {
  std::vector<int> out;
  const std::regex dev("\\{\"device\":([0-9]+),");
  for (auto it = std::sregex_iterator(j.begin(), j.end(), dev); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

// forward_loop's last stdout line with --json (its JSON result).
std::string forward_loop_json(const std::string& args) {
  const std::string cmd =
      std::string(GCPRESSURE_FORWARD_LOOP) + " --backend host --iters 2 --quiet --json " + args + " 2>/dev/null";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "<popen failed>";
  std::string last;
  char buf[8192];
  while (std::fgets(buf, sizeof buf, p)) last = buf;
  ::pclose(p);
  return last;
}

}  // namespace

// forward_loop validated GCPRESSURE_POOL and GCPRESSURE_DEVICE(S), then
// ignored them; now they apply (and --devices wins, as flags do).
TEST(OptionsEverywhere, ForwardLoopAppliesTheDeviceAndPoolVariables) {
  {
    scoped_env e("GCPRESSURE_DEVICES", "0,1");
    EXPECT_NE(forward_loop_json("").find("\"device_count\":2"), std::string::npos) << forward_loop_json("");
    EXPECT_NE(forward_loop_json("--devices 1").find("\"device_count\":1"), std::string::npos) << "--devices wins";
  }
  {
    scoped_env e("GCPRESSURE_DEVICE", "3");
    const std::string j = forward_loop_json("");
    EXPECT_NE(j.find("\"devices\":[{\"device\":3,"), std::string::npos) << j;
  }
  {
    scoped_env e("GCPRESSURE_DEVICES", "0,1");  // the flags win over it
    const std::string j = forward_loop_json("--device 3");
    EXPECT_NE(j.find("\"device_count\":1"), std::string::npos) << j;
    EXPECT_NE(j.find("\"devices\":[{\"device\":3,"), std::string::npos) << j;
  }
  const std::regex peaks("\"peak_live_bytes\":([0-9]+),\"peak_reserved_bytes\":([0-9]+)");
  std::smatch with_pool, without;
  const std::string pooled = forward_loop_json("");
  std::string unpooled;
  {
    scoped_env e("GCPRESSURE_POOL", "0");
    unpooled = forward_loop_json("");
  }
  ASSERT_TRUE(std::regex_search(pooled, with_pool, peaks)) << pooled;
  ASSERT_TRUE(std::regex_search(unpooled, without, peaks)) << unpooled;
  // Without the pool nothing is cached or rounded up to a segment: reserved is live.
  EXPECT_EQ(without[1], without[2]) << unpooled;
  EXPECT_NE(with_pool[1], with_pool[2]) << "with the pool, segments reserve more than the live bytes: " << pooled;
}

// --devices is a count (flags are contracts) and, with a comma, the table's
// list of ordinals, as GCPRESSURE_DEVICES reads it (Note [--devices: a count
// or a list], bench/forward/cli.cpp).
TEST(OptionsEverywhere, ForwardLoopDevicesTakesACountOrAList) {
  EXPECT_EQ(json_devices(forward_loop_json("--devices 2")), (std::vector<int>{0, 1}));
  EXPECT_EQ(json_devices(forward_loop_json("--devices 1,3")), (std::vector<int>{1, 3}));
  EXPECT_EQ(json_devices(forward_loop_json("--devices=2,0")), (std::vector<int>{2, 0}));
  {
    scoped_env e("GCPRESSURE_DEVICES", "1,3");
    EXPECT_EQ(json_devices(forward_loop_json("")), (std::vector<int>{1, 3}));
    EXPECT_EQ(json_devices(forward_loop_json("--devices 0,2")), (std::vector<int>{0, 2})) << "the flag wins";
  }
  int rc = 0;
  const std::string err = run_forward_loop("--devices 1,x", &rc);
  EXPECT_EQ(rc, 2) << err;
  EXPECT_NE(err.find("invalid value for --devices: '1,x' (expected device ordinals in [0, 1023]"), std::string::npos)
      << err;
}
