package ebpfsample

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/rbscope/rbscope/internal/rubyvm/layout"
)

// The per-CPU scratch value the program works in: its counters, the
// control frames it copies out of the target in one read, and the record
// it sends to user space: a header, an (iseq, pc, ep) triple a frame, then
// a copy of the top of the thread's value stack (up to the innermost
// frame's sp), where the frames' environments mostly lie, so that user
// space decodes each frame's method entry as it was at the sample.
const (
	numCounters  = 8
	countersSize = numCounters * 8
	headerSize   = 56 // TID, frames copied, frames in all, truncated, value stack base (8), its bytes, 0, GC flags (16), time (8)
	gcFlagsOff   = 32
	timeOff      = 48 // bpf_ktime_get_ns at the sample: CLOCK_MONOTONIC
	gcFlagsMax   = 16
	tripleSize   = 24
)

// Counter indexes in the scratch value.
const (
	cntRuns       = iota // the program ran on a thread of the target
	cntEmitted           // a record went to the ring buffer
	cntNoThread          // the thread is not one of the Ruby threads listed
	cntECFault           // the execution context could not be read
	cntBadBounds         // cfp outside the VM stack or off a frame boundary
	cntFramesRead        // the control frames could not be read
	cntRingFull          // the ring buffer had no room
	cntTruncated         // more frames than MaxFrames: the outermost left out
)

// progParams are the constants the program is built with: where the
// target's Ruby keeps what the walk reads (from its Layout) and the size
// of the walk.
type progParams struct {
	tgid      int32
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
}

// newProgParams takes the program's offsets from the target's Layout.
func newProgParams(pid int, L *layout.Layout, maxFrames int, maxStack int64, gcFlags uint64, gcFlagsLen int) (progParams, error) {
	p := progParams{
		tgid: int32(pid), maxFrames: maxFrames, maxStack: maxStack, gcFlags: gcFlags, gcFlagsLen: int64(gcFlagsLen),
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

func (p progParams) rawOff() int64  { return countersSize }
func (p progParams) rawSize() int64 { return int64(p.maxFrames) * p.cfpSize }
func (p progParams) recOff() int64  { return p.rawOff() + p.rawSize() }
func (p progParams) recSize() int64 {
	return headerSize + int64(p.maxFrames)*tripleSize + p.maxStack
}

// scratchSize is the size of the per-CPU scratch value.
func (p progParams) scratchSize() int64 { return p.recOff() + p.recSize() }

// bpfRBNoWakeup is BPF_RB_NO_WAKEUP, a flag of bpf_ringbuf_output.
const bpfRBNoWakeup = 1

// Stack slots (offsets from the frame pointer R10).
const (
	slotKey   = -8  // a u32 map key
	slotEC    = -16 // the execution context's address
	ecBufSize = 48
	slotECBuf = -16 - ecBufSize // the execution context fields read
)

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
func program(p progParams, threadsFD, scratchFD, eventsFD int) asm.Instructions {
	lo, hi := p.ecSpan()
	count := func(idx int) asm.Instructions { // R6 is the scratch value
		return asm.Instructions{
			asm.LoadMem(asm.R1, asm.R6, int16(idx*8), asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R6, int16(idx*8), asm.R1, asm.DWord),
		}
	}
	countExit := func(label string, idx int) asm.Instructions {
		ins := count(idx)
		ins[0] = ins[0].WithSymbol(label)
		return append(ins, asm.Ja.Label("exit"))
	}
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
		asm.LoadMapPtr(asm.R1, scratchFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, slotKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R6, asm.R0),
	)
	ins = append(ins, count(cntRuns)...)
	ins = append(ins,
		// The thread's &th->ec.
		asm.StoreMem(asm.R10, slotKey, asm.R7, asm.Word),
		asm.LoadMapPtr(asm.R1, threadsFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, slotKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "nothread"),
		asm.LoadMem(asm.R3, asm.R0, 0, asm.DWord),
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
		asm.StoreImm(asm.R6, int16(recOff+28), 0, asm.Word),
		asm.Mov.Reg(asm.R8, asm.R1), // R8: frames to copy
		asm.JLE.Imm(asm.R1, int32(p.maxFrames), "fits"),
		asm.Mov.Imm(asm.R8, int32(p.maxFrames)),
		asm.StoreImm(asm.R6, int16(recOff+12), 1, asm.Word),
	)
	ins = append(ins, count(cntTruncated)...)
	ins = append(ins,
		asm.StoreMem(asm.R6, int16(recOff+4), asm.R8, asm.Word).WithSymbol("fits"),
		asm.JEq.Imm(asm.R8, 0, "bounds"),
		// When the sample was taken, for the profile's timeline (the
		// ring buffer is drained a tenth of a second later).
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R6, int16(recOff+timeOff), asm.R0, asm.DWord),
	)
	for w := int16(0); w < gcFlagsMax/4; w++ {
		ins = append(ins, asm.StoreImm(asm.R6, int16(recOff+gcFlagsOff)+4*w, 0, asm.Word))
	}
	if p.gcFlagsLen > 0 {
		ins = append(ins,
			// The collector's flags (zeros when they cannot be read).
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Add.Imm(asm.R1, recOff+gcFlagsOff),
			asm.Mov.Imm(asm.R2, int32(p.gcFlagsLen)),
			asm.LoadImm(asm.R3, int64(p.gcFlags), asm.DWord),
			asm.FnProbeReadUser.Call(),
		)
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
		// Each frame's iseq, pc and ep into the record.
		asm.Mov.Imm(asm.R7, 0), // R7: frame index
		asm.JGE.Reg(asm.R7, asm.R8, "copied").WithSymbol("loop"),
		asm.JGE.Imm(asm.R7, int32(p.maxFrames), "copied"),
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.Mul.Imm(asm.R1, int32(p.cfpSize)),
		asm.Add.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Mul.Imm(asm.R2, tripleSize),
		asm.Add.Reg(asm.R2, asm.R6),
		asm.LoadMem(asm.R3, asm.R1, int16(int64(raw)+p.cfpIseq), asm.DWord),
		asm.StoreMem(asm.R2, int16(recOff+headerSize), asm.R3, asm.DWord),
		asm.LoadMem(asm.R3, asm.R1, int16(int64(raw)+p.cfpPC), asm.DWord),
		asm.StoreMem(asm.R2, int16(recOff+headerSize+8), asm.R3, asm.DWord),
		asm.LoadMem(asm.R3, asm.R1, int16(int64(raw)+p.cfpEP), asm.DWord),
		asm.StoreMem(asm.R2, int16(recOff+headerSize+16), asm.R3, asm.DWord),
		asm.Add.Imm(asm.R7, 1),
		asm.Ja.Label("loop"),
		// R7: the record's bytes so far.
		asm.Mov.Reg(asm.R7, asm.R8).WithSymbol("copied"),
		asm.Mul.Imm(asm.R7, tripleSize),
		asm.Add.Imm(asm.R7, headerSize),
	)
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
		// The record, as long as its contents.
		asm.LoadMapPtr(asm.R1, eventsFD).WithSymbol("send"),
		asm.Mov.Reg(asm.R2, asm.R6),
		asm.Add.Imm(asm.R2, recOff),
		asm.Mov.Reg(asm.R3, asm.R7),
		// No wakeup: user space drains the ring on its own clock.
		asm.Mov.Imm(asm.R4, bpfRBNoWakeup),
		asm.FnRingbufOutput.Call(),
		asm.JNE.Imm(asm.R0, 0, "full"),
	)
	ins = append(ins, count(cntEmitted)...)
	ins = append(ins, asm.Ja.Label("exit"))
	ins = append(ins, countExit("nothread", cntNoThread)...)
	ins = append(ins, countExit("ecfault", cntECFault)...)
	ins = append(ins, countExit("bounds", cntBadBounds)...)
	ins = append(ins, countExit("framesfault", cntFramesRead)...)
	ins = append(ins, countExit("full", cntRingFull)...)
	ins = append(ins,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	return ins
}
