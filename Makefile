# The two commands of README.md and their helpers. Each target does its own set-up.
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

.PHONY: all setup build test test-sanitize demo bench format clean

all: build

setup:
	scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# Every test; GPU-labelled ones report "skipped" where there is no GPU.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer, in their own folder.
test-sanitize: setup
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOCTET_SANITIZE=ON -DOCTET_CUDA=OFF
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -L cpu --timeout 1800

# The main job: the tiny LLaMA trained on the synthetic corpus in bf16 and in fp8,
# both final validation losses printed next to the corpus' entropy floor.
demo: build
	scripts/demo.sh $(BUILD)/octet

# The CPU GEMM and conversion benchmarks (numbers in docs/perf/cpu.md).
bench: build
	$(BUILD)/octet bench gemm --device cpu

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
