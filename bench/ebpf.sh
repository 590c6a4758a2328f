#!/usr/bin/env bash
# bench/ebpf.sh: the BPF on-CPU sampler (internal/ebpfsample, record --ebpf)
# beside the user-space sampler (internal/sampler, nonblocking) on the same
# processes, in phases that take turns (TestEBPFFloor in bench/ebpf_test.go):
# samples, CPU cost a sample of each (the BPF program's kernel run time from
# BPF_ENABLE_STATS, the user side's thread and process CPU), and how well
# their stacks agree, on testdata/bench_deep.rb (50 frames, spinning),
# testdata/churn_stacks.rb and testdata/split.rb. Needs root (BPF, perf
# events) and the test Rubies under /var/cache/rbscope/rubies.
#
#   bench/ebpf.sh
#
# Environment:
#   RBSCOPE_RUBY_FILTER='ruby-3\.4-shared$'   the Rubies (regular expression)
#   EBPF_ROUNDS=3    pairs of phases (user space, then BPF)
#   EBPF_PHASE=4s    a phase
#   EBPF_RATE=100    samples a second of each sampler (the agent's rate)
#   GO=go (Go is also looked for in /usr/local/go/bin)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
export RBSCOPE_BENCH_EBPF=1
export RBSCOPE_RUBY_FILTER=${RBSCOPE_RUBY_FILTER:-'ruby-3\.4-shared$'}
export EBPF_ROUNDS=${EBPF_ROUNDS:-3} EBPF_PHASE=${EBPF_PHASE:-4s} EBPF_RATE=${EBPF_RATE:-100}
echo "kernel $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); Rubies matching $RBSCOPE_RUBY_FILTER; $EBPF_ROUNDS rounds of $EBPF_PHASE per sampler at $EBPF_RATE Hz"
"$GO" test -count=1 -timeout 30m -run '^TestEBPFFloor$' -v ./bench 2>&1 | grep -v -e '^=== RUN' -e '^=== PAUSE' -e '^=== CONT'
