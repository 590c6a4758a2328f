// Package bench holds rbscope's benchmarks. stack.sh times the whole
// `rbscope stack -p PID` command (process start included) against gdb on a
// Ruby process 200 frames deep (testdata/bench_deep.rb); the Go benchmarks
// in this package time the library calls underneath it:
//
//	go test ./bench -run '^$' -bench . -benchtime 200x
//
// They start the same workload and skip when no Ruby is installed.
// BenchmarkHeapCensus (heap_test.go) takes heap censuses of
// testdata/heap_census.rb grown to about 1.3M objects and reports objects/s:
//
//	go test ./bench -run '^$' -bench HeapCensus -benchtime 20x
//
// ebpf.sh runs TestEBPFFloor (ebpf_test.go), which only runs when asked
// (RBSCOPE_BENCH_EBPF=1) and as root: the BPF on-CPU sampler
// (internal/ebpfsample, record --ebpf) beside the user-space sampler on the same
// processes, with the cost a sample of each and how well their stacks
// agree.
//
// The shell scripts print figures against the issue targets beside a peer
// measured in the same run: agent.sh (the agent's CPU and memory at 10, 50
// and 200 processes, beside a build of an earlier commit), throughput.sh
// (record's samples per CPU-second, the same way), record.sh (record against
// stackprof), alloc.sh, heap_scale.sh, ui_scale.sh and configs.sh; see
// docs/benchmarks.md.
package bench
