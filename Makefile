# rbscope: the two commands for a fresh machine are `make demo` and `make test`.
GO ?= go
BIN := bin/rbscope
# RUBY_BUILDS lists the Rubies of the test matrix as build-ruby.sh
# arguments, with a comma for a space: a shared debug build of each family,
# a static one whose malloc is jemalloc (--with-jemalloc), a stripped
# copy read through the built-in table, and builds on musl's C library
# (as Alpine's Rubies run). Beside them, Debian's own binary Ruby 3.4.11
# (experimental's ruby3.4, stripped as Debian ships it, read through the
# built-in 3.4 table) runs on sid's C library from a sysroot of its
# packages (scripts/debian-ruby-sysroot.sh): Debian serves no source of
# that release to build.
RUBY_BUILDS ?= 2.7 3.1 3.3 3.3,--static,--jemalloc 3.3,--stripped 3.4 3.4,--stripped 3.3,--musl 3.4,--musl

.PHONY: wasm all build deps demo-deps rubies demo test test-arm64 vet bench clean docs dist

all: build

# build stamps the commit itself, so that `rbscope version` names it even
# where GOFLAGS holds -buildvcs=false.
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
build:
	$(GO) build -ldflags "-X main.commit=$(COMMIT)" -o $(BIN) ./cmd/rbscope

# DEPS_PACKAGES are the Debian packages the demo and the tests need:
# Debian's Ruby (stripped, the Ruby most users run), gdb (the peer the
# benchmark compares with), tmux and valgrind (tests), util-linux's unshare,
# nsenter and setpriv (the container tests), jemalloc (preloaded under
# Rubies, as Rails' Dockerfile does), musl-gcc (musl programs and Rubies),
# and the servers the server tests run rbscope on: Puma, Unicorn, Sidekiq
# with Redis (ActiveJob's jobs on it too), and a Rails application
# (railties, ActiveRecord on SQLite, ActionPack) under ab's load
# (apache2-utils); man-db and bash-completion,
# which the test of the Debian package runs (man -w, the completion script);
# Chromium runs the browser tests of rbscope ui; Graphviz's dot draws the
# call graph of pprof's web interface, which rbscope ui mounts. The real
# applications the tests run (TestRedmine, TestRealCLIs): Debian's Redmine
# on SQLite (its debconf answers set first, below), Jekyll, and
# stackprof, the in-process profiler they are compared with; heapy, a
# reader of dump_all's format that rbscope's dumps must not break; Sinatra,
# whose routes the agent labels (TestAgentLabelsSinatra).
# qemu-user-static runs Debian's arm64 Ruby (its sysroot made by
# scripts/arm64-sysroot.sh) for the arm64 tests, and arm64 test binaries;
# qemu-system-x86, busybox-static and cpio boot Debian's cloud kernel
# (scripts/softdirty-kernel.sh), which keeps soft-dirty bits, for the heap
# snapshot's pre-copy test where the host's kernel keeps none.
DEPS_PACKAGES := ruby gdb tmux valgrind util-linux libjemalloc2 musl-tools \
	puma unicorn ruby-sidekiq redis-server ruby-activejob ruby-railties ruby-activerecord \
	ruby-actionpack ruby-sqlite3 apache2-utils man-db bash-completion chromium \
	graphviz redmine redmine-sqlite jekyll ruby-stackprof ruby-heapy ruby-sinatra \
	qemu-user-static qemu-system-x86 busybox-static cpio

# REDMINE_DEBCONF answers the redmine package's questions: SQLite, so that
# its installation needs no database server.
define REDMINE_DEBCONF
redmine redmine/instances/default/dbconfig-install boolean true
redmine redmine/instances/default/database-type select sqlite3
endef
export REDMINE_DEBCONF

# demo-deps installs only what the demo needs: Debian's Ruby (the build
# fetches the Go modules the binary links). A newcomer's first command
# should not wait for the test matrix's browsers, servers and sysroots;
# `make test` installs those (deps).
demo-deps:
	@dpkg -s ruby >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ruby >/dev/null; }

# deps installs the DEPS_PACKAGES that are missing.
deps:
	@missing=$$(for p in $(DEPS_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "$$REDMINE_DEBCONF" | debconf-set-selections; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@scripts/arm64-sysroot.sh >/dev/null
	@scripts/softdirty-kernel.sh >/dev/null
	$(GO) mod download

# rubies builds the Rubies the test matrix also runs on (RUBY_BUILDS); they
# are cached under $${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}, so only a
# fresh machine builds them (about 4 minutes each on 2 cores). Two build at
# once: a Ruby build leaves a core idle through its serial steps (configure,
# each extension's mkmf, install), which the other build fills. Then
# Debian's binary Ruby 3.4.11 and its libraries are fetched and unpacked
# into ruby-3.4.11-debian (about 10 s: 23 MB of indexes and packages;
# nothing is installed).
rubies:
	@echo $(RUBY_BUILDS) | tr ' ' '\n' | xargs -P 2 -I{} sh -c 'scripts/build-ruby.sh $$(echo {} | tr , " ") >/dev/null'
	@scripts/debian-ruby-sysroot.sh >/dev/null

# demo starts testdata/demo.rb and prints every thread's stack, read from
# outside.
demo:
	@$(MAKE) --no-print-directory -j2 demo-deps build
	@ruby testdata/demo.rb > /tmp/rbscope-demo.log 2>&1 & pid=$$!; \
	  trap 'kill $$pid 2>/dev/null' EXIT; sleep 1; \
	  echo "$$ $(BIN) stack -p $$pid"; $(BIN) stack -p $$pid

# docs writes the command reference, docs/reference/*.md and the man pages
# docs/man/*.1, from the cobra definitions; the test run by `make test`
# fails while they are stale.
docs:
	$(GO) test ./cmd/rbscope -run '^TestReferenceDocs$$' -count=1 -update-docs

# dist builds the release for linux/amd64 and linux/arm64 into dist/
# (tools/dist; the architectures are internal/arch.All): for each, a static
# binary in rbscope-VERSION-linux-ARCH.tar.gz with the man pages, the bash,
# zsh and fish completions, the agent's systemd unit and the documentation
# (README.md, docs/: the pages error messages name), and the Debian package
# rbscope_VERSION_ARCH.deb (the documentation under /usr/share/doc/rbscope).
# VERSION defaults to the tag vX.Y.Z at HEAD, else 0.0.0~gitDATE.COMMIT.
VERSION ?=
dist:
	$(GO) run ./tools/dist -o dist $(if $(VERSION),-version $(VERSION))

# vet vets the code as built for every architecture rbscope is released
# for (internal/arch.All).
vet:
	$(GO) vet ./...
	GOARCH=arm64 $(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# wasm fetches the npm packages of CRuby 3.2, 3.3, 3.4 and 4.0 for
# wasm32-wasi: the built-in 3.2 and 4.0 tables are made from their DWARF
# (tools/layoutgen's tests make them again and compare, and check the
# re-layout on 3.3 and 3.4 against the x86_64 debug builds).
wasm:
	@scripts/fetch-wasm.sh

# -timeout: the command package alone runs about twenty minutes on two busy
# cores, past go test's default.
# RBSCOPE_STRICT_TESTS makes a test fail, not skip, when something this
# target provides is missing (testruby.Missing).
# Packages are tested one at a time (-p 1): several tests measure timing
# (a known CPU split, thread births) and others start CPU-bound Ruby
# programs, and on two cores they must not run side by side.
# ARM64_TEST_PACKAGES are the packages whose tests need neither ptrace nor
# a Ruby of the host's architecture: test-arm64 runs them built for arm64
# under qemu-aarch64-static (about 40 s on two cores).
ARM64_TEST_PACKAGES := ./internal/arch ./internal/rubyvm/layout ./internal/profile \
	./internal/wire ./internal/textsafe ./internal/procfs ./internal/rawfile \
	./internal/output ./internal/libc ./internal/malloc

test: deps rubies wasm vet test-arm64
	RBSCOPE_STRICT_TESTS=1 $(GO) test -p 1 -count=1 -timeout 60m ./...

test-arm64:
	GOARCH=arm64 $(GO) test -exec qemu-aarch64-static -p 1 -count=1 $(ARM64_TEST_PACKAGES)

bench: deps build
	bench/stack.sh

clean:
	rm -rf bin dist
