// config_detail.hpp — what config.cpp and config_parse.cpp share: the one
// error format of a bad value, and the text helpers of the parsers.
#pragma once

#include <string>
#include <string_view>

namespace gcpressure::detail {

// Note [One error per bad value]
// A configuration error is the user's input, not a bug: the message names the
// option as the entry point spells it (`what`: GCPRESSURE_HARD_LIMIT,
// --hard-limit, hard_limit), the value, and why; no source location, no
// function name. Everything after `what` is the same at every entry point,
// which tests/bad_options.txt checks (tests/test_options_everywhere.cpp).
[[noreturn]] void bad_value(std::string_view what, std::string_view text, std::string_view why);

std::string trim(std::string_view s);
bool iequals(std::string_view a, std::string_view b);

}  // namespace gcpressure::detail
