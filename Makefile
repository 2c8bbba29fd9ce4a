# Thin wrapper over CMake. Every target installs the Debian packages it needs
# first (scripts/install-deps.sh is idempotent and quick when nothing is missing).
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests run at once by ctest (tests/harness/ctest_slots.cmake: how many cores each test takes).
TEST_JOBS ?= $(shell nproc)

.PHONY: all deps build test check demo bench asan clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The whole suite; `make check` runs its unit tier only (tests/CMakeLists.txt: the tiers).
test: build
	@./scripts/test-venv.sh
	@./scripts/hf-venv.sh
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS)

check: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -L unit

demo: build
	@./scripts/demo.sh $(BUILD)/batchscale

bench: build
	@./bench/run.sh $(BUILD)/batchscale

asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBS_SANITIZE=ON >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
		ctest --output-on-failure -j 1 -LE "long|isa-avx2"

clean:
	rm -rf $(BUILD) build-asan
