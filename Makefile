# bertfill — build, test, benchmark.  See README.md.
#   make deps       install the Debian packages that building and using bertfill and
#                   make test's own suites need (apt-get; .ci/install-deps lists them)
#   make test-deps  the full test suite's peers too: Node.js, PHP, Chromium, dqlite, ...
#                   (.ci/install-test-deps; without them make test skips their suites)
#   make            build the loadable SQLite extension ./bertfill.so
#   make demo       build and run a demo query in the sqlite3 shell
#   make test       build everything and run the whole test suite
#   make install    bertfill.so and the shipped model with its card under PREFIX (DESTDIR for staging);
#   make dist       release tarballs, Python wheels (and the Datasette / sqlite-utils plugins) and npm
#                   packages in dist/ for x86-64 and (with the cross compiler) arm64
#   make uninstall  removes those files and the ones loads wrote next to the model
#                   (and says how to clean each user's cache: docs/settings.md)
#   make web        the fill-mask web service example (examples/web) on 127.0.0.1:$(PORT)
#   make asan       the C tests under AddressSanitizer + UBSan
#   make valgrind   the C tests under valgrind
#   make format     format the C sources with clang-format (.clang-format)
#   make bench / fuzz / soak / load   long runs, never part of `make test`
#   make bench-gemm  the matrix-product kernels alone, against oneDNN
#   make cluster    a three-node dqlite cluster with bertfill (examples/dqlite)

CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
OPT     ?= -O2 -march=x86-64-v2 -g
CFLAGS  += $(OPT) -std=c11 -D_GNU_SOURCE -fPIC -Wall -Wextra
LDLIBS  += -lutf8proc -ldl -lm -lpthread

# Two layers (ext/README.md).  The engine (ext/engine) never sees SQLite:
# ext/engine/no_sqlite comes first on its include path and holds a sqlite3.h
# and sqlite3ext.h that stop the build.  The SQLite layer (ext/sqlite) sees
# the engine's public headers.
ENGINE_INC := -Iext/engine/no_sqlite -Iext/engine
SQLITE_INC := -Iext/sqlite -Iext/engine
# The engine's kernels, one file per instruction set, are in ext/engine/kernels
# (kernels/kernels.h): built with the same flags as the rest (-march=x86-64-v2);
# the AVX2 and AVX-512 functions say their instruction set in a target attribute.
ENGINE_SRC := $(wildcard ext/engine/*.c ext/engine/kernels/*.c)
EXT_SRC    := $(wildcard ext/sqlite/*.c)
ENGINE_OBJ := $(patsubst ext/engine/%.c,$(BUILD)/obj/engine/%.o,$(ENGINE_SRC))
EXT_OBJ    := $(patsubst ext/sqlite/%.c,$(BUILD)/obj/sqlite/%.o,$(EXT_SRC))
ENGINE_HDR := $(wildcard ext/engine/*.h ext/engine/kernels/*.h)
HEADERS    := $(ENGINE_HDR) $(wildcard ext/sqlite/*.h)

# C test programs: every tests/c/*.c becomes $(BUILD)/tests/NAME.
TEST_SRC := $(wildcard tests/c/*.c)
TEST_BIN := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(TEST_SRC))

EXTENSION ?= bertfill.so

# The dqlite node (examples/dqlite) is built, and tested by make test, only
# where libdqlite-dev is installed; tests/cluster/t_cluster.sh skips without it.
HAVE_DQLITE  := $(shell $(CC) -E -include dqlite.h -x c /dev/null >/dev/null 2>&1 && echo 1)
CLUSTER_NODE := $(if $(HAVE_DQLITE),$(BUILD)/bfnode)

# make install: $(DESTDIR)$(PREFIX)/lib/bertfill.so and the shipped model in
# $(DESTDIR)$(PREFIX)/share/bertfill/bertfill-zh-tiny/ (the extension looks for
# it at ../share/bertfill/bertfill-zh-tiny from the directory it was loaded from),
# with its card, model/MODEL_CARD.md, in the model's directory: the card holds
# the attribution that the CC BY sources of its training texts require, so it
# travels with the weights wherever the directory is copied or packaged.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL_LIB   := $(DESTDIR)$(PREFIX)/lib
INSTALL_SHARE := $(DESTDIR)$(PREFIX)/share/bertfill
SHIPPED_MODEL := bertfill-zh-tiny
MODEL_CARD    := model/MODEL_CARD.md
# The model's files are those git tracks (in a copy without .git: the
# directory's files but the load files below).  A load writes files of this
# machine next to the weights: model.int8.safetensors (an int8 load),
# model.packed.safetensors (an fp32 load with AVX-512), model.bf16.safetensors
# (a bf16 load) and model.fingerprint
# (the weights' hash).  They are made again where they are needed: never
# installed, but removed by uninstall, with what an interrupted write of any
# leaves (NAME.tmp.PID.THREAD).
INT8_FILE     := model.int8.safetensors
PACKED_FILE   := model.packed.safetensors
BF16_FILE     := model.bf16.safetensors
FP_FILE       := model.fingerprint
LOAD_FILES    := $(INT8_FILE) $(PACKED_FILE) $(BF16_FILE) $(FP_FILE) $(INT8_FILE).tmp.* \
                 $(PACKED_FILE).tmp.* $(BF16_FILE).tmp.* $(FP_FILE).tmp.*
GIT           ?= git
MODEL_TRACKED := $(shell $(GIT) ls-files -- model/$(SHIPPED_MODEL) 2>/dev/null)
MODEL_FILES   := $(strip $(or $(MODEL_TRACKED),$(foreach f,$(wildcard model/$(SHIPPED_MODEL)/*),\
                   $(if $(filter $(INT8_FILE) $(PACKED_FILE) $(BF16_FILE) $(FP_FILE),$(notdir $(f)))$(findstring .tmp.,$(notdir $(f))),,$(f)))))
PORT ?= 8000

.PHONY: all deps test-deps demo test test-bins models install uninstall dist web asan valgrind bench \
        bench-gemm fuzz soak load format cluster clean
all: $(EXTENSION)

$(BUILD)/obj/engine/%.o: ext/engine/%.c $(ENGINE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ENGINE_INC) -c $< -o $@

$(BUILD)/obj/sqlite/%.o: ext/sqlite/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SQLITE_INC) -c $< -o $@

$(BUILD)/libbfengine.a: $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(EXTENSION): $(EXT_OBJ) $(BUILD)/libbfengine.a
	$(CC) $(CFLAGS) -shared -o $@ $(EXT_OBJ) $(BUILD)/libbfengine.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/c/%.c $(BUILD)/libbfengine.a $(HEADERS) tests/c/testlib.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ENGINE_INC) -Itests/c -o $@ $< $(BUILD)/libbfengine.a $(LDFLAGS) $(LDLIBS)

# C tests of the SQLite layer (tests/c/test_lru.c, test_batcher.c,
# test_machine_guard.c, test_errors.c, test_stats.c): they link the layer's
# objects (all but the entry point, as an archive) and SQLite.
SQLITE_TEST_BIN := $(BUILD)/tests/test_lru $(BUILD)/tests/test_batcher \
                   $(BUILD)/tests/test_machine_guard $(BUILD)/tests/test_errors \
                   $(BUILD)/tests/test_stats
$(BUILD)/libbfsqlite.a: $(filter-out %/entry.o,$(EXT_OBJ))
	@rm -f $@
	ar rcs $@ $^

$(SQLITE_TEST_BIN): $(BUILD)/tests/%: tests/c/%.c $(BUILD)/libbfsqlite.a $(BUILD)/libbfengine.a \
                    $(HEADERS) tests/c/testlib.h tests/c/test_sqlite.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SQLITE_INC) -Itests/c -o $@ $< $(BUILD)/libbfsqlite.a \
	  $(BUILD)/libbfengine.a $(LDFLAGS) -lsqlite3 $(LDLIBS)

test-bins: $(TEST_BIN)

# Small random models (Hugging Face layout) used by the tests.
models:
	@$(PYTHON) model/make_test_models.py $(BUILD)/models

# Debian packages (apt-get; sudo when not root), each script lists what it
# installs: deps for building and using bertfill (and make test's own
# suites), test-deps for the peers the full test suite also drives.
deps:
	@bash .ci/install-deps

test-deps: deps
	@bash .ci/install-test-deps

demo: all
	@bash sql/demo.sh

test: all test-bins models $(CLUSTER_NODE)
	@BUILD=$(BUILD) BERTFILL_EXT=./$(basename $(EXTENSION)) bash tests/run.sh

install: $(EXTENSION)
	install -d $(INSTALL_LIB) $(INSTALL_SHARE)/$(SHIPPED_MODEL)
	install -m 0755 $(EXTENSION) $(INSTALL_LIB)/bertfill.so
	install -m 0644 $(MODEL_FILES) $(MODEL_CARD) $(INSTALL_SHARE)/$(SHIPPED_MODEL)/

uninstall:
	rm -f $(INSTALL_LIB)/bertfill.so
	rm -f $(addprefix $(INSTALL_SHARE)/$(SHIPPED_MODEL)/,$(notdir $(MODEL_FILES) $(MODEL_CARD)) $(LOAD_FILES))
	rmdir $(INSTALL_SHARE)/$(SHIPPED_MODEL) $(INSTALL_SHARE) 2>/dev/null || true
	@echo "make uninstall: the files loads of a read-only model made in each user's cache stay;" \
	  "to remove them, each user runs: rm -rf \"\$${XDG_CACHE_HOME:-\$$HOME/.cache}/bertfill\"" \
	  "(or the BERTFILL_CACHE_DIR in use; docs/settings.md)"

# make dist (docs/dist.md): dist/bertfill-VERSION-linux-ARCH.tar.gz for
# x86_64 and, where Debian's cross compiler is installed (.ci/install-cross),
# aarch64; packaging/tarball.sh stages and checks each.  packaging/wheel.py
# then makes each tarball a wheel, bertfill-VERSION-py3-none-manylinux_2_N_ARCH.whl.  Each .so is built
# apart, in $(BUILD)/dist/ARCH, self-contained: utf8proc linked in (its
# static library, PIC), libgcc too, only the entry points exported
# (ext/sqlite/exports.map; --exclude-libs keeps the linked-in libraries'
# symbols local), no debug information; it needs only the C library.
# OpenBLAS stays loaded at run time when present (blas.c: never required).
# arm64 gets no -march=x86-64-v2 (dispatch.c then has only the portable set).
# packaging/plugins.py writes the plugin wheels datasette_bertfill- and
# sqlite_utils_bertfill-VERSION-py3-none-any.whl (a prepare_connection hook
# that calls bertfill.load; Requires-Dist bertfill==VERSION).
# packaging/npm.sh then packs the npm packages from the same .so files:
# bertfill-VERSION.tgz and bertfill-linux-{x64,arm64}-VERSION.tgz.
VERSION      := $(shell sed -n 's/^\#define BFX_VERSION "\(.*\)"/\1/p' ext/sqlite/version.h)
DIST         ?= dist
CROSS_ARM64  ?= aarch64-linux-gnu-
HAVE_ARM64   := $(shell command -v $(CROSS_ARM64)gcc >/dev/null 2>&1 && echo 1)
DIST_ARCHES  := x86_64 $(if $(HAVE_ARM64),aarch64)
DIST_LDFLAGS := -Wl,--version-script=ext/sqlite/exports.map -Wl,--exclude-libs,ALL -static-libgcc \
                -Wl,-z,defs
DIST_LDLIBS  := -l:libutf8proc.a -ldl -lm -lpthread
dist_cc_x86_64   := $(CC)
dist_opt_x86_64  := -O2 -march=x86-64-v2
dist_cc_aarch64  := $(CROSS_ARM64)gcc
dist_opt_aarch64 := -O2

dist:
	@$(if $(HAVE_ARM64),,echo "make dist: no $(CROSS_ARM64)gcc (bash .ci/install-cross): x86_64 only")
	@$(foreach a,$(DIST_ARCHES),\
	  $(MAKE) --no-print-directory BUILD=$(BUILD)/dist/$(a) EXTENSION=$(BUILD)/dist/$(a)/bertfill.so \
	    CC="$(dist_cc_$(a))" OPT="$(dist_opt_$(a))" LDFLAGS="$(DIST_LDFLAGS)" \
	    LDLIBS="$(DIST_LDLIBS)" $(BUILD)/dist/$(a)/bertfill.so && \
	  CC="$(dist_cc_$(a))" bash packaging/tarball.sh $(VERSION) $(a) $(BUILD)/dist/$(a)/bertfill.so \
	    $(DIST) $(MODEL_FILES) &&) true
	@# the Python wheel of each tarball (packaging/wheel.py: its tag is BUILDINFO's manylinux one)
	@$(foreach a,$(DIST_ARCHES),$(PYTHON) packaging/wheel.py $(DIST)/bertfill-$(VERSION)-linux-$(a).tar.gz $(DIST) &&) true
	@# the Datasette and sqlite-utils plugins (py3-none-any; they pin bertfill==VERSION)
	@$(PYTHON) packaging/plugins.py $(VERSION) $(DIST)
	@bash packaging/npm.sh $(VERSION) $(DIST) $(foreach a,$(DIST_ARCHES),$(a)=$(BUILD)/dist/$(a)/bertfill.so) -- $(MODEL_FILES)

# The /predict service and its WebUI (examples/web/README.md); Ctrl-C stops it.
web: all
	@bash tests/clients/node/install.sh
	node examples/web/server.js --port $(PORT)

asan:
	$(MAKE) BUILD=build/asan EXTENSION=build/asan/bertfill.so \
	  OPT="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test-bins models
	BUILD=build/asan BF_ONLY_C=1 ASAN_OPTIONS=detect_leaks=1 bash tests/run.sh

valgrind: test-bins models
	BUILD=$(BUILD) BF_ONLY_C=1 BF_WRAP="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite" bash tests/run.sh

# The C sources in the style of .clang-format (tests/project/t_format.sh checks the
# same files).
CLANG_FORMAT ?= clang-format
format:
	$(CLANG_FORMAT) -i $(shell find ext tests/c -name '*.[ch]' | LC_ALL=C sort)

bench: all
	@bash tests/bench/run.sh

# The kernels alone against oneDNN (tests/bench/bench_gemm.c): oneDNN only
# where libdnnl-dev is installed (apt-get install libdnnl-dev; not a
# dependency of bertfill).  BENCH_THREADS (2), BENCH_M, BENCH_REPS.
HAVE_DNNL := $(shell $(CC) -E -include oneapi/dnnl/dnnl.h -x c /dev/null >/dev/null 2>&1 && echo 1)
$(BUILD)/bench_gemm: tests/bench/bench_gemm.c $(BUILD)/libbfengine.a
	$(CC) $(CFLAGS) $(ENGINE_INC) $(if $(HAVE_DNNL),-DWITH_DNNL) -o $@ $< $(BUILD)/libbfengine.a \
	  $(if $(HAVE_DNNL),-ldnnl) $(LDFLAGS) $(LDLIBS)
bench-gemm: $(BUILD)/bench_gemm
	@$(if $(HAVE_DNNL),,echo "make bench-gemm: oneDNN is not installed (apt-get install libdnnl-dev): bertfill's kernels only";)
	OMP_NUM_THREADS=$${BENCH_THREADS:-2} $(BUILD)/bench_gemm

fuzz:
	@bash tests/fuzz/run.sh 60

soak: all
	@bash tests/soak/run.sh

load: all
	@bash tests/load/run.sh

# examples/dqlite: a dqlite node with bertfill in it ($(CLUSTER_NODE) above);
# `make cluster` starts three of them on 127.0.0.1 (examples/dqlite/stop.sh
# stops them).
$(BUILD)/bfnode: examples/dqlite/bfnode.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -ldqlite -lsqlite3 -ldl -lpthread

cluster: all $(CLUSTER_NODE)
ifeq ($(HAVE_DQLITE),1)
	@BFNODE=$(BUILD)/bfnode BF_EXTENSION=./$(EXTENSION) bash examples/dqlite/start.sh
else
	@echo "make cluster: skipped: libdqlite-dev is not installed (make test-deps installs it)"
endif

clean:
	rm -rf build $(EXTENSION) $(DIST)
