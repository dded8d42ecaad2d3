# tpk — build, test, benchmark.
#
#   make deps        install what is missing (Debian packages, Python packages); safe to rerun
#   make             build/libtpk.a, build/libtpk.so, build/tpk, and the Python
#                    package's extensions, python/tpk/_C*.so (linked to build/libtpk.so)
#                    and, with torch installed, the tpk device's python/tpk/_torch_device*.so
#   make test        every test (C unit tests, golden diagnostics, tutorials, the
#                    standard kernels against NumPy and PyTorch, the Python package)
#   make test-asan   the C tests under AddressSanitizer + UBSan
#   make test-tsan   the C tests that run threads, under ThreadSanitizer
#   make bench       benchmarks -> bench/results.json and bench/RESULTS.md
#   make fuzz        the frontend fuzzer (FUZZ_SECONDS=60 by default)
#
# BUILD selects the output folder, so several builds (plain, asan, fuzz) live
# side by side.

# `make deps all demo` on a new machine: what deps installs (libtcc's archive
# above all) is looked for when this file is read, so the goals after deps
# are made by a new make, which reads it again once they are installed.
ifneq ($(filter deps,$(MAKECMDGOALS)),)
ifneq ($(filter-out deps,$(MAKECMDGOALS)),)
AFTER_DEPS := $(filter-out deps,$(MAKECMDGOALS))
endif
endif

ifdef AFTER_DEPS
.PHONY: $(MAKECMDGOALS)
$(firstword $(MAKECMDGOALS)):
	@sh tools/deps.sh
	@$(MAKE) --no-print-directory $(AFTER_DEPS)
$(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS)):
	@:
else

BUILD ?= build
CC ?= cc
OPT ?= -O2
SANITIZE ?=
# The standard kernels are generated code, sanitized like the rest unless
# a sanitizer cannot run them (test-tsan).
STD_SANITIZE ?= $(SANITIZE)
PYTHON ?= python3

CPPFLAGS := -Iinclude -I. -I$(BUILD) -D_POSIX_C_SOURCE=200809L
CFLAGS := -std=c11 -g $(OPT) -fPIC -Wall -Wextra -Werror -Wshadow -Wno-missing-field-initializers $(SANITIZE)
# re2c and lemon output is generated; lemon's template trips a few warnings.
GEN_CFLAGS := $(filter-out -Wshadow,$(CFLAGS)) -Wno-unused-parameter -Wno-unused-variable \
	-Wno-unused-but-set-variable -Wno-implicit-fallthrough -Wno-sign-compare
LDFLAGS += $(SANITIZE)
# host/jit.c links libtcc statically; libtcc needs -ldl.
LDLIBS := -ltcc -ldl -lm -lpthread
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
# libtcc's own folder (include/, libtcc1.a), from the tcc package.
TCC_LIB_PATH ?= $(patsubst %/libtcc1.a,%,$(firstword $(wildcard /usr/lib/$(MULTIARCH)/tcc/libtcc1.a \
	/usr/lib/tcc/libtcc1.a /usr/local/lib/tcc/libtcc1.a /usr/lib64/tcc/libtcc1.a)))
LIBTCC_A ?= $(firstword $(wildcard /usr/lib/$(MULTIARCH)/libtcc.a /usr/lib/libtcc.a /usr/local/lib/libtcc.a \
	/usr/lib64/libtcc.a))

MODULES := base ir dsl lower host interp sim runtime
LIB_SRC := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
GEN_SRC := $(BUILD)/dsl/lexer.c $(BUILD)/dsl/grammar.c
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC)) $(GEN_SRC:.c=.o) $(BUILD)/host/prims_h.o $(BUILD)/host/build_id.o
# The standard kernel library, compiled ahead of time (host/std.h): one C
# file per kernels/*.tpk, written by kernels/aot.c, plus the registry.
STD_TPK := $(sort $(wildcard kernels/*.tpk))
STD_GEN := $(patsubst kernels/%.tpk,$(BUILD)/kernels/%.c,$(STD_TPK)) $(BUILD)/kernels/registry.c
STD_OBJ := $(STD_GEN:.c=.o)
# The list of standard files, rewritten only when it changes, so that adding
# or removing a kernel file rebuilds the registry and the library.
STD_LIST := $(BUILD)/kernels/files
$(shell mkdir -p $(BUILD)/kernels && (echo '$(STD_TPK)' | cmp -s - $(STD_LIST) || echo '$(STD_TPK)' > $(STD_LIST)))
CLI_SRC := $(wildcard cli/*.c)
CLI_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(CLI_SRC))
TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_SUPPORT := $(BUILD)/tests/support.o
# The Python package's extension, built for this Python ($(PYTHON)).
PY_INCLUDE := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
PY_EXT_SUFFIX := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
PY_EXT := $(if $(PY_EXT_SUFFIX),python/tpk/_C$(PY_EXT_SUFFIX))
# The tpk PyTorch device's C++ shim, when torch is installed (found without
# importing it: the flags come from torch once, see below).
TORCH_DIR := $(shell $(PYTHON) -c "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')" 2>/dev/null)
DEVICE_EXT := $(if $(and $(TORCH_DIR),$(PY_EXT_SUFFIX)),python/tpk/_torch_device$(PY_EXT_SUFFIX))

.PHONY: all deps test test-asan test-tsan test-c bench fuzz clean
all: $(BUILD)/libtpk.a $(BUILD)/libtpk.so $(BUILD)/tpk $(PY_EXT) $(DEVICE_EXT)

deps:
	@sh tools/deps.sh

# ---- generated sources ----
# One lemon run makes both (a grouped target: -j never runs it twice at
# once, one run truncating the grammar.c another is compiling); lemon leaves
# an unchanged grammar.h alone, so touch it, or every make would run it again.
$(BUILD)/dsl/grammar.c $(BUILD)/dsl/grammar.h &: dsl/grammar.y
	@mkdir -p $(BUILD)/dsl
	lemon -q -T/usr/share/lemon/lempar.c -d$(BUILD)/dsl dsl/grammar.y
	@touch $(BUILD)/dsl/grammar.h
$(BUILD)/dsl/lexer.c: dsl/lexer.re $(BUILD)/dsl/grammar.h
	@mkdir -p $(BUILD)/dsl
	re2c -W --no-generation-date -o $@ dsl/lexer.re

# host/prims.h as a C string, the header the JIT gives generated code
# (escapes \ " and ?, the last against trigraphs).
$(BUILD)/host/prims_h.c: host/prims.h
	@mkdir -p $(dir $@)
	{ echo '/* generated from host/prims.h by the Makefile */'; \
	  echo 'extern const char tpk_jit_prims_h[];'; echo 'const char tpk_jit_prims_h[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@
$(BUILD)/host/prims_h.o: $(BUILD)/host/prims_h.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
# tpk's build (host/jit.h, tpk_build_id): a hash of the library's sources,
# which decide the code and units the disk cache keeps by structural key.
# Rewritten only when it changes.
LIB_HDR := $(foreach m,$(MODULES),$(wildcard $(m)/*.h)) include/tpk.h dsl/grammar.y dsl/lexer.re
$(BUILD)/host/build_id.c: $(LIB_SRC) $(LIB_HDR)
	@mkdir -p $(dir $@)
	@{ echo '/* generated by the Makefile: a hash of the library sources */'; \
	  echo 'extern const char tpk_build_id[];'; \
	  echo "const char tpk_build_id[] = \"$$(cat $(sort $^) | sha256sum | cut -c1-64)\";"; } > $@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@
$(BUILD)/host/build_id.o: $(BUILD)/host/build_id.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/host/jit.o: CPPFLAGS += $(if $(TCC_LIB_PATH),-DTPK_TCC_LIB_PATH='"$(TCC_LIB_PATH)"')

$(GEN_SRC:.c=.o): %.o: %.c
	$(CC) $(CPPFLAGS) $(GEN_CFLAGS) -MMD -MP -c $< -o $@

# Everything in dsl/ may include the token codes lemon generates.
$(BUILD)/dsl/%.o: dsl/%.c | $(BUILD)/dsl/grammar.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@
# The primitive library is the hot path of generated kernels: -O3 there,
# whatever OPT says (the later -O3 on the command line wins).
$(BUILD)/host/gemm.o $(BUILD)/host/prims.o: CFLAGS += -O3

# ---- the standard kernels, ahead of time ----
# The compiler core (everything but the standard kernels) links the build's
# kernel compiler, kernels/aot.c, which has no kernels of its own yet.
$(BUILD)/libtpk_core.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/kernels/aot: kernels/aot.c $(BUILD)/kernels/registry_none.o $(BUILD)/libtpk_core.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/kernels/registry_none.o $(BUILD)/libtpk_core.a $(LDFLAGS) $(LDLIBS)
$(BUILD)/kernels/%.c: kernels/%.tpk kernels/tuned.tsv $(BUILD)/kernels/aot
	$(BUILD)/kernels/aot c kernels/tuned.tsv $< $@
$(BUILD)/kernels/registry.c: $(STD_TPK) $(STD_LIST) kernels/tuned.tsv $(BUILD)/kernels/aot
	$(BUILD)/kernels/aot registry kernels/tuned.tsv $@ $(STD_TPK)
$(BUILD)/kernels/tpk_prims.h: host/prims.h
	@mkdir -p $(dir $@)
	cp $< $@
# Generated code: the JIT's cc-tier flags (-ffp-contract=off keeps the bits
# of every tier equal), without -Werror: its helpers are not all used.
$(STD_OBJ): %.o: %.c $(BUILD)/kernels/tpk_prims.h
	$(CC) $(CPPFLAGS) -I$(BUILD)/kernels -std=c11 -g -O3 -fPIC -ffp-contract=off -fno-math-errno $(STD_SANITIZE) -w -c $< -o $@

# ---- library and command line ----
$(BUILD)/libtpk.a: $(LIB_OBJ) $(STD_OBJ) $(STD_LIST)
	@rm -f $@
	ar rcs $@ $(LIB_OBJ) $(STD_OBJ)
# Debian ships libtcc only as a static, non-PIC archive whose references to
# libc's stdout, stderr and environ a shared object cannot hold. libtpk.so
# links a copy that refers to hidden stand-ins in host/jit.c instead, with
# libtcc's symbols kept local to libtpk.so (--exclude-libs).
$(BUILD)/tcc/libtcc_local.a: $(LIBTCC_A)
	@rm -rf $(BUILD)/tcc && mkdir -p $(BUILD)/tcc
	cd $(BUILD)/tcc && ar x $(abspath $<) && for o in *.o; do objcopy --redefine-sym stdout=tpk_tcc_stdout \
		--redefine-sym stderr=tpk_tcc_stderr --redefine-sym environ=tpk_tcc_environ $$o || exit 1; done && \
		ar rcs libtcc_local.a *.o
$(BUILD)/libtpk.so: $(LIB_OBJ) $(STD_OBJ) $(STD_LIST) $(BUILD)/tcc/libtcc_local.a
	$(CC) -shared $(LDFLAGS) -o $@ $(LIB_OBJ) $(STD_OBJ) -Wl,--exclude-libs,libtcc_local.a $(BUILD)/tcc/libtcc_local.a \
		$(filter-out -ltcc,$(LDLIBS))
$(BUILD)/tpk: $(CLI_OBJ) $(BUILD)/libtpk.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libtpk.a $(LDLIBS)

# ---- the Python package's extension (python/tpk/_C.c) ----
# Compiled against this Python's headers and linked to $(BUILD)/libtpk.so
# with an rpath, so `import tpk` loads the library the C tests use. It sits
# in the source tree, where `pip install -e python` finds it.
$(BUILD)/python/_C.o: python/tpk/_C.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -I$(PY_INCLUDE) $(CFLAGS) -fvisibility=hidden -MMD -MP -c $< -o $@
$(PY_EXT): $(BUILD)/python/_C.o $(BUILD)/libtpk.so
	$(CC) -shared $(LDFLAGS) -o $@ $< -L$(abspath $(BUILD)) -ltpk -Wl,-rpath,$(abspath $(BUILD))

# ---- the tpk PyTorch device's shim (python/tpk/_torch_device.cpp) ----
# C++ against torch's headers, with the flags torch.utils.cpp_extension
# gives (python/torch_ext_flags.py: asked once, again when torch changes),
# linked to libtorch and $(BUILD)/libtpk.so like _C: built here, never by a
# JIT load() at import.
$(BUILD)/python/torch_flags: python/torch_ext_flags.py $(TORCH_DIR)/version.py
	@mkdir -p $(dir $@)
	$(PYTHON) python/torch_ext_flags.py > $@
$(BUILD)/python/_torch_device.o: python/tpk/_torch_device.cpp include/tpk.h $(BUILD)/python/torch_flags
	$(CXX) -Iinclude $$(sed -n 1p $(BUILD)/python/torch_flags) -g $(OPT) -fPIC -Wall -Wextra -Werror -Wno-missing-field-initializers -fvisibility=hidden \
		-MMD -MP -c $< -o $@
$(DEVICE_EXT): $(BUILD)/python/_torch_device.o $(BUILD)/libtpk.so
	$(CXX) -shared $(LDFLAGS) -o $@ $< -L$(abspath $(BUILD)) -ltpk -Wl,-rpath,$(abspath $(BUILD)) \
		$$(sed -n 2p $(BUILD)/python/torch_flags)

# ---- tests ----
$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT) $(BUILD)/libtpk.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -o $@ $< $(TEST_SUPPORT) $(BUILD)/libtpk.a -lcmocka $(LDFLAGS) $(LDLIBS)
# Runs bench_host --check-threads: the benchmark's one-thread rows are one thread.
$(BUILD)/tests/bench/test_bench_host: $(BUILD)/bench/bench_host
# Counts every parse of .tpk text the library does (a program is checked once).
$(BUILD)/tests/runtime/test_specialise: LDFLAGS += -Wl,--wrap=tpk_parse
$(TEST_SUPPORT): tests/support.c tests/support.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -c $< -o $@

test-c: $(TEST_BIN) $(BUILD)/tpk $(BUILD)/libtpk.so
	@sh tools/check-layout.sh
	@sh tools/run-tests.sh $(BUILD) $(TEST_BIN)

test: test-c $(PY_EXT) $(DEVICE_EXT)
	@sh tools/run-tutorials.sh $(BUILD)
	@echo "standard kernels against NumPy and PyTorch (tests/std):"
	@TPK_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -p no:cacheprovider tests/std
	@echo "the Python package (tests/python):"
	@TPK_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -p no:cacheprovider tests/python

test-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan OPT="-O1 -fno-omit-frame-pointer" \
		SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all" test-c

# The tests that run threads, under ThreadSanitizer, in build/tsan: whole
# binaries, and test_host's tests of queues and the host's thread pool
# (TPK_TESTS picks tests of a binary). The standard kernels are left
# uninstrumented, like the code the JIT compiles: they pick their variant
# (avx2 or not) in ifunc resolvers, which run before TSan's runtime is up.
# TSan does not see what uninstrumented code (libtcc, compiled kernels)
# does, so it cannot report it; tools/tsan.supp says why each of its
# entries is there. Any other report is a race to fix.
TSAN_BUILD := build/tsan
TSAN_TESTS := runtime/test_concurrency runtime/test_lifetimes runtime/test_eager runtime/test_units host/test_jit
TSAN_HOST_TESTS := test_queue_order test_errors_from_worker_parts test_whole_kernels_with_threads \
	test_launch_in_forked_child test_thread_counts_agree_bitwise
TSAN_ENV := TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(abspath tools/tsan.supp)"
test-tsan:
	@$(MAKE) --no-print-directory BUILD=$(TSAN_BUILD) OPT=-O2 SANITIZE=-fsanitize=thread STD_SANITIZE= \
		$(addprefix $(TSAN_BUILD)/tests/,$(TSAN_TESTS) runtime/test_host) $(TSAN_BUILD)/libtpk.so
	@$(TSAN_ENV) sh tools/run-tests.sh $(TSAN_BUILD) $(addprefix $(TSAN_BUILD)/tests/,$(TSAN_TESTS))
	@$(TSAN_ENV) TPK_TESTS="$(TSAN_HOST_TESTS)" sh tools/run-tests.sh $(TSAN_BUILD) $(TSAN_BUILD)/tests/runtime/test_host

# ---- demo: the language contract's six examples, checked, then standard kernels run ----
.PHONY: demo corpus-check
DEMO_KERNELS := $(addprefix tests/corpus/,add.tpk softmax.tpk matmul.tpk layernorm.tpk \
	flash_attention.tpk embedding_bwd.tpk)
# The main job: check the language's example kernels, then run standard
# kernels (compiled ahead of time: nothing to compile) on the host and one on
# a simulated v5e, each checked against the reference interpreter and timed.
demo: $(BUILD)/tpk
	@echo "== tpk check: the six example kernels of the language contract"
	@$(BUILD)/tpk check $(DEMO_KERNELS)
	@echo "== standard kernels on the host, checked against the reference interpreter"
	@$(BUILD)/tpk run std:matmul.tpk -k matmul --shape M=1000,N=512,K=768 --check
	@$(BUILD)/tpk run std:softmax.tpk -k softmax --shape M=4096,N=1000 --check
	@$(BUILD)/tpk run std:attention.tpk -k flash_attention --shape B=1,H=4,HKV=2,S=500,T=500,D=64 \
		--scalar scale=0.125 --check
	@echo "== on a simulated TPU v5e: the same results, and the time the chip would take"
	@$(BUILD)/tpk run std:matmul.tpk -k matmul_bf16 --shape M=2048,N=2048,K=2048 --device sim:v5e --check --repeat 3

# Every kernel of the test corpus must check clean.
corpus-check: $(BUILD)/tpk
	@$(BUILD)/tpk check -q tests/corpus/*.tpk && echo "corpus: every tests/corpus/*.tpk checks clean"

# ---- benchmarks ----
bench: all
	@$(MAKE) --no-print-directory $(BUILD)/bench/bench_frontend $(BUILD)/bench/bench_gemm $(BUILD)/bench/bench_host \
		$(BUILD)/bench/bench_sim $(BUILD)/bench/bench_eager
	@$(PYTHON) bench/run.py --build $(BUILD)
$(BUILD)/bench/%: bench/%.c $(BUILD)/libtpk.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -O2 -o $@ $< $(BUILD)/libtpk.a $(LDFLAGS) $(LDLIBS)
# bench_gemm measures against OpenBLAS (libopenblas-dev, see tools/deps.sh).
$(BUILD)/bench/bench_gemm: LDLIBS += -lopenblas
$(BUILD)/bench/bench_host: LDLIBS += -lopenblas
# bench_eager replays the recorded op streams with the command's replayer.
$(BUILD)/bench/bench_eager: $(BUILD)/cli/opstream.o
$(BUILD)/bench/bench_eager: LDLIBS := $(BUILD)/cli/opstream.o $(LDLIBS)

# ---- fuzzing (clang's libFuzzer) ----
FUZZ_SECONDS ?= 60
FUZZ_BUILD := build/fuzz
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 -fno-omit-frame-pointer" \
		SANITIZE="-fsanitize=fuzzer-no-link,address,undefined" $(FUZZ_BUILD)/libtpk.a
	clang -std=c11 -g -O1 -Iinclude -I. -fsanitize=fuzzer,address,undefined \
		-o $(FUZZ_BUILD)/fuzz_frontend tests/fuzz/fuzz_frontend.c $(FUZZ_BUILD)/libtpk.a -lm -lpthread
	@mkdir -p $(FUZZ_BUILD)/corpus
	$(FUZZ_BUILD)/fuzz_frontend -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=5 -rss_limit_mb=2048 \
		-dict=tests/fuzz/tpk.dict $(FUZZ_BUILD)/corpus tests/fuzz/corpus

clean:
	rm -rf $(BUILD) $(PY_EXT) $(DEVICE_EXT)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

endif
