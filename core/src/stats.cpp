// Statistics as people and programs read them: the names of ladder steps,
// collection kinds and reasons, to_text and to_json of allocator_stats (the
// JSON keys are a contract: add, never rename).
#include "gcpressure/stats.hpp"

#include <cstdio>
#include <iterator>
#include <sstream>

#include "gcpressure/config.hpp"
#include "gcpressure/json.hpp"

namespace gcpressure {

namespace {

// Names by enumerator value: these enums count from 0 without gaps and each
// has a *_count, which the static_asserts hold the tables to.
template <class E, std::size_t N>
const char* name_of(E v, const char* const (&names)[N]) noexcept {
  const auto i = static_cast<std::size_t>(v);
  return i < N ? names[i] : "?";
}

constexpr const char* k_ladder_step_names[] = {"release_cache",     "finish_and_drain", "wait_streams", "full_collection",
                                               "full_collection_2", "drain",            "trim"};
constexpr const char* k_gc_kind_names[] = {"minor", "incremental_full", "blocking_full"};
constexpr const char* k_gc_reason_names[] = {"early", "quiet_moment", "ladder", "user", "baseline"};
static_assert(std::size(k_ladder_step_names) == ladder_step_count);
static_assert(std::size(k_gc_kind_names) == gc_kind_count);
static_assert(std::size(k_gc_reason_names) == gc_reason_count);

}  // namespace

const char* to_string(ladder_step s) noexcept { return name_of(s, k_ladder_step_names); }
const char* to_string(gc_kind k) noexcept { return name_of(k, k_gc_kind_names); }
const char* to_string(gc_reason r) noexcept { return name_of(r, k_gc_reason_names); }

namespace {

void json_stat(std::ostringstream& os, const char* name, const stat_value& v) {
  os << "\"" << name << "\":{\"current\":" << v.current << ",\"peak\":" << v.peak << ",\"total\":" << v.total
     << "}";
}

std::string row(const char* name, const stat_value& v, bool bytes) {
  char buf[160];
  if (bytes)
    std::snprintf(buf, sizeof buf, "  %-14s %14s %14s %16s\n", name, format_bytes(v.current).c_str(),
                  format_bytes(v.peak).c_str(), format_bytes(v.total).c_str());
  else
    std::snprintf(buf, sizeof buf, "  %-14s %14lld %14lld %16lld\n", name, static_cast<long long>(v.current),
                  static_cast<long long>(v.peak), static_cast<long long>(v.total));
  return buf;
}

}  // namespace

std::string to_text(const allocator_stats& s) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "gcpressure: device %d (%s), effective limits: soft %s, hard %s\n", s.device,
                to_string(s.backend), format_bytes(s.soft_limit).c_str(), format_bytes(s.hard_limit).c_str());
  os << buf;
  std::snprintf(buf, sizeof buf, "  %-14s %14s %14s %16s\n", "", "current", "peak", "total");
  os << buf;
  os << row("requested", s.requested, true) << row("allocated", s.allocated, true)
     << row("reserved", s.reserved, true) << row("blocks", s.active_blocks, false);
  std::snprintf(buf, sizeof buf,
                "  cached %s, deferred frees pending %zu, device free %s of %s\n"
                "  allocations %llu, frees %llu, pool hits %llu, upstream allocs %llu / frees %llu / failures %llu, "
                "OOMs %llu, misuse %llu\n",
                format_bytes(s.cached).c_str(), s.deferred_pending, format_bytes(s.device_memory.free).c_str(),
                format_bytes(s.device_memory.total).c_str(), static_cast<unsigned long long>(s.allocations),
                static_cast<unsigned long long>(s.frees), static_cast<unsigned long long>(s.pool_hits),
                static_cast<unsigned long long>(s.upstream_allocations),
                static_cast<unsigned long long>(s.upstream_frees),
                static_cast<unsigned long long>(s.upstream_failures), static_cast<unsigned long long>(s.ooms),
                static_cast<unsigned long long>(s.misuse_errors));
  os << buf;
  std::snprintf(buf, sizeof buf, "  available to this process %s (least %s), headroom changes %llu\n",
                format_bytes(s.available_bytes).c_str(), format_bytes(s.available_bytes_min).c_str(),
                static_cast<unsigned long long>(s.headroom_changes));
  os << buf;
  os << "  reclaim ladder:";
  for (int i = 0; i < ladder_step_count; ++i)
    os << " " << to_string(static_cast<ladder_step>(i)) << "=" << s.ladder[i];
  os << "\n";
  const auto& g = s.gc;
  std::snprintf(buf, sizeof buf,
                "  collections (%s): minor %llu, incremental full %llu, blocking full %llu; "
                "gc %.3f s, longest pause %.3f ms, finalized %llu, reclaimed %s\n",
                g.policy.empty() ? "no policy" : g.policy.c_str(),
                static_cast<unsigned long long>(g.by_kind[0]), static_cast<unsigned long long>(g.by_kind[1]),
                static_cast<unsigned long long>(g.by_kind[2]), g.gc_seconds, g.longest_pause_seconds * 1e3,
                static_cast<unsigned long long>(g.finalized), format_bytes(g.reclaimed_bytes).c_str());
  os << buf;
  os << "  by reason:";
  for (int i = 0; i < gc_reason_count; ++i) os << " " << to_string(static_cast<gc_reason>(i)) << "=" << g.by_reason[i];
  os << "\n";
  std::snprintf(buf, sizeof buf,
                "  gc time: exposed %.3f s (%.3f s of it untimed, an upper bound; %.3f s charged), hidden %.3f s; "
                "blocking cycles %llu; syncs %llu, slack %.3f ms, sync wait %.3f s\n",
                g.exposed_gc_seconds, g.exposed_gc_seconds_untimed, g.exposed_gc_seconds_charged, g.hidden_gc_seconds,
                static_cast<unsigned long long>(g.blocking_cycles),
                static_cast<unsigned long long>(g.syncs), g.slack_seconds * 1e3, g.sync_wait_seconds);
  os << buf;
  std::snprintf(buf, sizeof buf,
                "  runtime's own collections %llu (whole-heap %llu), %.3f s (%s); collector total %llu; "
                "gc all %.3f s\n",
                static_cast<unsigned long long>(g.runtime_collections),
                static_cast<unsigned long long>(g.runtime_full_collections), g.runtime_gc_seconds,
                g.runtime_seconds_exact ? "exact" : "lower bound",
                static_cast<unsigned long long>(g.collector_collections), g.gc_seconds_all);
  os << buf;
  return os.str();
}

std::string to_json(const allocator_stats& s) {
  std::ostringstream os;
  os << "{\"device\":" << s.device << ",\"backend\":\"" << to_string(s.backend) << "\",";
  json_stat(os, "requested", s.requested);
  os << ",";
  json_stat(os, "allocated", s.allocated);
  os << ",";
  json_stat(os, "reserved", s.reserved);
  os << ",";
  json_stat(os, "blocks", s.active_blocks);
  os << ",\"allocations\":" << s.allocations << ",\"frees\":" << s.frees << ",\"pool_hits\":" << s.pool_hits
     << ",\"upstream_allocations\":" << s.upstream_allocations << ",\"upstream_frees\":" << s.upstream_frees
     << ",\"upstream_failures\":" << s.upstream_failures << ",\"cross_stream_waits\":" << s.cross_stream_waits
     << ",\"misuse_errors\":" << s.misuse_errors << ",\"ooms\":" << s.ooms << ",\"cached\":" << s.cached
     << ",\"since_mark\":" << s.since_mark << ",\"deferred_pending\":" << s.deferred_pending
     << ",\"soft_limit\":" << s.soft_limit << ",\"hard_limit\":" << s.hard_limit
     << ",\"device_free\":" << s.device_memory.free << ",\"device_total\":" << s.device_memory.total
     << ",\"available_bytes\":" << s.available_bytes << ",\"available_bytes_min\":" << s.available_bytes_min
     << ",\"headroom_changes\":" << s.headroom_changes
     << ",\"ladder\":{";
  for (int i = 0; i < ladder_step_count; ++i)
    os << (i ? "," : "") << "\"" << to_string(static_cast<ladder_step>(i)) << "\":" << s.ladder[i];
  const auto& g = s.gc;
  os << "},\"gc\":{\"policy\":\"" << json_escape(g.policy) << "\",\"policy_devices\":" << g.policy_devices
     << ",\"by_kind\":{";
  for (int i = 0; i < gc_kind_count; ++i)
    os << (i ? "," : "") << "\"" << to_string(static_cast<gc_kind>(i)) << "\":" << g.by_kind[i];
  os << "},\"by_reason\":{";
  for (int i = 0; i < gc_reason_count; ++i)
    os << (i ? "," : "") << "\"" << to_string(static_cast<gc_reason>(i)) << "\":" << g.by_reason[i];
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "},\"incremental_slices\":%llu,\"gc_seconds\":%.6f,\"longest_pause_seconds\":%.6f,"
                "\"finalized\":%llu,\"reclaimed_bytes\":%llu,\"reclaimed_per_collection\":%.1f,",
                static_cast<unsigned long long>(g.incremental_slices), g.gc_seconds, g.longest_pause_seconds,
                static_cast<unsigned long long>(g.finalized), static_cast<unsigned long long>(g.reclaimed_bytes),
                g.reclaimed_per_collection);
  os << buf;
  // Which figures are exact and which are bounds travels with them:
  // exposed is an upper bound where part of it was untimed (Note [Exposed GC
  // time, measured]); the runtime's own seconds are a lower bound unless
  // runtime_seconds_exact.
  std::snprintf(buf, sizeof buf,
                "\"exposed_gc_seconds\":%.6f,\"exposed_gc_seconds_is_upper_bound\":%s,"
                "\"exposed_gc_seconds_untimed\":%.6f,\"exposed_gc_seconds_charged\":%.6f,\"hidden_gc_seconds\":%.6f,\"blocking_cycles\":%llu,\"syncs\":%llu,\"slack_seconds\":%.6f,"
                "\"sync_wait_seconds\":%.6f,\"runtime_collections\":%llu,\"runtime_full_collections\":%llu,"
                "\"runtime_gc_seconds\":%.6f,\"runtime_seconds_exact\":%s,\"collector_collections\":%llu,"
                "\"gc_seconds_all\":%.6f}}",
                g.exposed_gc_seconds, g.exposed_gc_seconds_untimed > 0 ? "true" : "false",
                g.exposed_gc_seconds_untimed, g.exposed_gc_seconds_charged, g.hidden_gc_seconds,
                static_cast<unsigned long long>(g.blocking_cycles),
                static_cast<unsigned long long>(g.syncs), g.slack_seconds, g.sync_wait_seconds,
                static_cast<unsigned long long>(g.runtime_collections),
                static_cast<unsigned long long>(g.runtime_full_collections), g.runtime_gc_seconds,
                g.runtime_seconds_exact ? "true" : "false", static_cast<unsigned long long>(g.collector_collections),
                g.gc_seconds_all);
  os << buf;
  return os.str();
}

}  // namespace gcpressure
