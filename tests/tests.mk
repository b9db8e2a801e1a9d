# Test programs (ordinary CUDA runtime programs, built against the fake runtime) and the
# integration tests that run them with and without the shim.

PROG_SRC := $(wildcard tests/programs/prog_*.c)
PROG_BIN := $(PROG_SRC:tests/programs/%.c=$(BUILD)/programs/%)
TEST_PROGRAMS += $(PROG_BIN)

# The programs know nothing of the shim; prog_nocuda links no CUDA at all.
$(BUILD)/programs/prog_nocuda: tests/programs/prog_nocuda.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/programs/prog_%: tests/programs/prog_%.c tests/programs/prog.h $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -o $@ $< -L$(BUILD)/fake -lcudart \
	  -Wl,-rpath,$(abspath $(BUILD)/fake) $(LDFLAGS)

ITEST_SRC := $(wildcard tests/integration/test_*.c)
ITEST_BIN := $(ITEST_SRC:tests/integration/test_%.c=$(BUILD)/tests/itest_%)
TEST_BINS += $(ITEST_BIN)
TSAN_TEST_BINS += $(filter %_mt,$(ITEST_BIN))

$(BUILD)/tests/itest_%: tests/integration/test_%.c tests/integration/runner.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/integration -o $@ $< $(LDFLAGS) $(CMOCKA_LIBS)

# Sanitized shims need the sanitizer runtime loaded before them.
SAN_PRELOAD := $(if $(findstring address,$(SAN)),$(shell $(CC) -print-file-name=libasan.so),)
SAN_PRELOAD += $(if $(findstring thread,$(SAN)),$(shell $(CC) -print-file-name=libtsan.so),)
export GC_SAN_PRELOAD := $(strip $(SAN_PRELOAD))

# Unit tests of shim pieces that need no CUDA: link those objects directly.
SHIM_UNIT_OBJ := $(BUILD)/obj/shim/options.o $(BUILD)/obj/shim/log.o
# The stream registry alone (its logging, tracing, options and order points stubbed in the test).
$(BUILD)/tests/test_streams_mt: tests/unit/test_streams_mt.c $(BUILD)/obj/shim/order/streams.o $(BUILD)/obj/shim/record/counts.o shim/order/streams.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(INC) $(CUDA_INC) -o $@ $< $(BUILD)/obj/shim/order/streams.o $(BUILD)/obj/shim/record/counts.o $(LDFLAGS) $(CMOCKA_LIBS)

$(BUILD)/tests/test_options: tests/unit/test_options.c $(SHIM_UNIT_OBJ) $(CORE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(INC) -o $@ $< $(SHIM_UNIT_OBJ) $(CORE_LIB) $(LDFLAGS) $(CMOCKA_LIBS) -lm

# A test-only shim that reuses freed blocks at once (never installed): the reuse-safety
# tests must fail against it, which proves they can.
UNSAFE_LIB := $(BUILD)/test-unsafe/libgpucache.so
TEST_PROGRAMS += $(UNSAFE_LIB)
UNSAFE_SRC := runtime/runtime driver/driver_mem driver/vmm_cache
$(BUILD)/test-unsafe/%.o: shim/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DGC_TEST_UNSAFE_REUSE -fvisibility=hidden $(INC) $(CUDA_INC) -MMD -MP -c $< -o $@
$(UNSAFE_LIB): $(CORE_OBJ) $(filter-out $(UNSAFE_SRC:%=$(BUILD)/obj/shim/%.o),$(SHIM_OBJ)) $(UNSAFE_SRC:%=$(BUILD)/test-unsafe/%.o) shim/exports.map
	$(CC) -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -o $@ $(filter %.o,$^) $(LDFLAGS) -ldl

# A test-only shim that fences during graph captures (the capture guard always says yes, the
# pool is never quiet): the capture tests must fail against it, which proves they can.
FENCE_CAPTURE_LIB := $(BUILD)/test-fence-capture/libgpucache.so
TEST_PROGRAMS += $(FENCE_CAPTURE_LIB)
# Its fences record on every stream, idle or not, so that each case is one a fence can break.
FENCE_CAPTURE_SRC := order/capture order/backend_cuda
$(BUILD)/test-fence-capture/%.o: shim/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DGC_TEST_FENCE_IN_CAPTURE -fvisibility=hidden $(INC) $(CUDA_INC) -MMD -MP -c $< -o $@
$(FENCE_CAPTURE_LIB): $(CORE_OBJ) $(filter-out $(FENCE_CAPTURE_SRC:%=$(BUILD)/obj/shim/%.o),$(SHIM_OBJ)) $(FENCE_CAPTURE_SRC:%=$(BUILD)/test-fence-capture/%.o) shim/exports.map
	$(CC) -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -o $@ $(filter %.o,$^) $(LDFLAGS) -ldl

# dladdr names only exported symbols: the leak program exports its own.
$(BUILD)/programs/prog_leak: tests/programs/prog_leak.c tests/programs/prog.h $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -rdynamic -o $@ $< -L$(BUILD)/fake -lcudart \
	  -Wl,-rpath,$(abspath $(BUILD)/fake) $(LDFLAGS)

# Driver-API programs link the fake's libcuda.so (the same library as its libcudart).
$(BUILD)/programs/prog_devices $(BUILD)/programs/prog_driver $(BUILD)/programs/prog_graphs $(BUILD)/programs/prog_nvtx $(BUILD)/programs/prog_vmm: $(BUILD)/programs/%: tests/programs/%.c tests/programs/prog.h $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -o $@ $< -L$(BUILD)/fake -lcuda -lcudart \
	  -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags $(LDFLAGS)

# Two libraries defining one function, the first wrapping the next (dlsym(RTLD_NEXT)).
$(BUILD)/programs/lib_next_%.so: tests/programs/lib_next_%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -o $@ $< $(LDFLAGS) -ldl
$(BUILD)/programs/prog_dlnext: tests/programs/prog_dlnext.c $(BUILD)/programs/lib_next_a.so $(BUILD)/programs/lib_next_b.so
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< -L$(BUILD)/programs -Wl,--no-as-needed -l:lib_next_a.so -l:lib_next_b.so -Wl,--as-needed \
	  -Wl,-rpath,$(abspath $(BUILD)/programs) $(LDFLAGS) -ldl -lm
# Stand-ins for the libraries of frameworks with allocators of their own (issue 35), named
# and placed as pip installs them; prog_frameworks dlopens them from site-packages/ beside it.
STAND_DIR := $(BUILD)/programs/site-packages
STAND_LIBS := $(STAND_DIR)/torch/lib/libtorch_cuda.so \
  $(STAND_DIR)/cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so \
  $(STAND_DIR)/jaxlib/xla_extension.so
TEST_PROGRAMS += $(STAND_LIBS)
$(STAND_DIR)/torch/lib/libtorch_cuda.so: tests/programs/lib_stand_torch.c
$(STAND_DIR)/cupy_backends/cuda/api/runtime.cpython-311-x86_64-linux-gnu.so: tests/programs/lib_stand_cupy.c
$(STAND_DIR)/jaxlib/xla_extension.so: tests/programs/lib_stand_xla.c
$(STAND_LIBS): tests/programs/lib_stand_vmm.h $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -shared -o $@ $(filter %.c,$^) -L$(BUILD)/fake -lcuda -lcudart \
	  -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags $(LDFLAGS)
$(BUILD)/programs/prog_frameworks: tests/programs/prog_frameworks.c tests/programs/prog.h $(FAKE_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -o $@ $< -L$(BUILD)/fake -lcuda -lcudart \
	  -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags $(LDFLAGS) -ldl

# A fake libcupti.so.13 and a fake libnvidia-ml.so.1 for the CUPTI ledger and the NVML
# reconciliation (tests/integration/test_cupti.c); never installed.
FAKE_CUPTI_LIB := $(BUILD)/fake-cupti/libcupti.so.13
FAKE_NVML_LIB := $(BUILD)/fake-nvml/libnvidia-ml.so.1
TEST_PROGRAMS += $(FAKE_CUPTI_LIB) $(FAKE_NVML_LIB)
$(FAKE_CUPTI_LIB): tests/fake-cupti/fake_cupti.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -shared -Wl,-soname,libcupti.so.13 -o $@ $< $(LDFLAGS)
$(FAKE_NVML_LIB): tests/fake-nvml/fake_nvml.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $< $(LDFLAGS)

# A fake NVTX tool (what compute-sanitizer injects) for the sanitizer mode's tests
# (tests/integration/test_nvtx.c): loaded by NVTX from NVTX_INJECTION64_PATH; never installed.
FAKE_NVTX_LIB := $(BUILD)/fake-nvtx/libfakenvtx.so
TEST_PROGRAMS += $(FAKE_NVTX_LIB)
$(FAKE_NVTX_LIB): tests/fake-nvtx/fake_nvtx.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -DNVTX_NO_IMPL -fvisibility=hidden -shared -o $@ $< $(LDFLAGS)

# The corpus traces replayed against the pool: a guard on fragmentation and pending memory.
TEST_PROGRAMS += $(BUILD)/bench/replay
TEST_BINS += tests/replay/check.sh
# Several arenas, expandable against classic segments: a guard on pages moving between arenas.
TEST_PROGRAMS += $(BUILD)/bench/arenas
TEST_BINS += tests/replay/arenas.sh
