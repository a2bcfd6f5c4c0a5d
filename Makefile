# The two commands of README.md and their helpers. Each target does its own set-up.
BUILD ?= build
CUDASIM_BUILD ?= build-cudasim
CUDASIM_TSAN_BUILD ?= build-cudasim-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
CMAKE_FLAGS ?=
CPU_BUILD ?= build-cpu
BENCH_VENV ?= .bench-venv
BENCH_SEQS ?= 256
JOBS ?= $(shell nproc)

.PHONY: all setup build test sanitize-build test-sanitize test-cudasim test-cudasim-tsan fuzz fuzz-check demo bench bench-step format clean

all: build

setup:
	scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# Every test; GPU-labelled ones report "skipped" where there is no GPU.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# One build under AddressSanitizer and UndefinedBehaviorSanitizer with the CUDA kernels compiled
# for the emulated device (cudasim/, no GPU needed: docs/cuda-without-gpu.md), in build-cudasim/.
# test-sanitize runs every test there: the CPU tests and the GPU tests on the emulated device.
# (One build, not one per half: CI's time is mostly sanitizer builds, docs/perf/build.md.)
sanitize-build: setup
	cmake -S . -B $(CUDASIM_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOCTET_CUDASIM=ON -DOCTET_SANITIZE=ON
	cmake --build $(CUDASIM_BUILD) -j $(JOBS)

test-sanitize: sanitize-build
	cd $(CUDASIM_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) --timeout 1800

# The GPU tests alone, on the emulated device, in the same build.
test-cudasim: sanitize-build
	cd $(CUDASIM_BUILD) && ctest --output-on-failure -j $(JOBS) -L gpu --timeout 1800

# The same kernel tests under ThreadSanitizer: a data race between two emulated threads of a
# block (a missing barrier) is reported.
test-cudasim-tsan: setup
	cmake -S . -B $(CUDASIM_TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOCTET_CUDASIM=ON -DOCTET_SANITIZE_THREAD=ON
	cmake --build $(CUDASIM_TSAN_BUILD) -j $(JOBS)
	cd $(CUDASIM_TSAN_BUILD) && OMP_NUM_THREADS=1 ctest --output-on-failure -j $(JOBS) -L gpu --timeout 1800

# libFuzzer harnesses of every parser of outside input (fuzz/), built with clang, ASan and
# UBSan, each run FUZZ_SECONDS (docs/reliability.md records the runs).
fuzz: setup
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  -DOCTET_FUZZ=ON -DOCTET_SANITIZE=ON -DOCTET_CUDA=OFF -DOCTET_TESTS=OFF
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_harnesses
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# CI's regression check: each harness briefly, from the seeds and what earlier runs found.
fuzz-check:
	$(MAKE) fuzz FUZZ_SECONDS=20

# The main job: the tiny LLaMA trained on the synthetic corpus in bf16 and in fp8,
# both final validation losses printed next to the corpus' entropy floor.
demo: build
	scripts/demo.sh $(BUILD)/octet

# The CPU GEMM and conversion benchmarks (numbers in docs/perf/cpu.md).
bench: build
	$(BUILD)/octet bench gemm --device cpu

# octet's CPU step beside Hugging Face's (docs/perf/cpu-step.md): a CPU-only build and a venv
# with torch and transformers of its own (BENCH_VENV, not the tests' .venv).
bench-step: setup
	cmake -S . -B $(CPU_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DOCTET_CUDA=OFF
	cmake --build $(CPU_BUILD) -j $(JOBS) --target octet
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c 'import torch, transformers' 2>/dev/null || \
	  $(BENCH_VENV)/bin/pip install torch transformers
	bench/cpu_step.sh $(CPU_BUILD)/octet $(BENCH_VENV)/bin/python $(BENCH_SEQS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf $(BUILD) $(CUDASIM_BUILD) $(CUDASIM_TSAN_BUILD) $(FUZZ_BUILD)
