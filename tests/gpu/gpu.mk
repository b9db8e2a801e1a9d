# tests/gpu/gpu.mk: make gpu-test (included by the top-level Makefile, which provides BUILD, CC,
# NVCC, CUDA_HOME and LIB). Builds the programs of tests/gpu with nvcc (shared and static
# cudart, into $(BUILD)/gpu) and runs each without and with the shim; see tests/gpu/run.sh.
# Without a GPU it says so and succeeds. GPUCACHE_TEST_LIB=path tests another build of the
# library. `make gpu-test-build` only compiles (no GPU needed).

.PHONY: gpu-test gpu-test-build

gpu-test: $(LIB)
	BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) NVCC=$(NVCC) CC=$(CC) tests/gpu/run.sh

gpu-test-build:
	BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) NVCC=$(NVCC) CC=$(CC) tests/gpu/run.sh --build-only
