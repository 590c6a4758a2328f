package ebpfsample

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// switchHook is what wall-clock profiles with the BPF sampler share: one
// program on the scheduler's sched_switch raw tracepoint, run at every
// context switch of the host, which, when the thread leaving the CPU
// (current) is of a process sampled, tail-calls that process's switch
// program (program with switched), found by its PID. One dispatcher for
// any number of processes keeps the cost of the host's other switches
// one map lookup, not one program run a process; and no program runs as
// a thread comes back to a CPU: the time it spent off one is its time
// between two switch records less the run between them, which the switch
// program reads from the kernel's task and run queue (kernelOffsets), or,
// where the kernel keeps no run's start, from the time the dispatcher saw
// the thread come to its CPU.
type switchHook struct {
	// walls is the wall state of each thread listed (wallValue bytes),
	// by TID; tgids the slot in progs of each process's switch
	// program, by PID.
	walls, tgids, progs *ebpf.Map
	disp                *ebpf.Program
	link                link.Link
	// kern is where the switch program reads a task's time on a CPU.
	kern kernelOffsets

	mu   sync.Mutex
	used map[uint32]bool // the slots taken
}

// maxWallProcesses bounds the processes one hook serves; maxWallThreads
// the threads it keeps a state for.
const (
	maxWallProcesses = 4096
	maxWallThreads   = 1 << 16
)

// ErrNoBTF is returned where the kernel gives no BTF of its types
// (/sys/kernel/btf/vmlinux), which the switch program needs to read a
// task's CPU time.
var ErrNoBTF = errors.New("the kernel gives no BTF (/sys/kernel/btf/vmlinux)")

// kernelOffsets are where the switch program finds, in this kernel's
// structures (from its BTF), a task's time on a CPU: its CPU time, and the
// wall time of the run it is ending (the run queue's clock now less the
// clock when the task last came to a CPU). The CPU time leaves out what
// the hypervisor took from the vCPU while the task ran (steal) and, where
// the kernel accounts it apart, interrupts' time; the run's wall time holds
// them, as the clock samples, taken on the wall clock, do: the time off a
// CPU is the time between two switches less that run, else a VM's steal
// counts twice, on the CPU in the clock's samples and off it in the switch
// samples.
type kernelOffsets struct {
	// taskRan is task_struct's se.sum_exec_runtime (nanoseconds), taskPID
	// its pid (the TID, 4 bytes).
	taskRan, taskPID int32
	// taskArrival is task_struct's sched_info.last_arrival (the run
	// queue's clock when the task last came to a CPU), taskCFSRQ its
	// se.cfs_rq (a pointer), cfsRQRq cfs_rq's rq (a pointer) and rqClock
	// rq's clock. All 0 where the kernel has not one of them
	// (CONFIG_SCHED_INFO, CONFIG_FAIR_GROUP_SCHED): the dispatcher then
	// notes when each thread listed comes to a CPU (arrivals).
	taskArrival, taskCFSRQ, cfsRQRq, rqClock int32
}

// runKnown says whether the switch program reads the start of a task's
// run from the kernel.
func (k kernelOffsets) runKnown() bool {
	return k.taskArrival > 0 && k.taskCFSRQ > 0 && k.cfsRQRq > 0 && k.rqClock > 0
}

// arrivals says whether the dispatcher notes when a thread listed comes
// to a CPU (the next task of a switch) in its wall state, for the switch
// program to take its run's wall time from: where the kernel keeps no
// run's start. It costs every switch of the host a read of the next
// task's TID and a lookup in the walls map; the CPU time, which would
// stand for the run's wall time otherwise, leaves out a VM's steal (see
// kernelOffsets).
func (k kernelOffsets) arrivals() bool {
	return !k.runKnown() && k.taskPID > 0
}

// withoutRunStart is k as on a kernel that keeps no run's start.
func (k kernelOffsets) withoutRunStart() kernelOffsets {
	k.taskArrival, k.taskCFSRQ, k.cfsRQRq, k.rqClock = 0, 0, 0, 0
	return k
}

// readKernelOffsets reads kernelOffsets from the kernel's BTF.
func readKernelOffsets() (kernelOffsets, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return kernelOffsets{}, fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	var k kernelOffsets
	if k.taskRan, err = memberOffset(spec, 8, "task_struct", "se", "sum_exec_runtime"); err != nil {
		return k, err
	}
	if k.taskPID, err = memberOffset(spec, 4, "task_struct", "pid"); err != nil {
		return k, err
	}
	arrival, errA := memberOffset(spec, 8, "task_struct", "sched_info", "last_arrival")
	cfsRQ, errC := memberOffset(spec, 8, "task_struct", "se", "cfs_rq")
	rq, errR := memberOffset(spec, 8, "cfs_rq", "rq")
	clock, errK := memberOffset(spec, 8, "rq", "clock")
	if errA == nil && errC == nil && errR == nil && errK == nil {
		k.taskArrival, k.taskCFSRQ, k.cfsRQRq, k.rqClock = arrival, cfsRQ, rq, clock
	}
	return k, nil
}

// memberOffset is the byte offset of a (nested) member of a struct in the
// kernel's BTF: path names a member of the struct, then a member of that
// member, and so on. The member it ends at must be size bytes, aligned:
// the program reads a u64 or a pointer (8), or a u32 (4) there.
func memberOffset(spec *btf.Spec, size int, name string, path ...string) (int32, error) {
	var s *btf.Struct
	if err := spec.TypeByName(name, &s); err != nil {
		return 0, fmt.Errorf("%s in the kernel's BTF: %w", name, err)
	}
	var off btf.Bits
	var typ btf.Type = s
	for i, field := range path {
		st, ok := btf.UnderlyingType(typ).(*btf.Struct)
		if !ok {
			return 0, fmt.Errorf("%s.%s is a %v in the kernel's BTF, not a struct", name, strings.Join(path[:i], "."), typ)
		}
		m, ok := structMember(st, field)
		if !ok {
			return 0, fmt.Errorf("%s has no %s in the kernel's BTF", name, strings.Join(path[:i+1], "."))
		}
		off += m.Offset
		typ = m.Type
	}
	if got, err := btf.Sizeof(typ); err != nil || got != size || off%btf.Bits(8*size) != 0 {
		return 0, fmt.Errorf("%s.%s at bit %d (%v): not an aligned %d bytes", name, strings.Join(path, "."), off, typ, size)
	}
	return int32(off / 8), nil
}

// structMember finds a struct's member by name.
func structMember(s *btf.Struct, name string) (btf.Member, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return btf.Member{}, false
}

// newSwitchHook loads the dispatcher and attaches it to sched_switch.
func newSwitchHook() (*switchHook, error) {
	kern, err := readKernelOffsets()
	if err != nil {
		return nil, err
	}
	return newSwitchHookFor(kern)
}

// newSwitchHookFor is newSwitchHook for the kernel's offsets kern (a test
// makes the hook of a kernel without the run's start with them).
func newSwitchHookFor(kern kernelOffsets) (*switchHook, error) {
	var err error
	h := &switchHook{kern: kern, used: map[uint32]bool{}}
	if h.walls, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_walls", Type: ebpf.Hash, KeySize: 4, ValueSize: wallValue, MaxEntries: maxWallThreads}); err != nil {
		h.close()
		return nil, fmt.Errorf("walls map: %w", err)
	}
	if h.tgids, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_tgids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: maxWallProcesses}); err != nil {
		h.close()
		return nil, fmt.Errorf("processes map: %w", err)
	}
	if h.progs, err = ebpf.NewMap(&ebpf.MapSpec{Name: "rbs_switchprogs", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: maxWallProcesses}); err != nil {
		h.close()
		return nil, fmt.Errorf("program array: %w", err)
	}
	h.disp, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "rbs_switch",
		Type:         ebpf.RawTracepoint,
		License:      "GPL",
		Instructions: dispatcher(h.tgids.FD(), h.progs.FD(), h.walls.FD(), kern),
	}, ebpf.ProgramOptions{LogSizeStart: 1 << 20})
	if err != nil {
		h.close()
		return nil, fmt.Errorf("loading the switch program: %w", verifierLog(err))
	}
	if h.link, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: h.disp}); err != nil {
		h.close()
		return nil, fmt.Errorf("attaching to sched_switch: %w", err)
	}
	return h, nil
}

// verifierLog adds the verifier's log to a program's refusal.
func verifierLog(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w (verifier log: %+v)", err, ve)
	}
	return err
}

// dispatcher is the sched_switch program: when the current task (the one
// leaving its CPU) is of a process in tgids, the process's switch program
// runs in its place (a tail call, which does not return). With
// kern.arrivals, it first notes the time in the wall state of the next
// task (the one coming to the CPU), when that is a thread listed.
func dispatcher(tgidsFD, progsFD, wallsFD int, kern kernelOffsets) asm.Instructions {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
	}
	if kern.arrivals() {
		ins = append(ins,
			// The next task's TID: sched_switch's arguments are
			// (preempt, prev, next, ...).
			asm.LoadMem(asm.R3, asm.R6, 16, asm.DWord),
			asm.Add.Imm(asm.R3, kern.taskPID),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.R10),
			asm.Add.Imm(asm.R1, -8),
			asm.Mov.Imm(asm.R2, 4),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, "prev"),
			asm.LoadMapPtr(asm.R1, wallsFD),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "prev"),
			asm.Mov.Reg(asm.R7, asm.R0),
			asm.FnKtimeGetNs.Call(),
			asm.StoreMem(asm.R7, wallArrive, asm.R0, asm.DWord),
		)
	}
	return append(ins,
		asm.FnGetCurrentPidTgid.Call().WithSymbol("prev"),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.R10, -8, asm.R0, asm.Word),
		asm.LoadMapPtr(asm.R1, tgidsFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R3, asm.R0, 0, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, progsFD),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
}

// add runs prog at the switches of process pid's threads, until remove.
func (h *switchHook) add(pid int, prog *ebpf.Program) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	slot := uint32(0)
	for h.used[slot] {
		slot++
	}
	if slot >= maxWallProcesses {
		return fmt.Errorf("more than %d processes with wall-clock profiles", maxWallProcesses)
	}
	if err := h.progs.Put(slot, uint32(prog.FD())); err != nil {
		return fmt.Errorf("program array: %w", err)
	}
	if err := h.tgids.Put(uint32(pid), slot); err != nil {
		_ = h.progs.Delete(slot)
		return fmt.Errorf("processes map: %w", err)
	}
	h.used[slot] = true
	return nil
}

// listed gives the switch program thread tid's &th->ec, for process
// pid. A thread's state lives as long as it is listed: it is made when
// the thread is first listed and kept while its process and ec stay, and
// made again (the program's state of it lost) when the TID is another
// thread's.
func (h *switchHook) listed(pid int, tid uint32, ec uint64) error {
	var v [wallValue / 8]uint64
	err := h.walls.Lookup(tid, &v)
	if err == nil && v[wallEC/8] == ec && v[wallTGID/8] == uint64(uint32(pid)) {
		return nil
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("walls map: %w", err)
	}
	v = [wallValue / 8]uint64{}
	v[wallEC/8] = ec
	v[wallTGID/8] = uint64(uint32(pid))
	if err := h.walls.Put(tid, v); err != nil {
		return fmt.Errorf("walls map: %w", err)
	}
	return nil
}

// remove stops running process pid's switch program.
func (h *switchHook) remove(pid int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var slot uint32
	if err := h.tgids.Lookup(uint32(pid), &slot); err != nil {
		return
	}
	_ = h.tgids.Delete(uint32(pid))
	_ = h.progs.Delete(slot)
	delete(h.used, slot)
}

// close detaches the dispatcher and frees the maps.
func (h *switchHook) close() {
	if h.link != nil {
		h.link.Close()
	}
	for _, c := range []io.Closer{h.disp, h.progs, h.tgids, h.walls} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}
