// cudasim/launch.h: launching a kernel on the emulated device. The arguments are converted to
// the kernel's parameter types (as a real launch does), every pointer among them is checked
// against the device-memory registry, and the grid runs block by block, one fiber per thread.
// defines: cudasim::launch, cudasim::detail::Launch
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cudasim {

namespace detail {

struct Launch {
  const void* kernel;  // identity (for names, attributes)
  dim3 grid, block;
  size_t dynamic_smem;
  cudaStream_t stream;
  void (*run)(const Launch&);  // calls the kernel with `params` (each call copies them)
  const void* params;
  void* invoke;  // the kernel as an untyped pointer
};

// Checks the configuration, runs every block; sets the launch's error (cudaGetLastError).
void launch(const Launch& l);

// A pointer argument that is not device memory (or null): reported, true when it is bad.
bool check_pointer_arg(const Launch& l, int index, const void* p);
// A struct argument: each aligned 8-byte word that is a live host heap or host stack address
// and not device memory is reported.
bool check_struct_arg(const Launch& l, int index, const void* bytes, size_t size);

// The bytes of a struct argument with its padding zeroed: the kernel never reads padding, so
// the argument check must not either (a stale host address left in the padding of a struct is
// harmless on a GPU, and was reported by the check only in the runs where it happened to be
// there). Without the compiler builtin the padding is scanned as it is.
template <class V>
void bytes_without_padding(const V& v, unsigned char (&out)[sizeof(V)]) {
  static_assert(std::is_trivially_copyable_v<V>, "a kernel argument is copied byte for byte");
  std::memcpy(out, &v, sizeof(V));
#if defined(__has_builtin)
#if __has_builtin(__builtin_clear_padding)
  __builtin_clear_padding(reinterpret_cast<V*>(out));
#endif
#endif
}

template <class Tuple, class Kernel, size_t... I>
void call(const Launch& l, std::index_sequence<I...>) {
  const auto& t = *static_cast<const Tuple*>(l.params);
  reinterpret_cast<Kernel>(l.invoke)(std::get<I>(t)...);
}

template <class Tuple, size_t... I>
bool check_args(const Launch& l, const Tuple& t, std::index_sequence<I...>) {
  bool bad = false;
  [[maybe_unused]] auto one = [&](int index, const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_pointer_v<V>)
      bad |= check_pointer_arg(l, index, static_cast<const void*>(v));
    else if constexpr (std::is_class_v<V>) {
      alignas(V) unsigned char bytes[sizeof(V)];
      bytes_without_padding(v, bytes);
      bad |= check_struct_arg(l, index, bytes, sizeof bytes);
    }
  };
  (one(static_cast<int>(I), std::get<I>(t)), ...);
  return bad;
}

bool fail_launch(cudaError_t code);     // records a launch error; returns true
void fail_execution(cudaError_t code);  // makes `code` the sticky error

}  // namespace detail

// kernel<<<grid, block, smem, stream>>>(args...) on the emulated device.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_smem,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launched with the wrong arity");
  using Tuple = std::tuple<std::decay_t<Params>...>;
  using Seq = std::index_sequence_for<Params...>;
  const Tuple params(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  detail::Launch l{
      reinterpret_cast<const void*>(kernel),
      grid,
      block,
      dynamic_smem,
      stream,
      [](const detail::Launch& x) { detail::call<Tuple, void (*)(Params...)>(x, Seq{}); },
      &params,
      reinterpret_cast<void*>(kernel)};
  // A GPU would fault reading the host address: the sticky illegal-address error; the kernel
  // does not run.
  if (detail::check_args(l, params, Seq{})) {
    detail::fail_execution(cudaErrorIllegalAddress);
    return;
  }
  detail::launch(l);
}

}  // namespace cudasim
