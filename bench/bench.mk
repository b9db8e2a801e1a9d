# bench/bench.mk: make bench (included by the top-level Makefile, which provides BUILD, CC,
# CUDA_HOME, CUDA_INC, LIB; FAKE_LIB and FAKE_LDLIBS come from tests/fake/fake.mk).
#
# On a GPU machine: bench/run-gpu.sh (bench/pool against the real cudart, raw, --async and under
# the shim; the PyTorch end-to-end runs; summary tables; JSON + log in $OUT or
# $(BUILD)/bench/results). Without a GPU: bench/pool against the fake CUDA runtime, raw and under
# the shim, and a note that the PyTorch part needs a GPU.

.PHONY: bench

BENCH_POOL_FAKE := $(BUILD)/bench/pool-fake

# pool.c defines _GNU_SOURCE itself: not built with $(CFLAGS) (its -D_GNU_SOURCE would clash).
# The fake runtime answers the memory-pool calls of --async with cudaErrorNotSupported.
$(BENCH_POOL_FAKE): bench/pool.c $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra $(CUDA_INC) -o $@ bench/pool.c \
	  -L$(BUILD)/fake -lcudart -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags \
	  -pthread -ldl

bench: $(LIB) $(FAKE_NVTX_LIB)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) CC=$(CC) bench/run-gpu.sh; \
	else \
	  $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) $(BENCH_POOL_FAKE) && \
	  BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) CC=$(CC) bench/run-gpu.sh --fake $(BENCH_POOL_FAKE); \
	fi

# bench/threads.cu over the fake runtime (docs/BENCHMARKS.md's "threads-fake"): the same loop
# without a GPU, to read the pool's share of a pair apart from the driver's. A C++ compiler
# builds it (the .cu file holds no device code).
BENCH_THREADS_FAKE := $(BUILD)/bench/threads-fake
$(BENCH_THREADS_FAKE): bench/threads.cu $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CXX) -O2 -Wall -x c++ $(CUDA_INC) -o $@ bench/threads.cu \
	  -L$(BUILD)/fake -lcudart -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags -pthread

# bench/replay: a GPUCACHE_TRACE file run against the pool on the CPU (docs/TRACE.md).
REPLAY := $(BUILD)/bench/replay
$(REPLAY): bench/replay.c $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(INC) -o $@ $< $(CORE_LIB) $(LDFLAGS) -lm

# bench/arenas: what several arenas cost in memory, one interleaving fixed by a seed (CPU).
BENCH_ARENAS := $(BUILD)/bench/arenas
$(BENCH_ARENAS): bench/arenas.c $(CORE_LIB) tests/unit/pool_testlib.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(INC) -Itests/unit -o $@ $< $(CORE_LIB) $(LDFLAGS)

# bench/api_census: every CUDA driver and runtime call a program makes, counted through CUPTI
# (an investigation tool: LD_PRELOAD it without libgpucache.so; needs libcupti at run time).
API_CENSUS := $(BUILD)/bench/libapi_census.so
$(API_CENSUS): bench/api_census.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC $(CUDA_INC) -o $@ $< \
	  -L$(CUDA_HOME)/lib64 -lcupti -pthread -Wl,-rpath,$(CUDA_HOME)/lib64
