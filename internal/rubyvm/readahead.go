package rubyvm

// readAhead learns which ranges one ReadThreads call reads after its walk
// of the threads (the threads' second reads, their execution contexts,
// the frames, value stacks and environments of the stacks it walks), so
// that the next call reads them with the walk, in its first batched read
// (speculate): a process whose threads stand about where they stood then
// is read in one system call, not three. It keeps addresses only: every
// byte it hands out was read in the call that uses it, and is used only
// in that call (end).
type readAhead struct {
	// next are the ranges the call under way used, for the next call to
	// read ahead; want are those this call read ahead (the last call's
	// next), data and ok what was read of them.
	next, want []envAt
	data       [][]byte
	ok         []bool
	// active is set during a call (begin to end); on while the ranges
	// read ahead may be used: from the walk that read them to the end of
	// the call.
	active, on bool
	// cursor is where the next take looks first: the ranges are used in
	// about the order they were noted.
	cursor int
	// addrs, bufs and oks are the walk's batched read with the ranges
	// read ahead (speculate).
	addrs []uint64
	bufs  [][]byte
	oks   []bool
}

// Bounds of what one call reads ahead.
const (
	maxReadAheadRanges = 64
	maxReadAheadBytes  = 512 << 10
)

// begin starts a call: the ranges the last call used are the ones to read
// ahead.
func (ra *readAhead) begin() {
	ra.want = append(ra.want[:0], ra.next...)
	ra.next = ra.next[:0]
	ra.active, ra.on, ra.cursor = true, false, 0
	for len(ra.data) < len(ra.want) {
		ra.data = append(ra.data, nil)
	}
	for i, r := range ra.want {
		ra.data[i] = grown(&ra.data[i], r.n)
	}
}

// end ends the call: nothing read ahead is used after it.
func (ra *readAhead) end() { ra.active, ra.on = false, false }

// batch returns the walk's batched read (addrs, bufs) with the ranges to
// read ahead after it, and the oks to read it into; read tells, once the
// read is made, whether the walk found the threads where they were.
func (ra *readAhead) batch(addrs []uint64, bufs [][]byte) ([]uint64, [][]byte, []bool) {
	ra.addrs = append(ra.addrs[:0], addrs...)
	ra.bufs = append(ra.bufs[:0], bufs...)
	for i, r := range ra.want {
		if !ra.active {
			break // outside a call: nothing to read ahead
		}
		ra.addrs = append(ra.addrs, r.addr)
		ra.bufs = append(ra.bufs, ra.data[i][:r.n])
	}
	for len(ra.oks) < len(ra.bufs) {
		ra.oks = append(ra.oks, false)
	}
	ra.oks = ra.oks[:len(ra.bufs)]
	return ra.addrs, ra.bufs, ra.oks
}

// read marks the ranges read ahead by the batch (which began with n
// ranges of the walk's own) usable, when the walk kept what it read.
func (ra *readAhead) read(n int, walkOK bool) {
	ra.ok = append(ra.ok[:0], ra.oks[n:]...)
	ra.on = ra.active && walkOK && len(ra.ok) == len(ra.want)
}

// take returns n bytes at addr when a range read ahead holds them.
func (ra *readAhead) take(addr uint64, n int) ([]byte, bool) {
	if !ra.on {
		return nil, false
	}
	for k := 0; k < len(ra.want); k++ {
		i := (ra.cursor + k) % len(ra.want)
		r := ra.want[i]
		if ra.ok[i] && addr >= r.addr && addr-r.addr+uint64(n) <= uint64(r.n) {
			ra.cursor = i + 1
			return ra.data[i][addr-r.addr : addr-r.addr+uint64(n)], true
		}
	}
	return nil, false
}

// note records that the call under way used n bytes at addr, for the next
// call to read ahead.
func (ra *readAhead) note(addr uint64, n int) {
	if !ra.active || n <= 0 || addr == 0 || len(ra.next) >= maxReadAheadRanges {
		return
	}
	total := n
	for _, r := range ra.next {
		if r.addr == addr && r.n >= n {
			return
		}
		total += r.n
	}
	if total <= maxReadAheadBytes {
		ra.next = append(ra.next, envAt{addr: addr, n: n})
	}
}
