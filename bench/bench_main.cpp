// bench_main.cpp — main() of gcpressure_bench, shared by every bench/*.cpp.
//
// Benchmarks register themselves from their own files (BENCHMARK macros or
// benchmark::RegisterBenchmark at static-initialisation time); this file only
// runs them, like BENCHMARK_MAIN(), and records which backends were usable.
#include <benchmark/benchmark.h>

#include <string>

#include "gcpressure/cuda_resource.hpp"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // In the JSON context, so that a result file says whether the CUDA cases
  // were skipped because there was no device.
  benchmark::AddCustomContext("gcpressure_cuda_devices", std::to_string(gcpressure::cuda_device_count()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
