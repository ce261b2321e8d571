// Prints the slim-attention seed's Whisper cache table (tiny..large) from the model shapes alone
// (polyattn/layers/cross_cache_memory.hpp): cache sizes, parameters read per generated token,
// memory reads per token at batch 1 and 64 and the speedups of a memory-bound decoder. The hybrid
// column is ours (the seed describes it but does not tabulate it). Usage: whisper_cache_table [batch]
#include <cstdio>
#include <cstdlib>

#include <polyattn/layers/cross_cache_memory.hpp>

int main(int argc, char** argv) {
  using namespace polyattn;
  const int batch = argc > 1 ? std::atoi(argv[1]) : 64;
  if (batch < 1) {
    std::fprintf(stderr, "whisper_cache_table: batch must be >= 1, got '%s'\n", argv[1]);
    return 2;
  }
  std::printf("%-34s", "(millions)");
  for (const auto& s : kWhisperShapes) std::printf("%10s", s.name);
  std::printf("\n");
  auto row = [](const char* label, auto value) {
    std::printf("%-34s", label);
    for (const auto& s : kWhisperShapes) std::printf("%10.1f", value(cross_cache_memory(s)) );
    std::printf("\n");
  };
  auto ratio = [](const char* label, auto value) {
    std::printf("%-34s", label);
    for (const auto& s : kWhisperShapes) std::printf("%9.2fx", value(cross_cache_memory(s)));
    std::printf("\n");
  };
  const double M = 1e6;
  row("Encoder E-cache (1500 d)", [&](const CrossCacheMemory& m) { return m.e_cache / M; });
  row("Cross KV-cache (2 1500 d L)", [&](const CrossCacheMemory& m) { return m.cross_kv / M; });
  row("Self KV-cache (2 448 d L)", [&](const CrossCacheMemory& m) { return m.self_kv / M; });
  row("Baseline cache", [&](const CrossCacheMemory& m) { return m.baseline / M; });
  row("Option 1 cache (K-only)", [&](const CrossCacheMemory& m) { return m.option1 / M; });
  row("Option 2 cache (E-cache on chip)", [&](const CrossCacheMemory& m) { return m.option2 / M; });
  ratio("Option 2 savings", [&](const CrossCacheMemory& m) { return m.option2_savings(); });
  row("Baseline params", [&](const CrossCacheMemory& m) { return m.params_baseline / M; });
  row("Option 1 params", [&](const CrossCacheMemory& m) { return m.params_option1 / M; });
  row("Option 2 params", [&](const CrossCacheMemory& m) { return m.params_option2 / M; });
  row("Hybrid params", [&](const CrossCacheMemory& m) { return m.params_hybrid / M; });
  for (int b : {1, batch}) {
    std::printf("Memory reads per token, batch %d:\n", b);
    row("  Baseline", [&](const CrossCacheMemory& m) { return m.reads_baseline(b) / M; });
    row("  Option 1", [&](const CrossCacheMemory& m) { return m.reads_option1(b) / M; });
    row("  Option 2", [&](const CrossCacheMemory& m) { return m.reads_option2(b) / M; });
    row("  Hybrid", [&](const CrossCacheMemory& m) { return m.reads_hybrid(b) / M; });
    ratio("  Option 1 speedup", [&](const CrossCacheMemory& m) { return m.option1_speedup(b); });
    ratio("  Option 2 speedup", [&](const CrossCacheMemory& m) { return m.option2_speedup(b); });
    ratio("  Hybrid speedup", [&](const CrossCacheMemory& m) { return m.hybrid_speedup(b); });
  }
}
