// A downstream program: picks a policy at compile time and decodes one token.
#include <polyattn/polyattn.hpp>

#include <cstdio>

int main() {
  using Attn = polyattn::Attention<polyattn::Gqa<2>, polyattn::Paged<16>, polyattn::exec::CpuSimd>;
  Attn attn({.n_heads = 6, .head_dim = 64}, {.max_sequences = 1, .capacity = 448});
  const int seq = attn.open_sequence();
  const int seqs[] = {seq};
  polyattn::RowMatrixXf q = polyattn::RowMatrixXf::Ones(1, 384), k = polyattn::RowMatrixXf::Ones(1, 192);
  polyattn::RowMatrixXf v = polyattn::RowMatrixXf::Constant(1, 192, 0.5f), out(1, 384);
  attn.decode(seqs, q, {k, v}, out);
  std::printf("%s: %zu cache bytes per token, out[0] = %g\n", Attn::name().c_str(), Attn::cache_bytes_per_token(attn.shape()),
              double(out(0, 0)));
  return out(0, 0) == 0.5f ? 0 : 1;  // attention over one token returns its value
}
