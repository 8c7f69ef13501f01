# zkresp — build, run, test, bench.
#
#   make run     install what is missing, build, start a local ZooKeeper (unless
#                ZKRESP_ZK is set) and zkresp on 127.0.0.1:6379
#   make test    install what is missing, build, run every suite
#   make bench   the performance report (not a test)

CC       ?= cc
BUILD    := build
PKGS     := lua5.4 hiredis libuv
CFLAGS   ?= -O2 -g
WARN     := -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-zero-length
CPPFLAGS := -D_GNU_SOURCE -Isidecar -Igateway $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lzookeeper_mt -lm -lpthread

SRCS     := $(wildcard sidecar/*.c) $(wildcard gateway/*.c)
LIBSRCS  := $(filter-out gateway/main.c,$(SRCS))
OBJS     := $(SRCS:%.c=$(BUILD)/obj/%.o)
ASAN_OBJS:= $(SRCS:%.c=$(BUILD)/asan/%.o)
HDRS     := $(wildcard sidecar/*.h) $(wildcard gateway/*.h)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

UNIT_SRCS:= $(wildcard tests/unit/*.c)

.PHONY: all deps run test test-unit test-spec test-integration soak bench fuzz format format-check clean

all: $(BUILD)/zkresp

# Debian packages the build, the run and the tests need.  Installed only when
# missing, so `make test` on a prepared machine does not touch apt.
DEB_PKGS := build-essential pkg-config liblua5.4-dev lua5.4 lua-cjson libzookeeper-mt-dev \
            libhiredis-dev libuv1-dev lua-busted zookeeper redis-server \
            redis-tools python3-redis python3-pytest python3-kazoo clang-format \
            prometheus python3-yaml faketime stunnel4 openssl gdb
# stunnel4 and openssl: the TLS tunnel to ZooKeeper and its throwaway
# certificates (docker/tls/make-certs.sh, tests/integration/test_84_zk_tls.py);
# keytool comes with the JDK that zookeeper pulls in.
# kubectl (for `kubectl kustomize docker/k8s`): Debian's kubernetes-client,
# unless a kubectl is already installed (Google Cloud SDK's kubectl package
# owns /usr/bin/kubectl and the two cannot be installed together).
DEB_PKGS += $(if $(shell command -v kubectl 2>/dev/null),,kubernetes-client)

deps:
	@tests/lib/deps.sh $(DEB_PKGS)

$(BUILD)/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) $(CFLAGS) -c $< -o $@

$(BUILD)/asan/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(WARN) -O1 -g $(SAN) -c $< -o $@

$(BUILD)/zkresp: $(OBJS)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/zkresp-asan: $(ASAN_OBJS)
	$(CC) $(SAN) $^ -o $@ $(LDLIBS)

# The unit tests link only the pure modules they test.
UNIT_DEPS:= gateway/reply.c gateway/proto.c sidecar/buf.c sidecar/keyenc.c sidecar/lua_alloc.c sidecar/lua_pattern.c sidecar/log.c \
           sidecar/zk_queue.c sidecar/zk.c sidecar/zk_session.c sidecar/zk_group.c sidecar/zk_ahead.c sidecar/zk_log.c

$(BUILD)/unit: $(UNIT_SRCS) $(UNIT_DEPS) $(HDRS) $(wildcard tests/unit/*.h)
	@mkdir -p $(BUILD)
	$(CC) $(CPPFLAGS) -Itests/unit -DLUA_ALLOC_POOLED=1 $(WARN) -O1 -g $(SAN) $(UNIT_SRCS) $(UNIT_DEPS) -o $@ $(LDLIBS)

# The flags above come from pkg-config when the Makefile is read, which on a
# fresh machine is before `deps` has installed the libraries: the targets that
# install first build in a second make, which reads them again.
run: deps
	@$(MAKE) --no-print-directory $(BUILD)/zkresp
	@tests/lib/run-local.sh

test: deps
	@$(MAKE) --no-print-directory format-check $(BUILD)/zkresp $(BUILD)/zkresp-asan $(BUILD)/unit
	@tests/run.sh

test-unit: $(BUILD)/unit
	@$(BUILD)/unit

test-spec:
	@busted --helper=tests/spec/helper.lua -o TAP tests/spec

test-integration: $(BUILD)/zkresp
	@tests/run.sh integration

# The ensemble fault suite (tests/fault/test_90_ensemble.py), longer and
# repeated: every nemesis ZKRESP_SOAK_ROUNDS times (default 5), the workload
# around each fault ZKRESP_SOAK_SCALE times longer (default 2).  ZKRESP_BIN
# picks the build (build/zkresp-asan for the sanitizers).
soak: deps
	@$(MAKE) --no-print-directory $(BUILD)/zkresp $(BUILD)/zkresp-asan
	@rounds=$${ZKRESP_SOAK_ROUNDS:-5}; scale=$${ZKRESP_SOAK_SCALE:-2}; \
	ZKRESP_BIN=$${ZKRESP_BIN:-build/zkresp} ZKRESP_ENSEMBLE_ROUNDS=$$rounds ZKRESP_ENSEMBLE_SCALE=$$scale \
	ZKRESP_TEST_TIMEOUT=$$(( rounds * (scale * 15 + 25) + 120 )) \
	/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/fault/test_90_ensemble.py

bench: deps
	@$(MAKE) --no-print-directory $(BUILD)/zkresp
	@tests/bench/run.sh

FMT_SRCS := $(SRCS) $(HDRS) $(UNIT_SRCS) $(wildcard tests/unit/*.h) \
            $(wildcard tests/fuzz/*.c) $(wildcard tests/bench/*.c) $(wildcard tests/bench/*.h)

fuzz: $(BUILD)/zkresp-asan
	@tests/fuzz/run.sh

format:
	clang-format -i $(FMT_SRCS)

format-check:
	@clang-format --dry-run --Werror $(FMT_SRCS)

clean:
	rm -rf $(BUILD)
