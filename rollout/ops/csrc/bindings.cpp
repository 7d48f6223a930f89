// The CPU kernels' Python module (rollout/ops/cpu_kernels.py builds it).

#include <torch/extension.h>

void paged_decode(torch::Tensor out, torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                  torch::Tensor block_tables, torch::Tensor seq_lens, torch::Tensor starts, double scale);
void uniform_noise(torch::Tensor out, torch::Tensor states);
bool race_available();
void exponential_race(torch::Tensor tokens, torch::Tensor logprobs, torch::Tensor states);
void exponential_race_scores(torch::Tensor tokens, torch::Tensor scores, torch::Tensor logprobs,
                             torch::Tensor states);
torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps);
torch::Tensor silu_mul(torch::Tensor gate, torch::Tensor up);
torch::Tensor rotary(torch::Tensor x, torch::Tensor cos, torch::Tensor sin);
void write_kv(torch::Tensor key_cache, torch::Tensor value_cache, torch::Tensor key, torch::Tensor value,
              torch::Tensor slots);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention over the KV cache in place (CPU, fp32)");
  m.def("uniform_noise", &uniform_noise, "the sampling noise's uniforms, one pass (CPU)");
  m.def("race_available", &race_available, "whether exponential_race finds MKL's and Sleef's functions");
  m.def("exponential_race", &exponential_race, "the sampler's exponential race, one pass per row (CPU)");
  m.def("rms_norm", &rms_norm, "Llama-family RMSNorm in one pass (CPU, fp32)");
  m.def("silu_mul", &silu_mul, "silu(gate) * up in one pass (CPU, fp32)");
  m.def("rotary", &rotary, "Llama-family rotary embedding of [tokens, heads, head_dim] rows (CPU, fp32)");
  m.def("write_kv", &write_kv, "K and V rows into the paged caches at their slots (CPU, fp32)");
  m.def("exponential_race_scores", &exponential_race_scores, "exponential_race, also writing every score");
}
