// gcpressure/json.hpp — the one JSON string escaper: the library's stats,
// forward_loop's report and the PyTorch shim's stats all write strings
// through it, so that every JSON line the project prints escapes alike.
#pragma once

#include <string>
#include <string_view>

namespace gcpressure {

// `s` escaped for the inside of a JSON string: '"' and '\' get a backslash,
// control characters (< 0x20) become \u00XX; every other byte, UTF-8
// included, is kept as it is. Thread-safe; allocates (not finalizer-safe).
std::string json_escape(std::string_view s);

// `s` as a JSON string literal: json_escape(s) between double quotes.
// Thread-safe; allocates (not finalizer-safe).
std::string json_quote(std::string_view s);

}  // namespace gcpressure
