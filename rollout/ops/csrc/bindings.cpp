// The CPU kernels' Python module (rollout/ops/cpu_kernels.py builds it).

#include <torch/extension.h>

void paged_decode(torch::Tensor out, torch::Tensor query, torch::Tensor key_cache, torch::Tensor value_cache,
                  torch::Tensor block_tables, torch::Tensor seq_lens, torch::Tensor starts, double scale);
void uniform_noise(torch::Tensor out, torch::Tensor states);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention over the KV cache in place (CPU, fp32)");
  m.def("uniform_noise", &uniform_noise, "the sampling noise's uniforms, one pass (CPU)");
}
