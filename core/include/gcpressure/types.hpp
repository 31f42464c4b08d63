// gcpressure/types.hpp — small vocabulary types shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcpressure {

// A stream: a cudaStream_t on the CUDA backends, a host_stream* on the host
// backend. nullptr is the default (legacy) stream. Work on one stream runs in
// order; frees are ordered on the stream they name.
using stream_ref = void*;

// Opaque event handle produced by stream_ops::record().
using event_ref = void*;

enum class backend_kind { host, cuda, cuda_async };

const char* to_string(backend_kind k) noexcept;

struct device_memory_info {
  std::size_t free = 0;
  std::size_t total = 0;
};

// Every block handed out is aligned at least this much (as cudaMalloc is).
inline constexpr std::size_t alignment = 256;

// No single request may exceed this (2^48 bytes = 256 TiB); larger requests
// are rejected before any work as an absurd size.
inline constexpr std::size_t max_request_bytes = std::size_t{1} << 48;

constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }

}  // namespace gcpressure
