# tests/gpu/gpu.mk (included by the top-level Makefile, which provides BUILD, CC, NVCC, CUDA_HOME
# and LIB).
#   make gpu-test           build the programs of tests/gpu with nvcc (shared and static cudart,
#                           into $(BUILD)/gpu) and run each without and with the shim; see
#                           tests/gpu/run.sh. Then PyTorch's CUDA graphs without and with the
#                           shim (tests/gpu/torch_graphs.sh). Without a GPU it says so and
#                           succeeds. GPUCACHE_TEST_LIB=path tests another build of the library.
#   make gpu-test-graphs    only the CUDA-graph matrix (tests/gpu/graphs.cu, issue 14) and
#                           PyTorch's CUDA graphs
#   make gpu-test-capture-selftest  the graph cases against the test-only build that fences
#                           during captures (GC_TEST_FENCE_IN_CAPTURE): succeeds only when caught
#   make gpu-test-sanitizer the memory-error programs of tests/gpu/sanitizer under
#                           compute-sanitizer without and with the shim (same errors), and
#                           correct programs of the suite under memcheck with it (no error);
#                           see tests/gpu/sanitizer.sh
#   make gpu-test-memory-viz  PyTorch's memory viewer (python -m torch.cuda._memory_viz) on
#                           gpucache's snapshots of a PyTorch run and of a CUDA program
#                           (tests/gpu/memory_viz.sh, issue 17)
#   make gpu-test-build     only compile the programs (no GPU needed)
#   make gpu-test-selftest  run the suite against the test-only build of the shim that reuses
#                           freed blocks at once (GC_TEST_UNSAFE_REUSE, tests/tests.mk):
#                           succeeds only when the suite catches it

.PHONY: gpu-test gpu-test-build gpu-test-selftest gpu-test-graphs gpu-test-capture-selftest \
        gpu-test-sanitizer gpu-test-memory-viz

GPU_TEST_ENV := BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) NVCC=$(NVCC) CC=$(CC)

TORCH_GRAPHS := GPUCACHE_TEST_LIB=$${GPUCACHE_TEST_LIB:-$(abspath $(LIB))} tests/gpu/torch_graphs.sh

gpu-test: $(LIB)
	$(GPU_TEST_ENV) tests/gpu/run.sh; rc=$$?; $(TORCH_GRAPHS) && exit $$rc

gpu-test-memory-viz: $(LIB)
	BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) NVCC=$(NVCC) GPUCACHE_TEST_LIB=$${GPUCACHE_TEST_LIB:-$(abspath $(LIB))} tests/gpu/memory_viz.sh

gpu-test-graphs: $(LIB)
	$(GPU_TEST_ENV) GPU_TEST_FILTER='^graphs' tests/gpu/run.sh; rc=$$?; $(TORCH_GRAPHS) && exit $$rc

# The graph cases against the test-only build that fences during captures (tests/tests.mk):
# succeeds only when they catch it.
gpu-test-capture-selftest: $(FENCE_CAPTURE_LIB)
	@if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then \
	  echo "gpu-test-capture-selftest: no GPU: nothing tested"; \
	elif $(GPU_TEST_ENV) GPUCACHE_TEST_LIB=$(abspath $(FENCE_CAPTURE_LIB)) \
	     GPU_TEST_FILTER='^graphs (issue|modes|threads|tograph)' tests/gpu/run.sh; then \
	  echo "gpu-test-capture-selftest: FAILED: the graph cases did not catch fences in captures"; exit 1; \
	else \
	  echo "gpu-test-capture-selftest: ok: the graph cases caught the build that fences in captures (failures above are expected)"; \
	fi

gpu-test-build:
	$(GPU_TEST_ENV) tests/gpu/run.sh --build-only && $(GPU_TEST_ENV) tests/gpu/sanitizer.sh --build-only

gpu-test-sanitizer: $(LIB)
	$(GPU_TEST_ENV) tests/gpu/sanitizer.sh

gpu-test-selftest: $(UNSAFE_LIB)
	@if ! (command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1); then \
	  echo "gpu-test-selftest: no GPU: nothing tested"; \
	elif $(GPU_TEST_ENV) GPUCACHE_TEST_LIB=$(abspath $(UNSAFE_LIB)) \
	     GPU_TEST_FILTER='^(reuse|threads|graphs relaunch)' tests/gpu/run.sh; then \
	  echo "gpu-test-selftest: FAILED: the suite did not catch the broken cache"; exit 1; \
	else \
	  echo "gpu-test-selftest: ok: the suite caught the deliberately broken cache (failures above are expected)"; \
	fi
