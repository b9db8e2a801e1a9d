# tests/fake/fake.mk - the fake CUDA runtime and its self-test.
#
# $(FAKE_LIB) is a stand-in for libcudart.so.13 (same soname, same symbol version node)
# whose "device" is host memory and whose streams are worker threads. Test programs link
# it exactly as a CUDA program links libcudart:
#     -L$(BUILD)/fake -lcudart -Wl,-rpath,$(abspath $(BUILD)/fake)
# The test API is in tests/fake/fakecuda.h.
#
# The same library is the fake CUDA driver: $(FAKE_CUDA) (libcuda.so.1) and libcuda.so are
# symlinks to it, so the runtime's dlopen("libcuda.so.1") (cudart's way down to the driver,
# through cuGetProcAddress_v2) returns the already loaded object, and test programs may
# link -lcuda. Modelled: cuInit, devices, primary/created contexts with a per-thread
# stack, memory, pointer attributes, IPC, streams, events, capture, copies, VMM and
# cuGetProcAddress; not modelled: modules/kernels, arrays, memory-pool allocation, and a
# program linked -lcuda here records NEEDED libcudart.so.13, so it cannot run on a real
# libcuda (driver tests are for the fake only).
#
# Included by the top-level Makefile, which provides BUILD, CC, CFLAGS, LDFLAGS, CUDA_INC,
# CMOCKA_LIBS, TEST_BINS and TSAN_TEST_BINS.

FAKE_DIR   := tests/fake
FAKE_SRCS  := $(filter-out $(FAKE_DIR)/test_%.c,$(wildcard $(FAKE_DIR)/*.c))
FAKE_OBJS  := $(patsubst %.c,$(BUILD)/obj/%.o,$(FAKE_SRCS))
FAKE_HDRS  := $(wildcard $(FAKE_DIR)/*.h)
FAKE_MAP   := $(FAKE_DIR)/libcudart.map
FAKE_LIB   := $(BUILD)/fake/libcudart.so.13
FAKE_LINK  := $(BUILD)/fake/libcudart.so
FAKE_CUDA  := $(BUILD)/fake/libcuda.so.1
FAKE_CUDA_LINK := $(BUILD)/fake/libcuda.so
# How a test binary links against the fake. --disable-new-dtags makes the rpath a
# DT_RPATH, which wins over LD_LIBRARY_PATH: a CUDA install on that path cannot slip
# the real libcudart in.
FAKE_LDLIBS = -L$(BUILD)/fake -lcudart -Wl,-rpath,$(abspath $(BUILD)/fake) -Wl,--disable-new-dtags

# -fvisibility=hidden: only the CUDA API and fakecuda_* are exported (see fk_internal.h).
$(BUILD)/obj/$(FAKE_DIR)/%.o: $(FAKE_DIR)/%.c $(FAKE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUDA_INC) -I$(FAKE_DIR) -fvisibility=hidden -c $< -o $@

# -Bsymbolic as the real libcudart (DT_SYMBOLIC): calls inside the library never go
# through an LD_PRELOAD shim; the runtime's calls into the driver go through the table
# cuGetProcAddress_v2 filled instead, which a shim can answer. The DT_RPATH $ORIGIN lets
# that dlopen("libcuda.so.1") find the symlink next to the library first.
$(FAKE_LIB): $(FAKE_OBJS) $(FAKE_MAP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -Wl,-soname,libcudart.so.13 -Wl,--version-script=$(FAKE_MAP) \
	  -Wl,-Bsymbolic -Wl,-rpath,'$$ORIGIN' -Wl,--disable-new-dtags -o $@ $(FAKE_OBJS) \
	  $(LDFLAGS) -pthread -ldl
	ln -sf libcudart.so.13 $(FAKE_LINK)
	ln -sf libcudart.so.13 $(FAKE_CUDA)
	ln -sf libcudart.so.13 $(FAKE_CUDA_LINK)

$(FAKE_LINK) $(FAKE_CUDA) $(FAKE_CUDA_LINK): $(FAKE_LIB)
	ln -sf libcudart.so.13 $@

$(BUILD)/tests/test_fake: $(BUILD)/obj/$(FAKE_DIR)/test_fake.o $(FAKE_LIB) $(FAKE_LINK) $(FAKE_CUDA)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(FAKE_LDLIBS) $(LDFLAGS) $(CMOCKA_LIBS) -pthread

TEST_BINS      += $(BUILD)/tests/test_fake
TSAN_TEST_BINS += $(BUILD)/tests/test_fake
