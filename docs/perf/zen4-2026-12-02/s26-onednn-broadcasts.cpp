#include <cstdint>
#include <cstdio>
#include <dnnl.hpp>
#include <string>
#include <vector>
using namespace dnnl;
using dt = memory::data_type;
int main() {
  engine eng(engine::kind::cpu, 0);
  const int M = 2048, N = 1376, K = 256;
  auto tryit = [&](const char* name, memory::desc a, memory::desc b, memory::desc c,
                   primitive_attr attr) {
    try {
      matmul::primitive_desc pd(matmul::desc(a, b, c), attr, eng);
      printf("%s: %s\n", name, pd.impl_info_str());
    } catch (dnnl::error& e) {
      printf("%s: refused\n", name);
    }
    fflush(stdout);
  };
  {  // 2D per-N output scale only
    primitive_attr at;
    at.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
    tryit("2D oscale per-N", {{M, K}, dt::bf16, {K, 1}}, {{K, N}, dt::bf16, {1, K}},
          {{M, N}, dt::bf16, {N, 1}}, at);
  }
  {
    primitive_attr at;
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{1, N}, dt::f32, {N, 1}});
    at.set_post_ops(po);
    tryit("2D binary per-N", {{M, K}, dt::bf16, {K, 1}}, {{K, N}, dt::bf16, {1, K}},
          {{M, N}, dt::bf16, {N, 1}}, at);
  }
  {
    primitive_attr at;
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{M, 1}, dt::f32, {1, 1}});
    at.set_post_ops(po);
    tryit("2D binary per-M", {{M, K}, dt::bf16, {K, 1}}, {{K, N}, dt::bf16, {1, K}},
          {{M, N}, dt::bf16, {N, 1}}, at);
  }
  {
    primitive_attr at;
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{M, N}, dt::f32, {N, 1}});
    at.set_post_ops(po);
    tryit("2D binary full", {{M, K}, dt::bf16, {K, 1}}, {{K, N}, dt::bf16, {1, K}},
          {{M, N}, dt::bf16, {N, 1}}, at);
  }
  {
    primitive_attr at;
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{1, M, 1}, dt::f32, {M, 1, 1}});
    at.set_post_ops(po);
    tryit("3D binary per-M", {{1, M, K}, dt::bf16, {M * K, K, 1}},
          {{1, K, N}, dt::bf16, {N * K, 1, K}}, {{1, M, N}, dt::bf16, {M * N, N, 1}}, at);
  }
  {
    primitive_attr at;
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{M / 16, 16, 1}, dt::f32, {16, 1, 1}});
    at.set_post_ops(po);
    tryit("3D batch=M/16 binary per-mb-row", {{M / 16, 16, K}, dt::bf16, {16 * K, K, 1}},
          {{1, K, N}, dt::bf16, {N * K, 1, K}}, {{M / 16, 16, N}, dt::bf16, {16 * N, N, 1}}, at);
  }
  {
    primitive_attr at;
    at.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
    post_ops po;
    po.append_binary(algorithm::binary_mul, {{M, 1}, dt::f32, {1, 1}});
    at.set_post_ops(po);
    tryit("2D dst transposed", {{N, K}, dt::bf16, {K, 1}}, {{K, M}, dt::bf16, {1, K}},
          {{N, M}, dt::bf16, {1, N}}, primitive_attr());
  }
}
