# gpucache: a caching CUDA device-memory allocator you LD_PRELOAD into any program.
#   make            build/libgpucache.so
#   make test       unit + integration tests against the fake CUDA runtime (no GPU needed)
#   make check      the same under ASan+UBSan, and the threaded tests under TSan
#   make layers     the include edges between folders and the calls between files; fails on
#                   an include that reaches up or on a loop of calls not listed in tests/calls.sh
#   make demo       a sample CUDA program under the shim (real GPU if present, else fake)
#   make install    PREFIX=/usr/local DESTDIR=...  (install-cli: only the gpucache command)

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
DESTDIR   ?=
BUILD     ?= build
CC        ?= cc
NVCC      ?= $(CUDA_HOME)/bin/nvcc
SAN       ?=
OPT       ?= -O2
# Link-time optimisation of libgpucache.so: the interposed call crosses shim/, cache/ and
# report/ files, and inlining across them cuts a cudaMalloc+cudaFree pair by about a fifth
# (docs/BENCHMARKS.md). Fat objects keep libgc_core.a usable by the tests' plain links. Off in
# sanitizer builds; LTO= turns it off.
LTO       ?= $(if $(SAN),,-flto=auto -ffat-lto-objects)

CUDA_INC    := -I$(CUDA_HOME)/include
CMOCKA_LIBS := -lcmocka
SANFLAGS    := $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined,)
CFLAGS      := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(OPT) -g -fPIC -pthread $(SANFLAGS) $(EXTRA_CFLAGS)
LDFLAGS     := -pthread $(SANFLAGS) $(EXTRA_LDFLAGS)
INC         := -Iinclude -Icache -Icache/arena -Ireport -Ireport/render -Ireport/output -Ishim -Ishim/order -Ishim/runtime -Ishim/driver -Ishim/probe -Ishim/record

.DEFAULT_GOAL := all
.PHONY: all test check demo install install-cli clean format format-check fake gpu-test bench layers
.DELETE_ON_ERROR:

TEST_BINS      :=
TSAN_TEST_BINS :=
TEST_PROGRAMS  :=

# ---- the core: cache/ (no CUDA), report/, shim/ -------------------------------------
CORE_SRC  := $(wildcard cache/*.c cache/*/*.c report/*.c report/*/*.c)
SHIM_SRC  := $(wildcard shim/*.c shim/*/*.c)
CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
SHIM_OBJ  := $(SHIM_SRC:%.c=$(BUILD)/obj/%.o)
LIB       := $(BUILD)/libgpucache.so
CORE_LIB  := $(BUILD)/libgc_core.a

$(BUILD)/obj/cache/%.o: cache/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LTO) -fvisibility=hidden $(INC) -MMD -MP -c $< -o $@

$(BUILD)/obj/report/%.o: report/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LTO) -fvisibility=hidden $(INC) -MMD -MP -c $< -o $@

# shim/ is the only place that sees CUDA headers (for types and prototypes).
$(BUILD)/obj/shim/%.o: shim/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LTO) -fvisibility=hidden $(INC) $(CUDA_INC) -MMD -MP -c $< -o $@

$(CORE_LIB): $(CORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIB): $(CORE_OBJ) $(SHIM_OBJ) shim/exports.map
	$(CC) $(CFLAGS) $(LTO) -shared -Wl,--version-script=shim/exports.map -Wl,-z,defs -o $@ $(CORE_OBJ) $(SHIM_OBJ) $(LDFLAGS) -ldl

all: $(LIB)

# ---- tests ----------------------------------------------------------------------------
include tests/fake/fake.mk
-include tests/tests.mk

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TEST_BINS += $(UNIT_BIN)
TSAN_TEST_BINS += $(filter %_mt,$(UNIT_BIN))

$(BUILD)/tests/test_%: tests/unit/test_%.c $(CORE_LIB) $(wildcard tests/unit/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(INC) -Itests/unit -o $@ $< $(CORE_LIB) $(LDFLAGS) $(CMOCKA_LIBS) -lm

test: $(LIB) $(FAKE_LIB) $(TEST_PROGRAMS) $(TEST_BINS)
	tests/layers.sh
	tests/calls.sh $(BUILD)
	GC_BUILD=$(abspath $(BUILD)) tests/run-tests.sh $(TEST_BINS) unittest:tests/cli

# The include rules between layers and folders, and the loops of calls between files, read from
# the objects (docs/DESIGN.md, "Layout"); -v lists the edges and the calls inside each loop.
layers: $(CORE_OBJ) $(SHIM_OBJ)
	tests/layers.sh -v
	tests/calls.sh -v $(BUILD)

test-tsan: $(LIB) $(FAKE_LIB) $(TEST_PROGRAMS) $(TSAN_TEST_BINS)
	GC_BUILD=$(abspath $(BUILD)) tests/run-tests.sh $(TSAN_TEST_BINS)

check:
	$(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1 test
	$(MAKE) BUILD=build/tsan SAN=thread OPT=-O1 test-tsan

# ---- demo, GPU tests and benchmarks ----------------------------------------------------
-include tests/demo.mk
-include tests/gpu/gpu.mk
-include bench/bench.mk

# ---- install --------------------------------------------------------------------------
install: $(LIB) install-cli
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libgpucache.so
	install -m 0644 include/gpucache.h $(DESTDIR)$(PREFIX)/include/gpucache.h

# The gpucache command: bin/gpucache finds its package in ../lib/gpucache/ (scripts/gpucache).
CLI_DIR := $(DESTDIR)$(PREFIX)/lib/gpucache/gpucache_tool

install-cli:
	install -d $(DESTDIR)$(PREFIX)/bin $(CLI_DIR)
	install -m 0755 scripts/gpucache $(DESTDIR)$(PREFIX)/bin/gpucache
	install -m 0644 $(wildcard scripts/gpucache_tool/*.py) $(CLI_DIR)/

FORMAT_SRC := $(wildcard cache/*.[ch] cache/*/*.[ch] shim/*.[ch] shim/*/*.[ch] report/*.[ch] report/*/*.[ch] include/*.h tests/*/*.[ch] bench/*.c examples/*.c)

format:
	clang-format -i $(FORMAT_SRC)

format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/test-unsafe $(BUILD)/test-fence-capture -name '*.d' 2>/dev/null)
