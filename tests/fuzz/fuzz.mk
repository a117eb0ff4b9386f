# fuzz.mk — builds the fuzz targets of tests/fuzz/ (used by run.sh and
# tests/fuzz/t_fuzz_smoke.sh; run from the repository root):
#   make -f tests/fuzz/fuzz.mk libfuzzer   clang -fsanitize=fuzzer,address,undefined
#                                          -> $(BUILD)/fuzz/clang/fuzz_NAME
#   make -f tests/fuzz/fuzz.mk replay      gcc -fsanitize=address,undefined + replay.c
#                                          -> $(BUILD)/fuzz/gcc/fuzz_NAME
# The engine and the SQLite layer (built as for the loadable extension, then
# linked into the program with the system libsqlite3 and registered with
# sqlite3_auto_extension) are compiled again with the sanitizers, once per
# compiler.
BUILD   ?= build
FB      := $(BUILD)/fuzz
TARGETS := tokenizer json model sql
SAN_CFLAGS := -O1 -g -march=x86-64-v2 -std=c11 -D_GNU_SOURCE -Iext/sqlite -Iext/engine -Itests/fuzz \
              -fno-omit-frame-pointer -Wall -Wno-unused-parameter -Wno-unused-function
LIBS    := -lsqlite3 -lutf8proc -ldl -lm -lpthread
CLANG   ?= clang
GCC     ?= gcc

ENG     := $(wildcard ext/engine/*.c ext/engine/kernels/*.c)
SRC     := $(ENG) $(wildcard ext/sqlite/*.c)
HDRS    := $(wildcard ext/engine/*.h ext/engine/kernels/*.h ext/sqlite/*.h) tests/fuzz/fuzz_common.h

# ext/engine/x.c -> obj/engine/x.o (ext/engine/kernels/x.c -> obj/engine/kernels/x.o),
# ext/sqlite/x.c -> obj/sqlite/x.o
clang_objs = $(patsubst ext/%.c,$(FB)/clang/obj/%.o,$(1))
gcc_objs   = $(patsubst ext/%.c,$(FB)/gcc/obj/%.o,$(1))
# which sources each target links
srcs_tokenizer := $(ENG)
srcs_json      := $(ENG)
srcs_model     := $(ENG)
srcs_sql       := $(SRC)

.PHONY: libfuzzer replay
libfuzzer: $(patsubst %,$(FB)/clang/fuzz_%,$(TARGETS))
replay: $(patsubst %,$(FB)/gcc/fuzz_%,$(TARGETS))

$(FB)/clang/obj/%.o: ext/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -c $< -o $@

# The kernels (ext/engine/kernels/) without clang's sanitizers: clang 14 took over 8 minutes to
# instrument the AVX512-VNNI register tiles of kernels/avx512.c (ASan + UBSan + coverage; a
# second without them).  The kernels run on shapes the loader has already checked; they are
# checked under gcc's ASan and UBSan (make asan, the replay build below) and valgrind.
$(FB)/clang/obj/engine/kernels/%.o: ext/engine/kernels/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_CFLAGS) -c $< -o $@

$(FB)/gcc/obj/%.o: ext/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(GCC) $(SAN_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined -c $< -o $@

.SECONDEXPANSION:
$(FB)/clang/fuzz_%: tests/fuzz/fuzz_%.c $$(call clang_objs,$$(srcs_$$*)) $(HDRS)
	$(CLANG) $(SAN_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -o $@ $< $(call clang_objs,$(srcs_$*)) $(LIBS)

$(FB)/gcc/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $$(call gcc_objs,$$(srcs_$$*)) $(HDRS)
	$(GCC) $(SAN_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	  -o $@ $< tests/fuzz/replay.c $(call gcc_objs,$(srcs_$*)) $(LIBS)
