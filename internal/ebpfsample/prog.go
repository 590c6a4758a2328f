package ebpfsample

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// The per-CPU scratch value the programs work in: the control frames
// copied out of the target in one read, and the record sent to user
// space: a header, an (iseq, pc, ep) triple a frame, then a copy of the
// top of the thread's value stack (up to the innermost frame's sp), where
// the frames' environments mostly lie, so that user space decodes each
// frame's method entry as it was at the sample. The programs' counters
// (the clock's program's, then the switch program's) are a per-CPU value
// of their own, countersSize bytes: user space reads them every second,
// and a read copies the whole value of every CPU.
const (
	numCounters  = 10
	countersSize = 2 * numCounters * 8
	// TID, frames copied, frames in all, truncated, value stack base
	// (8), its bytes, flags, GC flags (16), time (8), and for a switch
	// record the thread's time off a CPU under its last stack (8) and
	// its CPU time now (8).
	headerSize = 72
	flagsOff   = 28
	gcFlagsOff = 32
	timeOff    = 48 // bpf_ktime_get_ns at the sample: CLOCK_MONOTONIC
	offOff     = 56 // nanoseconds
	ranOff     = 64 // the thread's sum_exec_runtime (0: unknown)
	gcFlagsMax = 16
	tripleSize = 24
)

// runSkew is how much shorter than its CPU time a run's wall time may be
// read, in nanoseconds, and still be the run ending: the two are read on
// different clocks at different points of the switches (the dispatcher's
// arrival on the monotonic clock, the CPU time on the run queue's task
// clock), a microsecond or so apart; the run's wall time is then its CPU
// time.
const runSkew = 50_000

// flagSwitch, a record flag, says it was taken as the thread left its
// CPU with another stack than at its last switch (sched_switch), not on
// the clock.
const flagSwitch = 1

// The wall state of a thread, the switch program's per-TID value: the
// time of its last switch (0: none known, or a record was lost), its CPU
// time then, its time off a CPU since the last record it sent (acc: under
// that record's stack), a hash of that record's frames, the address of
// its rb_thread_t's ec field (the threads map's value, which user space
// writes here too: the switch program, run at every switch of the
// target's threads, so looks up one map a switch rather than two), and
// the PID of the process that listed it (a TID another process had
// before, whose state is not yet gone, is not read in this one's memory),
// and, where the kernel keeps no run's start (kernelOffsets.arrivals), when
// the thread last came to a CPU, which the dispatcher writes (0: not
// seen since listed).
const (
	wallOut    = 0
	wallRan    = 8
	wallAcc    = 16
	wallHash   = 24
	wallEC     = 32
	wallTGID   = 40
	wallArrive = 48
	wallValue  = 56
)

// Counter indexes in the counters value.
const (
	cntRuns       = iota // the program ran on a thread of the target
	cntEmitted           // a record went to the ring buffer
	cntNoThread          // the thread is not one of the Ruby threads listed
	cntECFault           // the execution context could not be read
	cntBadBounds         // cfp outside the VM stack or off a frame boundary
	cntFramesRead        // the control frames could not be read
	cntRingFull          // the ring buffer had no room
	cntTruncated         // more frames than MaxFrames: the outermost left out
	// The switch program's own:
	cntSame    // the stack was the thread's last record's: nothing sent
	cntRunWall // the span's run had its wall time read (kernelOffsets)
)

// progParams are the constants the program is built with: where the
// target's Ruby keeps what the walk reads (from its Layout) and the size
// of the walk.
type progParams struct {
	tgid int32
	// wakeAt is the bytes waiting in the ring buffer above which a
	// record wakes its reader (a quarter of the ring): below, user space
	// drains it on its own clock.
	wakeAt    int32
	maxFrames int
	// maxStack bounds the bytes of value stack copied, from the
	// innermost frame's sp down (0: none copied).
	maxStack int64
	// gcFlags, gcFlagsLen: where the collector's flags lie in the
	// target and how many bytes to copy (0: none)
	gcFlags    uint64
	gcFlagsLen int64
	// from the Layout
	ecVMStack, ecVMStackSize, ecCFP       int64
	cfpSize, cfpPC, cfpSP, cfpIseq, cfpEP int64
	// kern is where the switch program reads a task's time on a CPU
	// (switchHook.kern).
	kern kernelOffsets
}

// newProgParams takes the program's offsets from the target's Layout.
func newProgParams(pid int, L *layout.Layout, maxFrames int, maxStack int64, ringBytes int, gcFlags uint64, gcFlagsLen int) (progParams, error) {
	p := progParams{
		tgid: int32(pid), wakeAt: int32(min(ringBytes/4, 1<<30)), maxFrames: maxFrames, maxStack: maxStack, gcFlags: gcFlags, gcFlagsLen: int64(gcFlagsLen),
		ecVMStack: L.ECVMStack, ecVMStackSize: L.ECVMStackSize, ecCFP: L.ECCFP,
		cfpSize: L.CFPSize, cfpPC: L.CFPPC, cfpSP: L.CFPSP, cfpIseq: L.CFPIseq, cfpEP: L.CFPEP,
	}
	if p.cfpSP < 0 || p.maxStack < 0 {
		p.maxStack = 0 // a build without the frame's sp: environments read at decoding
	}
	if p.gcFlagsLen < 0 || p.gcFlagsLen > gcFlagsMax {
		return p, fmt.Errorf("GC flags of %d bytes: out of range", p.gcFlagsLen)
	}
	if p.maxStack%8 != 0 || p.maxStack > 1<<20 {
		return p, fmt.Errorf("value stack copy of %d bytes: out of range", p.maxStack)
	}
	if lo, hi := p.ecSpan(); hi-lo > ecBufSize {
		return p, fmt.Errorf("execution context fields span %d bytes, more than %d", hi-lo, ecBufSize)
	}
	for _, o := range []int64{p.cfpPC, p.cfpIseq, p.cfpEP, max(p.cfpSP, 0)} {
		if o < 0 || o+8 > p.cfpSize {
			return p, fmt.Errorf("control frame field at %d outside a frame of %d bytes", o, p.cfpSize)
		}
	}
	if p.cfpSize <= 0 || p.cfpSize%8 != 0 || maxFrames <= 0 || p.recOff()+headerSize+tripleSize >= 1<<15 {
		// The program reaches the record with 16-bit offsets.
		return p, fmt.Errorf("control frame size %d, max frames %d: out of range", p.cfpSize, maxFrames)
	}
	return p, nil
}

// ecSpan is the byte range of the execution context the program reads
// (vm_stack, vm_stack_size and cfp) in one go.
func (p progParams) ecSpan() (lo, hi int64) {
	lo = min(p.ecVMStack, p.ecVMStackSize, p.ecCFP)
	hi = max(p.ecVMStack, p.ecVMStackSize, p.ecCFP) + 8
	return lo, hi
}

func (p progParams) rawOff() int64  { return 0 }
func (p progParams) rawSize() int64 { return int64(p.maxFrames) * p.cfpSize }
func (p progParams) recOff() int64  { return p.rawOff() + p.rawSize() }
func (p progParams) recSize() int64 {
	return headerSize + int64(p.maxFrames)*tripleSize + p.maxStack
}

// scratchSize is the size of the per-CPU scratch value.
func (p progParams) scratchSize() int64 { return p.recOff() + p.recSize() }

// Flags of bpf_ringbuf_output (BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP),
// and bpf_ringbuf_query's BPF_RB_AVAIL_DATA.
const (
	bpfRBNoWakeup    = 1
	bpfRBForceWakeup = 2
	bpfRBAvailData   = 0
)

// Stack slots (offsets from the frame pointer R10).
const (
	slotKey   = -8  // a u32 map key
	slotEC    = -16 // the execution context's address
	ecBufSize = 48
	slotECBuf = -16 - ecBufSize // the execution context fields read
	slotWall  = slotECBuf - 8   // the switch program's walls map value
	slotHash  = slotWall - 8    // and the hash of the frames
	slotCount = slotHash - 8    // the counters value
	// The switch program's: the task leaving its CPU, when it last
	// came to one, and its run queue's clock now (kernelOffsets).
	slotTask    = slotCount - 8
	slotArrival = slotTask - 8
	slotClock   = slotArrival - 8
)

// hashStep mixes R3 into the hash in R4 (a bijection of the hash for each
// value: two stacks hash alike by chance alone), with R5 as scratch.
func hashStep() asm.Instructions {
	return asm.Instructions{
		asm.Xor.Reg(asm.R4, asm.R3),
		asm.Mul.Imm(asm.R4, 0x5bd1e995),
		asm.Mov.Reg(asm.R5, asm.R4),
		asm.RSh.Imm(asm.R5, 29),
		asm.Xor.Reg(asm.R4, asm.R5),
	}
}

// lookup looks up the key in slotKey in the map mapFD, and jumps to
// missing when it is not there; else R0 is its value.
func lookup(mapFD int, missing string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, slotKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, missing),
	}
}

// programFDs are the maps a program of the sampler uses; walls only in
// the switch program.
type programFDs struct {
	threads, scratch, counters, events, walls int
}

// program returns the instructions of the sampler: on a perf event on a
// thread of the target it finds the thread's rb_thread_t (the threads map,
// by TID, holds the address of its ec field), reads ec->vm_stack,
// vm_stack_size and cfp, notes the time, copies the collector's flags
// (its phase), reads the control frames from cfp to the end of the VM
// stack (at most maxFrames, innermost first) in one read, puts each
// frame's iseq, pc and ep in the record, copies the top of the value stack
// (at most maxStack bytes below the innermost frame's sp) after them, and
// sends the record to the ring buffer. Counters go to the per-CPU scratch
// value.
//
// With switched, it is the switch program instead (switch.go), tail-called
// as a thread of the target leaves its CPU: it walks the same way (the
// thread's ec field's address from its walls value), and
// adds the thread's time off a CPU since its last switch (the time since
// less the wall time of the run it is ending, or, where the kernel does
// not keep the run's start, less its CPU time since: kernelOffsets) to its
// acc in the walls map. When the stack is the one the thread's last record sent
// (a hash of its frames), that is all: nothing is sent. Else it sends a
// switch record (flagSwitch) with the acc, the time off a CPU under the
// last record's stack, and starts a new acc. A failure clears the
// thread's state, so that no time goes under a stack user space did not
// get.
func program(p progParams, fd programFDs, switched bool) asm.Instructions {
	lo, hi := p.ecSpan()
	base := 0
	if switched {
		base = numCounters
	}
	count := func(idx int) asm.Instructions { // R1 and R2 are free
		return asm.Instructions{
			asm.LoadMem(asm.R1, asm.R10, slotCount, asm.DWord),
			asm.LoadMem(asm.R2, asm.R1, int16((base+idx)*8), asm.DWord),
			asm.Add.Imm(asm.R2, 1),
			asm.StoreMem(asm.R1, int16((base+idx)*8), asm.R2, asm.DWord),
		}
	}
	countExit := func(label string, idx int) asm.Instructions {
		ins := count(idx)
		ins[0] = ins[0].WithSymbol(label)
		if switched {
			// No record: the thread's next span is not known to
			// follow the stack user space has.
			return append(ins, asm.Ja.Label("forget"))
		}
		return append(ins, asm.Ja.Label("exit"))
	}
	threadsFD, scratchFD, eventsFD := fd.threads, fd.scratch, fd.events
	recOff, raw := int32(p.recOff()), int32(p.rawOff())
	vmStackSlot := int16(slotECBuf + p.ecVMStack - lo)
	var ins asm.Instructions
	ins = append(ins,
		// Only the target's threads.
		asm.FnGetCurrentPidTgid.Call(),
		asm.Mov.Reg(asm.R7, asm.R0), // R7: pid_tgid (TID in the low half)
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, p.tgid, "exit"),

		// R6: this CPU's scratch value.
		asm.StoreImm(asm.R10, slotKey, 0, asm.Word),
	)
	ins = append(ins, lookup(scratchFD, "exit")...)
	ins = append(ins,
		asm.Mov.Reg(asm.R6, asm.R0),
	)
	// This CPU's counters, kept in slotCount.
	ins = append(ins, lookup(fd.counters, "exit")...)
	ins = append(ins,
		asm.StoreMem(asm.R10, slotCount, asm.R0, asm.DWord),
	)
	ins = append(ins, count(cntRuns)...)
	if switched {
		ins = append(ins,
			// The thread's wall state, kept in slotWall.
			asm.StoreMem(asm.R10, slotKey, asm.R7, asm.Word),
		)
		ins = append(ins, lookup(fd.walls, "nowall")...)
		ins = append(ins,
			asm.StoreMem(asm.R10, slotWall, asm.R0, asm.DWord),
			// The thread's &th->ec, kept in its wall state by this
			// process.
			asm.LoadMem(asm.R3, asm.R0, wallTGID, asm.DWord),
			asm.JNE.Imm(asm.R3, p.tgid, "nothread"),
			asm.LoadMem(asm.R3, asm.R0, wallEC, asm.DWord),
			asm.JEq.Imm(asm.R3, 0, "nothread"),
		)
	} else {
		ins = append(ins,
			// The thread's &th->ec.
			asm.StoreMem(asm.R10, slotKey, asm.R7, asm.Word),
		)
		ins = append(ins, lookup(threadsFD, "nothread")...)
		ins = append(ins,
			asm.LoadMem(asm.R3, asm.R0, 0, asm.DWord),
		)
	}
	ins = append(ins,
		// ec = th->ec
		asm.Mov.Reg(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, slotEC),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, "ecfault"),
		asm.LoadMem(asm.R3, asm.R10, slotEC, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "ecfault"),
		// ec->vm_stack, vm_stack_size, cfp in one read
		asm.Add.Imm(asm.R3, int32(lo)),
		asm.Mov.Reg(asm.R1, asm.R10),
		asm.Add.Imm(asm.R1, slotECBuf),
		asm.Mov.Imm(asm.R2, int32(hi-lo)),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, "ecfault"),
		asm.LoadMem(asm.R8, asm.R10, vmStackSlot, asm.DWord),                         // vm_stack
		asm.LoadMem(asm.R1, asm.R10, int16(slotECBuf+p.ecVMStackSize-lo), asm.DWord), // words
		asm.LoadMem(asm.R9, asm.R10, int16(slotECBuf+p.ecCFP-lo), asm.DWord),         // cfp
		asm.JGT.Imm(asm.R1, 1<<28, "bounds"),
		asm.LSh.Imm(asm.R1, 3),
		asm.Add.Reg(asm.R1, asm.R8), // R1: end of the VM stack
		asm.JLT.Reg(asm.R9, asm.R8, "bounds"),
		asm.JGT.Reg(asm.R9, asm.R1, "bounds"),
		asm.Sub.Reg(asm.R1, asm.R9), // bytes of control frames
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.Mod.Imm(asm.R2, int32(p.cfpSize)),
		asm.JNE.Imm(asm.R2, 0, "bounds"),
		asm.Div.Imm(asm.R1, int32(p.cfpSize)), // R1: frames
		// The record's header: TID, frames copied, frames in all,
		// truncated, and no value stack yet.
		asm.StoreMem(asm.R6, int16(recOff), asm.R7, asm.Word),
		asm.StoreMem(asm.R6, int16(recOff+8), asm.R1, asm.Word),
		asm.StoreImm(asm.R6, int16(recOff+12), 0, asm.Word),
		asm.StoreImm(asm.R6, int16(recOff+16), 0, asm.Word),
		asm.StoreImm(asm.R6, int16(recOff+20), 0, asm.Word),
		asm.StoreImm(asm.R6, int16(recOff+24), 0, asm.Word),
		asm.StoreImm(asm.R6, int16(recOff+flagsOff), 0, asm.Word),
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.R6, int16(recOff+offOff), asm.R2, asm.DWord),
		asm.StoreMem(asm.R6, int16(recOff+ranOff), asm.R2, asm.DWord),
		asm.Mov.Reg(asm.R8, asm.R1), // R8: frames to copy
		asm.JLE.Imm(asm.R1, int32(p.maxFrames), "fits"),
		asm.Mov.Imm(asm.R8, int32(p.maxFrames)),
		asm.StoreImm(asm.R6, int16(recOff+12), 1, asm.Word),
	)
	if !switched {
		ins = append(ins, count(cntTruncated)...)
	}
	ins = append(ins,
		asm.StoreMem(asm.R6, int16(recOff+4), asm.R8, asm.Word).WithSymbol("fits"),
		asm.JEq.Imm(asm.R8, 0, "bounds"),
		// When the sample was taken, for the profile's timeline (the
		// ring buffer is drained a tenth of a second later).
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R6, int16(recOff+timeOff), asm.R0, asm.DWord),
	)
	if switched {
		ins = append(ins,
			// The thread's CPU time (current is the task leaving).
			asm.FnGetCurrentTask.Call(),
			asm.StoreMem(asm.R10, slotTask, asm.R0, asm.DWord),
			asm.Mov.Reg(asm.R3, asm.R0),
			asm.Add.Imm(asm.R3, p.kern.taskRan),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Add.Imm(asm.R1, recOff+ranOff),
			asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeReadKernel.Call(),
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.R10, slotArrival, asm.R1, asm.DWord),
			asm.StoreMem(asm.R10, slotClock, asm.R1, asm.DWord),
		)
		if p.kern.runKnown() {
			// When it came to this CPU, and the run queue's clock now
			// (task->se.cfs_rq->rq->clock); a failed read leaves a
			// zero, and the run's wall time unknown.
			read := func(slot int16, ptrSlot int16, off int32) asm.Instructions {
				return asm.Instructions{
					asm.LoadMem(asm.R3, asm.R10, ptrSlot, asm.DWord),
					asm.Add.Imm(asm.R3, off),
					asm.Mov.Reg(asm.R1, asm.R10),
					asm.Add.Imm(asm.R1, int32(slot)),
					asm.Mov.Imm(asm.R2, 8),
					asm.FnProbeReadKernel.Call(),
				}
			}
			ins = append(ins, read(slotArrival, slotTask, p.kern.taskArrival)...)
			ins = append(ins, read(slotClock, slotTask, p.kern.taskCFSRQ)...)
			ins = append(ins, read(slotClock, slotClock, p.kern.cfsRQRq)...)
			ins = append(ins, read(slotClock, slotClock, p.kern.rqClock)...)
		} else if p.kern.arrivals() {
			// When it came to this CPU, as the dispatcher saw it come,
			// and the time now, both on the monotonic clock.
			ins = append(ins,
				asm.LoadMem(asm.R1, asm.R10, slotWall, asm.DWord),
				asm.LoadMem(asm.R2, asm.R1, wallArrive, asm.DWord),
				asm.StoreMem(asm.R10, slotArrival, asm.R2, asm.DWord),
				asm.LoadMem(asm.R2, asm.R6, int16(recOff+timeOff), asm.DWord),
				asm.StoreMem(asm.R10, slotClock, asm.R2, asm.DWord),
			)
		}
	}
	for w := int16(0); w < gcFlagsMax/4; w++ {
		ins = append(ins, asm.StoreImm(asm.R6, int16(recOff+gcFlagsOff)+4*w, 0, asm.Word))
	}
	gcFlags := asm.Instructions{}
	if p.gcFlagsLen > 0 {
		gcFlags = asm.Instructions{
			// The collector's flags (zeros when they cannot be read).
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Add.Imm(asm.R1, recOff+gcFlagsOff),
			asm.Mov.Imm(asm.R2, int32(p.gcFlagsLen)),
			asm.LoadImm(asm.R3, int64(p.gcFlags), asm.DWord),
			asm.FnProbeReadUser.Call(),
		}
	}
	if !switched {
		ins = append(ins, gcFlags...)
	}
	ins = append(ins,
		// The control frames, in one read.
		asm.Mov.Reg(asm.R2, asm.R8),
		asm.Mul.Imm(asm.R2, int32(p.cfpSize)),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Add.Imm(asm.R1, raw),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, "framesfault"),
		// Each frame's iseq, pc and ep into the record; R4 hashes
		// them (with cfp and the frames' count) for the switch program.
		asm.Mov.Reg(asm.R4, asm.R9),
		asm.Xor.Reg(asm.R4, asm.R8),
		asm.Mov.Imm(asm.R7, 0), // R7: frame index
		asm.JGE.Reg(asm.R7, asm.R8, "copied").WithSymbol("loop"),
		asm.JGE.Imm(asm.R7, int32(p.maxFrames), "copied"),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.Mul.Imm(asm.R1, int32(p.cfpSize)),
		asm.Add.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Mul.Imm(asm.R2, tripleSize),
		asm.Add.Reg(asm.R2, asm.R6),
	)
	for _, f := range [][2]int64{{p.cfpIseq, 0}, {p.cfpPC, 8}, {p.cfpEP, 16}} {
		ins = append(ins,
			asm.LoadMem(asm.R3, asm.R1, int16(int64(raw)+f[0]), asm.DWord),
			asm.StoreMem(asm.R2, int16(int64(recOff)+headerSize+f[1]), asm.R3, asm.DWord),
		)
		if switched {
			ins = append(ins, hashStep()...)
		}
	}
	ins = append(ins,
		asm.Add.Imm(asm.R7, 1),
		asm.Ja.Label("loop"),
		// R7: the record's bytes so far.
		asm.Mov.Reg(asm.R7, asm.R8).WithSymbol("copied"),
		asm.Mul.Imm(asm.R7, tripleSize),
		asm.Add.Imm(asm.R7, headerSize),
	)
	if switched {
		ins = append(ins,
			// R3: the thread's time off a CPU since its last switch
			// (its time since less its run's; 0 when unknown)
			// and before, under the same stack (its acc).
			asm.StoreMem(asm.R10, slotHash, asm.R4, asm.DWord),
			asm.LoadMem(asm.R1, asm.R10, slotWall, asm.DWord),
			asm.Mov.Imm(asm.R3, 0),
			asm.LoadMem(asm.R2, asm.R1, wallOut, asm.DWord),
			asm.JEq.Imm(asm.R2, 0, "nospan"),
			asm.LoadMem(asm.R5, asm.R1, wallRan, asm.DWord),
			asm.JEq.Imm(asm.R5, 0, "nospan"),
			asm.LoadMem(asm.R0, asm.R6, int16(recOff+ranOff), asm.DWord),
			asm.JEq.Imm(asm.R0, 0, "nospan"),
			asm.Sub.Reg(asm.R0, asm.R5), // CPU time since
			asm.LoadMem(asm.R3, asm.R6, int16(recOff+timeOff), asm.DWord),
			asm.Sub.Reg(asm.R3, asm.R2), // time since
			// The run's wall time, when known: the run since the last
			// switch is the one ending (a thread comes to a CPU once
			// between two switches), and longer than the time since
			// the last switch, it is not (its arrival is an older
			// run's: not kept by this kernel). It holds the CPU time,
			// and the time taken from the run (steal, interrupts).
			asm.LoadMem(asm.R2, asm.R10, slotArrival, asm.DWord),
			asm.JEq.Imm(asm.R2, 0, "cputime"),
			asm.LoadMem(asm.R5, asm.R10, slotClock, asm.DWord),
			asm.JLT.Reg(asm.R5, asm.R2, "cputime"),
			asm.Sub.Reg(asm.R5, asm.R2),
			asm.JGT.Reg(asm.R5, asm.R3, "cputime"),
			// A run shorter than its CPU time by more than the two
			// clocks' skew is not the one ending (a switch was not
			// seen); shorter by less, it is, with no time taken.
			asm.Mov.Reg(asm.R2, asm.R5),
			asm.Add.Imm(asm.R2, runSkew),
			asm.JLT.Reg(asm.R2, asm.R0, "cputime"),
			asm.JLT.Reg(asm.R5, asm.R0, "runwall"),
			asm.Mov.Reg(asm.R0, asm.R5),
		)
		runWall := count(cntRunWall)
		runWall[0] = runWall[0].WithSymbol("runwall")
		ins = append(ins, runWall...)
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R10, slotWall, asm.DWord),
			asm.Sub.Reg(asm.R3, asm.R0).WithSymbol("cputime"),
			asm.JSGE.Imm(asm.R3, 0, "nospan"),
			asm.Mov.Imm(asm.R3, 0),
			asm.LoadMem(asm.R2, asm.R1, wallAcc, asm.DWord).WithSymbol("nospan"),
			asm.Add.Reg(asm.R3, asm.R2),
			// This switch is the thread's last from now on.
			asm.LoadMem(asm.R2, asm.R6, int16(recOff+timeOff), asm.DWord),
			asm.StoreMem(asm.R1, wallOut, asm.R2, asm.DWord),
			asm.LoadMem(asm.R2, asm.R6, int16(recOff+ranOff), asm.DWord),
			asm.StoreMem(asm.R1, wallRan, asm.R2, asm.DWord),
			// The stack the last record sent: its time adds up, and
			// nothing is sent.
			asm.LoadMem(asm.R2, asm.R1, wallHash, asm.DWord),
			asm.JNE.Reg(asm.R2, asm.R4, "changed"),
			asm.StoreMem(asm.R1, wallAcc, asm.R3, asm.DWord),
		)
		ins = append(ins, count(cntSame)...)
		ins = append(ins, asm.Ja.Label("exit"))
		ins = append(ins,
			// Another stack: the record says the time off a CPU under
			// the last.
			asm.StoreMem(asm.R6, int16(recOff+offOff), asm.R3, asm.DWord).WithSymbol("changed"),
			asm.StoreImm(asm.R6, int16(recOff+flagsOff), flagSwitch, asm.Word),
		)
		// (Read for a record sent only.)
		ins = append(ins, gcFlags...)
	}
	if p.maxStack > 0 {
		ins = append(ins,
			// The value stack from max(vm_stack, sp-maxStack) to the
			// innermost frame's sp, after the triples.
			asm.LoadMem(asm.R3, asm.R6, int16(int64(raw)+p.cfpSP), asm.DWord), // sp
			asm.LoadMem(asm.R1, asm.R10, vmStackSlot, asm.DWord),
			asm.JLT.Reg(asm.R3, asm.R1, "send"),
			asm.JGT.Reg(asm.R3, asm.R9, "send"),
			asm.Mov.Reg(asm.R2, asm.R3),
			asm.Sub.Reg(asm.R2, asm.R1), // bytes from vm_stack to sp
			asm.JLE.Imm(asm.R2, int32(p.maxStack), "stackfits"),
			asm.Mov.Imm(asm.R2, int32(p.maxStack)),
			asm.Mov.Reg(asm.R1, asm.R3).WithSymbol("stackfits"),
			asm.Sub.Reg(asm.R1, asm.R2), // R1: where the copy starts
			asm.StoreMem(asm.R6, int16(recOff+16), asm.R1, asm.DWord),
			asm.StoreMem(asm.R6, int16(recOff+24), asm.R2, asm.Word),
			asm.Mov.Reg(asm.R3, asm.R1),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Add.Reg(asm.R1, asm.R7),
			asm.Add.Imm(asm.R1, recOff),
			asm.Mov.Reg(asm.R9, asm.R2), // R9: the copy's bytes
			asm.FnProbeReadUser.Call(),
			asm.JEq.Imm(asm.R0, 0, "stackread"),
			asm.StoreImm(asm.R6, int16(recOff+24), 0, asm.Word),
			asm.Ja.Label("send"),
			asm.Add.Reg(asm.R7, asm.R9).WithSymbol("stackread"),
		)
	}
	ins = append(ins,
		// No wakeup: user space drains the ring on its own clock,
		// unless a quarter of it is waiting.
		asm.LoadMapPtr(asm.R1, eventsFD).WithSymbol("send"),
		asm.Mov.Imm(asm.R2, bpfRBAvailData),
		asm.FnRingbufQuery.Call(),
		asm.Mov.Imm(asm.R4, bpfRBNoWakeup),
		asm.JLE.Imm(asm.R0, p.wakeAt, "quiet"),
		asm.Mov.Imm(asm.R4, bpfRBForceWakeup),
		// The record, as long as its contents.
		asm.LoadMapPtr(asm.R1, eventsFD).WithSymbol("quiet"),
		asm.Mov.Reg(asm.R2, asm.R6),
		asm.Add.Imm(asm.R2, recOff),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.FnRingbufOutput.Call(),
		asm.JNE.Imm(asm.R0, 0, "full"),
	)
	ins = append(ins, count(cntEmitted)...)
	if switched {
		ins = append(ins,
			// The thread's state: the stack sent, no time under it yet.
			asm.LoadMem(asm.R1, asm.R10, slotWall, asm.DWord),
			asm.LoadMem(asm.R2, asm.R10, slotHash, asm.DWord),
			asm.StoreMem(asm.R1, wallHash, asm.R2, asm.DWord),
			asm.Mov.Imm(asm.R2, 0),
			asm.StoreMem(asm.R1, wallAcc, asm.R2, asm.DWord),
		)
	}
	ins = append(ins, asm.Ja.Label("exit"))
	if switched {
		ins = append(ins, countExit("nowall", cntNoThread)...)
		ins[len(ins)-1] = asm.Ja.Label("exit") // no state to forget
	}
	ins = append(ins, countExit("nothread", cntNoThread)...)
	ins = append(ins, countExit("ecfault", cntECFault)...)
	ins = append(ins, countExit("bounds", cntBadBounds)...)
	ins = append(ins, countExit("framesfault", cntFramesRead)...)
	ins = append(ins, countExit("full", cntRingFull)...)
	if switched {
		ins = append(ins,
			asm.LoadMem(asm.R1, asm.R10, slotWall, asm.DWord).WithSymbol("forget"),
			asm.Mov.Imm(asm.R2, 0),
			asm.StoreMem(asm.R1, wallOut, asm.R2, asm.DWord),
			asm.StoreMem(asm.R1, wallHash, asm.R2, asm.DWord),
			asm.StoreMem(asm.R1, wallAcc, asm.R2, asm.DWord),
		)
	}
	ins = append(ins,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	return ins
}
