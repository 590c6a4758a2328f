package rubyvm

import (
	"encoding/binary"

	"github.com/rbscope/rbscope/internal/target"
)

// walked is one walk of the VM's threads: its thread groups, the main
// thread's rb_thread_t, and each group's threads (addrs) with their structs
// as read (blocks, threadBlockLen bytes each).
type walked struct {
	groups []threadGroup
	main   uint64
	addrs  [][]uint64
	blocks [][][]byte
}

// walkCache holds the addresses the last walk found: the VM, its ractors
// and each group's threads, in list order.
type walkCache struct {
	vm      uint64
	ractors []uint64
	threads [][]uint64
	// spec is the batched read speculate makes, built once for these
	// addresses and read into again at every walk.
	spec *specRead
}

// specRead is speculate's batched read: the ranges and the buffers they
// are read into, the VM's span, each ractor's and each thread's block.
type specRead struct {
	addrs  []uint64
	bufs   [][]byte
	ok     []bool
	vs     span
	rss    []span
	blocks [][][]byte
	groups []threadGroup // the walk's groups (speculate)
}

// specReadOf lays out the batched read of c's addresses.
func (v *VM) specReadOf(c *walkCache) (*specRead, error) {
	vs, err := spanOf(vmFields(v.Layout)...)
	if err != nil {
		return nil, err
	}
	r := &specRead{vs: vs, addrs: []uint64{v.vmPtrAddr, at(c.vm, vs.lo)}, bufs: [][]byte{make([]byte, 8), vs.b}}
	for _, ractor := range c.ractors {
		rs, err := spanOf(ractorFields(v.Layout)...)
		if err != nil {
			return nil, err
		}
		r.rss = append(r.rss, rs)
		r.addrs, r.bufs = append(r.addrs, at(ractor, rs.lo)), append(r.bufs, rs.b)
	}
	size := int(threadBlockLen(v.Layout))
	for _, ths := range c.threads {
		blocks := make([][]byte, len(ths))
		for i, th := range ths {
			blocks[i] = make([]byte, size)
			r.addrs, r.bufs = append(r.addrs, th), append(r.bufs, blocks[i])
		}
		r.blocks = append(r.blocks, blocks)
	}
	r.ok = make([]bool, len(r.bufs))
	return r, nil
}

// walkThreads walks every thread group's list of threads. The lists are
// linked (each node found in the one before), which costs one read per
// thread; but a process's threads seldom change between two samples, so
// the walk first reads, in one batched read, everything at the addresses
// the last walk found, and keeps it when every link checks out: the VM
// pointer, each ractor's next node, each thread's next node, end to end.
// Otherwise it walks node by node, and keeps what it found for the next
// time. A walk that fails returns what it found before the failure.
func (v *VM) walkThreads() (walked, error) {
	if w, ok := v.speculate(); ok {
		return w, nil
	}
	v.walk = walkCache{}
	vm, err := v.VMPtr()
	if err != nil {
		return walked{}, err
	}
	groups, mainThread, err := v.threadGroups(vm)
	if err != nil {
		return walked{}, err
	}
	w := walked{groups: groups, main: mainThread}
	c := walkCache{vm: vm}
	for _, g := range groups {
		addrs, blocks, err := v.threadBlocks(g)
		w.addrs, w.blocks = append(w.addrs, addrs), append(w.blocks, blocks)
		if err != nil {
			return w, err
		}
		if g.ractor != 0 {
			c.ractors = append(c.ractors, g.ractor)
		}
		c.threads = append(c.threads, addrs)
	}
	v.walk = c
	return w, nil
}

// speculate reads the VM pointer, the VM's, the ractors' and the threads'
// fields at the addresses of the last walk, in one batched read, and checks
// every link of the lists; ok is false when any read fails or any link
// differs (threads born or ended since).
func (v *VM) speculate() (walked, bool) {
	c := v.walk
	L := v.Layout
	if c.vm == 0 || len(c.threads) == 0 || (L.VMRactorSet >= 0) != (len(c.ractors) > 0) {
		return walked{}, false
	}
	if c.spec == nil {
		r, err := v.specReadOf(&v.walk)
		if err != nil {
			return walked{}, false
		}
		v.walk.spec = r
	}
	r := v.walk.spec
	// The ranges the last call read after its walk are read with it.
	addrs, bufs, oks := v.ra.batch(r.addrs, r.bufs)
	target.ReadBatch(v.m.t, addrs, bufs, oks)
	copy(r.ok, oks)
	v.ra.read(len(r.ok), false)
	for _, o := range r.ok {
		if !o {
			return walked{}, false
		}
	}
	vs, rss, bufs := r.vs, r.rss, r.bufs
	// The groups go into a slice kept between walks.
	w := walked{addrs: c.threads, blocks: r.blocks, groups: r.groups[:0]}
	if binary.LittleEndian.Uint64(bufs[0]) != c.vm {
		return walked{}, false
	}
	w.main = vs.u64(L.VMRactorMainThread)
	next := L.ListNodeNext
	if L.VMRactorSet < 0 {
		w.groups = append(w.groups, vmGroup(v.Layout, c.vm, vs))
	} else {
		// The ractors, in list order from the VM's list head back to it.
		head := at(c.vm, L.VMRactorSet)
		node := vs.u64(field(L.VMRactorSet, next))
		for i, r := range c.ractors {
			if node != r+uint64(L.RactorVMListNode) {
				return walked{}, false
			}
			var g threadGroup
			g, node = ractorGroup(v.Layout, r, rss[i])
			w.groups = append(w.groups, g)
		}
		if node != head {
			return walked{}, false
		}
	}
	r.groups = w.groups
	if len(w.groups) != len(c.threads) {
		return walked{}, false
	}
	for gi, g := range w.groups {
		node := g.first
		for i, th := range c.threads[gi] {
			if node != th+uint64(L.ThreadListNode) {
				return walked{}, false
			}
			node = le64(w.blocks[gi][i], L.ThreadListNode+next)
		}
		if node != g.head {
			return walked{}, false
		}
	}
	v.ra.read(len(r.ok), true)
	return w, true
}
