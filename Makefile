# ccplab: `make demo` installs what is missing, builds the binaries the demo runs, and runs the
# default comparison; `make test` runs the whole test suite (CI: .ci/run).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
CARGO ?= cargo
# Debian packages the demo needs: iperf3 (flows), clang/llvm + bpftool + libelf/zlib (BPF build),
# iproute2 + ethtool (namespaces, veths, offloads). `make test` adds chromium (the headless check of
# the report page), which nothing else uses. All without recommends: those were most of the download.
APT_PACKAGES := iperf3 clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev pkg-config iproute2 ethtool
APT_COMMANDS := iperf3 clang llc bpftool pkg-config ip ss ethtool
APT_TEST_PACKAGES := chromium
APT_TEST_COMMANDS := chromium
APT_INSTALL := apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

.PHONY: demo test build build-demo deps deps-test deps-apt deps-apt-test deps-rust deps-python deps-python-test \
	test-rust test-python docs bench bytecode clean kmod-check kmod-src deps-kmod upstream-algs

# The demo's binaries build while the Python environment installs (neither needs the other);
# `ccplab demo` takes the host lock (it waits while another emulation holds it).
demo: deps-apt deps-rust
	$(MAKE) --no-print-directory -j2 build-demo deps-python
	$(MAKE) --no-print-directory bytecode
	$(VENV)/bin/ccplab demo

test: deps-test build upstream-algs docs test-rust test-python

# The documentation site, warnings as errors (a broken link or API reference fails it); the
# command-line reference runs the built binaries' --help. Output in target/site (mkdocs.yml).
docs: deps-python-test build
	$(PY) -m mkdocs build --strict --site-dir target/site

# The CCP project's own generic_cong_avoid (reno and cubic on portus 0.7) from crates.io, which the
# tests run through the runner as external algorithms (portus:NAME=COMMAND). Installed once into
# target/ (nothing outside the tree); the binary is the target, so a second `make test` skips it.
UPSTREAM_GCA := target/upstream-gca
UPSTREAM_GCA_VERSION := 0.4.0

upstream-algs: $(UPSTREAM_GCA)/bin/reno $(UPSTREAM_GCA)/bin/cubic

$(UPSTREAM_GCA)/bin/reno $(UPSTREAM_GCA)/bin/cubic &: | deps-rust
	$(CARGO) install generic_cong_avoid --version $(UPSTREAM_GCA_VERSION) --features bin --locked \
	    --root $(UPSTREAM_GCA)

# Real-flow tests take the host lock, so they never overlap another emulation
# (`ccp` registers once per host; concurrent emulations distort each other).
NETLAB_LOCK := flock /tmp/ccplab-netlab.lock

test-rust:
	$(NETLAB_LOCK) $(CARGO) test --release --workspace

test-python:
	$(NETLAB_LOCK) $(PY) -m pytest -v

build: deps
	$(CARGO) build --release --workspace

# Only what `ccplab demo` runs: the link, the trace tool, the datapath and the suite's one binary,
# and the link without its default `rattan` feature (the demo runs the link's direct path, which
# needs none of rattan-core's crates; `make build` builds it whole, and a later `make build` or
# `make test` rebuilds it so). --no-default-features reaches every package built here, and only
# the link has default features.
DEMO_BINARIES := ccplab-link ccplab-trace ccp-datapath ccp-algorithms

build-demo: deps-apt deps-rust
	$(CARGO) build --release --no-default-features $(addprefix --bin ,$(DEMO_BINARIES))

deps: deps-apt deps-rust deps-python

# what only the tests use, on top of deps
deps-test: deps deps-apt-test deps-python-test

deps-apt:
	@missing=""; for c in $(APT_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	[ -f /usr/include/gelf.h ] || missing="$$missing libelf-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages (missing:$$missing)"; \
	  $(APT_INSTALL) $(APT_PACKAGES); \
	fi

deps-apt-test:
	@missing=""; for c in $(APT_TEST_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for the tests (missing:$$missing)"; \
	  $(APT_INSTALL) $(APT_TEST_PACKAGES); \
	fi

deps-rust:
	@command -v $(CARGO) >/dev/null || { echo "error: cargo (Rust >= 1.86) is required; install it with rustup" >&2; exit 1; }

deps-python: $(VENV)/.installed

# The project's Python modules compiled to bytecode ahead of a run: an interpreter started with
# PYTHONDONTWRITEBYTECODE (as in many containers) compiles every module it imports again, which is
# about a fifth of `ccplab run`'s start-up. Only changed modules are compiled again.
PY_PACKAGES := experiments/ccplab ccplab_util transient kmod

bytecode: deps-python
	$(PY) -m compileall -q $(PY_PACKAGES)

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -e .
	touch $@

deps-python-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# Benchmarks print figures (not timed tests): the log reader vs a line-by-line baseline.
bench: build bytecode
	# the output is kept for docs/gen_results.py analysis-speed
	mkdir -p results && set -o pipefail && $(PY) -m transient.bench | tee results/bench-analysis-$$(date +%Y%m%d-%H%M%S).txt
	# the analysis of 16 flows (starting 2 s apart) against one flow, two 60 s runs at 24 Mbit/s (about 3 minutes)
	rm -rf results/bench-flows && mkdir -p results/bench-flows
	target/release/ccplab-trace step --before-mbps 0 --after-mbps 24 --at-s 0 --duration-s 70 --sigma-mbps 0 --seed 1 \
	    --out results/bench-flows/flat24.trace
	$(NETLAB_LOCK) $(VENV)/bin/ccplab run $$(for k in $$(seq 0 15); do echo --flow kernel:cubic@$$((k * 2)); done) \
	    --trace results/bench-flows/flat24.trace --one-way-delay-ms 25 --queue-packets 100 --duration-s 60 \
	    --out results/bench-flows/16-flows
	$(NETLAB_LOCK) $(VENV)/bin/ccplab run --cca kernel:cubic --trace results/bench-flows/flat24.trace \
	    --one-way-delay-ms 25 --queue-packets 100 --duration-s 60 --out results/bench-flows/1-flow
	set -o pipefail && $(PY) -m transient.bench --flows results/bench-flows/16-flows results/bench-flows/1-flow \
	    | tee results/bench-analysis-flows-$$(date +%Y%m%d-%H%M%S).txt
	# what a run costs beyond its flow, kernel:cubic and ccp:cubic alternating (about 2 minutes)
	set -o pipefail && $(NETLAB_LOCK) $(PY) -m ccplab.runbench --runs 5 --duration-s 5 \
	    | tee results/bench-run-$$(date +%Y%m%d-%H%M%S).txt
	# the link's capacity: kernel cubic through ccplab-link at 12..2000 Mbit/s offered, beside the kernel
	# forwarding alone shaped to the same rate and queue (tbf, no added delay), 3 repetitions (about 10 minutes)
	set -o pipefail && stamp=$$(date +%Y%m%d-%H%M%S) && $(NETLAB_LOCK) $(PY) -m ccplab.linkbench --reps 3 \
	    --json results/bench-link-$$stamp.json | tee results/bench-link-$$stamp.txt
	CCPLAB_FUZZ_CASES=1000000 $(CARGO) test --release -p ccp-datapath --test fuzz_messages -- --nocapture
	# 1,000,000 structurally valid messages to the datapath during a real flow (the control guard)
	CCPLAB_GUARD_FUZZ_MESSAGES=1000000 $(NETLAB_LOCK) $(CARGO) test --release -p ccp-datapath --test control_guard -- --include-ignored --nocapture
	# one fold invocation, warm: compiled main section vs the BPF interpreter, per suite program
	$(CARGO) test --release -p ccp-datapath --test fold_jit -- --ignored --nocapture
	$(NETLAB_LOCK) $(VENV)/bin/ccplab fidelity --runs 5 --duration-s 20 \
	    --out results/bench-fidelity-$$(date +%Y%m%d-%H%M%S)
	# eight repetitions of kernel cubic, bpf-cubic and --fold kernel (about 30 minutes), iperf3 on one
	# CPU: with placement left free one flow's throughput spreads by a third from run to run here
	$(NETLAB_LOCK) $(PY) -m ccplab.dpbench --reps 8 --modes kernel,bpf-cubic,ccp-kernel-fold --pin-cpu 1 \
	    --json results/bench-datapath-$$(date +%Y%m%d-%H%M%S).json
	# ten flows at full speed, the cell whose eight repetitions straddled the throughput target, with 16
	# (about 9 minutes)
	$(NETLAB_LOCK) $(PY) -m ccplab.dpbench --reps 16 --modes kernel,bpf-cubic,ccp-kernel-fold --flows 10 --loads full \
	    --pin-cpu 1 --json results/bench-datapath-10full-$$(date +%Y%m%d-%H%M%S).json
	# one flow at full speed with placement left free, for comparison (about 5 minutes)
	$(NETLAB_LOCK) $(PY) -m ccplab.dpbench --reps 8 --modes kernel,bpf-cubic,ccp-kernel-fold --flows 1 --loads full \
	    --json results/bench-datapath-1free-$$(date +%Y%m%d-%H%M%S).json
	# the noisiest CPU cells, own CPU at 1 and 100 paced flows (+-20 % a repetition), again with 24 and 16
	# (8 and 6 minutes)
	$(NETLAB_LOCK) $(PY) -m ccplab.dpbench --loads paced --flows 1 --modes kernel,ccp-kernel-fold --reps 24 --pin-cpu 1 \
	    --json results/bench-datapath-1paced-$$(date +%Y%m%d-%H%M%S).json
	$(NETLAB_LOCK) $(PY) -m ccplab.dpbench --loads paced --flows 100 --modes kernel,ccp-kernel-fold --reps 16 --pin-cpu 1 \
	    --json results/bench-datapath-100paced-$$(date +%Y%m%d-%H%M%S).json

# The suite on the real ccp-kernel module (docs/ccp-kernel.md): builds ccp-cong.ko from
# CCP_KERNEL_SRC (a ccp-kernel checkout with its libccp submodule) for Debian's 6.1 and 6.12
# kernels (packages fetched with apt-get download, unpacked under target/kmod, nothing
# installed into /boot) and runs ccp-algorithms --ipc netlink beside it in QEMU guests without
# a network device; then KMOD_CYCLES guests per start order. Non-zero exit when a daemon did
# not control its flow or the module logged an error. The guests need no host lock.
KMOD_PACKAGES := qemu-system-x86 busybox-static dwarves gcc-12 zstd
KMOD_COMMANDS := qemu-system-x86_64 busybox pahole gcc-12 zstd
KMOD_CYCLES ?= 10
KMOD_ARGS ?=

kmod-check: kmod-src deps-kmod deps-python
	$(CARGO) build --release -p ccp-algorithms
	$(PY) -m kmod check --ccp-kernel-src "$(CCP_KERNEL_SRC)" --cycles $(KMOD_CYCLES) $(KMOD_ARGS)

# Before anything is installed or built: CCP_KERNEL_SRC must be a ccp-kernel tree (kmod.source
# checks it again, and which of its branches fits which kernel).
kmod-src:
	@[ -n "$(CCP_KERNEL_SRC)" ] || { echo "error: CCP_KERNEL_SRC is not set: make kmod-check CCP_KERNEL_SRC=DIR, DIR a checkout of github.com/ccp-project/ccp-kernel with its libccp submodule" >&2; exit 2; }
	@[ -f "$(CCP_KERNEL_SRC)/tcp_ccp.c" ] && [ -f "$(CCP_KERNEL_SRC)/libccp/ccp.c" ] || { echo "error: CCP_KERNEL_SRC=$(CCP_KERNEL_SRC) is not a ccp-kernel tree with its libccp submodule (tcp_ccp.c, libccp/ccp.c)" >&2; exit 2; }

deps-kmod: deps-apt
	@missing=""; for c in $(KMOD_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for kmod-check (missing:$$missing)"; \
	  $(APT_INSTALL) $(KMOD_PACKAGES); \
	fi

clean:
	rm -rf target $(VENV)
