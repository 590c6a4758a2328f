package ebpfsample

import (
	"errors"
	"fmt"
	"io"
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
// between two switch records less its CPU time between them, which the
// switch program reads from the kernel's task (its sum_exec_runtime, at
// the offset the kernel's BTF gives).
type switchHook struct {
	// walls is the wall state of each thread listed (wallValue bytes),
	// by TID; tgids the slot in progs of each process's switch
	// program, by PID.
	walls, tgids, progs *ebpf.Map
	disp                *ebpf.Program
	link                link.Link
	// taskRan is the offset of task_struct's se.sum_exec_runtime.
	taskRan int32

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

// taskRanOffset is the offset of task_struct's se.sum_exec_runtime (the
// task's CPU time, in nanoseconds) in this kernel, from its BTF.
func taskRanOffset() (int32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return 0, fmt.Errorf("task_struct in the kernel's BTF: %w", err)
	}
	se, ok := structMember(task, "se")
	if !ok {
		return 0, errors.New("task_struct has no se in the kernel's BTF")
	}
	ent, ok := btf.UnderlyingType(se.Type).(*btf.Struct)
	if !ok {
		return 0, fmt.Errorf("task_struct.se is a %v in the kernel's BTF, not a struct", se.Type)
	}
	ran, ok := structMember(ent, "sum_exec_runtime")
	if !ok {
		return 0, errors.New("sched_entity has no sum_exec_runtime in the kernel's BTF")
	}
	off := se.Offset + ran.Offset
	if off%64 != 0 {
		return 0, fmt.Errorf("task_struct.se.sum_exec_runtime at bit %d: not aligned", off)
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
	ran, err := taskRanOffset()
	if err != nil {
		return nil, err
	}
	h := &switchHook{taskRan: ran, used: map[uint32]bool{}}
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
		Instructions: dispatcher(h.tgids.FD(), h.progs.FD()),
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
// runs in its place (a tail call, which does not return).
func dispatcher(tgidsFD, progsFD int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
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
	}
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
