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
// context switch of the host, which notes the switch-in time of a thread
// the walls map lists (its next task) and, when the thread leaving the
// CPU (current) is of a process sampled, tail-calls that process's
// switch program (program with switched), found by its PID. One
// dispatcher for any number of processes keeps the cost of a switch one
// map lookup by PID, not one program run a process.
type switchHook struct {
	// walls is the wall state of each thread listed (wallValue bytes),
	// by TID; tgids the slot in progs of each process's switch
	// program, by PID.
	walls, tgids, progs *ebpf.Map
	disp                *ebpf.Program
	link                link.Link

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
// task's PID.
var ErrNoBTF = errors.New("the kernel gives no BTF (/sys/kernel/btf/vmlinux)")

// taskPIDOffset is the offset of task_struct's pid (the TID) in this
// kernel, from its BTF.
func taskPIDOffset() (int32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoBTF, err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return 0, fmt.Errorf("task_struct in the kernel's BTF: %w", err)
	}
	for _, m := range task.Members {
		if m.Name == "pid" {
			if m.Offset%8 != 0 {
				return 0, fmt.Errorf("task_struct.pid at bit %d: not a byte boundary", m.Offset)
			}
			return int32(m.Offset / 8), nil
		}
	}
	return 0, errors.New("task_struct has no pid in the kernel's BTF")
}

// newSwitchHook loads the dispatcher and attaches it to sched_switch.
func newSwitchHook() (*switchHook, error) {
	pidOff, err := taskPIDOffset()
	if err != nil {
		return nil, err
	}
	h := &switchHook{used: map[uint32]bool{}}
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
		Instructions: dispatcher(pidOff, h.walls.FD(), h.tgids.FD(), h.progs.FD()),
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

// dispatcher is the sched_switch program: args[2] of the raw tracepoint
// is the next task, whose pid (its TID) is read at pidOff; a thread in
// walls gets its switch-in time; then, when the current task (the one
// leaving) is of a process in tgids, the process's switch program runs
// in its place (a tail call, which does not return).
func dispatcher(pidOff int32, wallsFD, tgidsFD, progsFD int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// The next task's TID.
		asm.LoadMem(asm.R3, asm.R6, 16, asm.DWord),
		asm.Add.Imm(asm.R3, pidOff),
		asm.Mov.Reg(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 4),
		asm.FnProbeReadKernel.Call(),
		asm.JNE.Imm(asm.R0, 0, "out"),
		asm.LoadMapPtr(asm.R1, wallsFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R7, wallIn, asm.R0, asm.DWord),
		// The task leaving: its process's switch program.
		asm.FnGetCurrentPidTgid.Call().WithSymbol("out"),
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
