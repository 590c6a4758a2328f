package heapdump

import (
	"errors"
	"strings"

	"github.com/rbscope/rbscope/internal/target"
)

// A heap dump follows lengths and pointers the process's memory holds.
// Each object's reads are bounded, but a hostile process can make a
// million objects each claim the most it may: the dump-wide read budget
// keeps that finite. An honest process's dump reads about its data once.
const (
	// budgetBase is read budget every dump gets.
	budgetBase = 1 << 30
	// budgetPerByte is how many bytes a dump may read per byte of
	// writable memory the process has mapped.
	budgetPerByte = 4
	// budgetMax caps the budget whatever the process maps.
	budgetMax = 64 << 30
)

// errReadBudget refuses reads once a dump's budget is spent.
var errReadBudget = errors.New("the heap dump's read budget is spent")

// readBudget returns the read budget of a dump of a process with these
// mappings: 1 GiB plus four times its writable memory, at most 64 GiB.
func readBudget(maps []target.Mapping) int64 {
	var w uint64
	for _, m := range maps {
		if strings.Contains(m.Perms, "w") {
			w += m.End - m.Start
		}
	}
	return int64(min(budgetBase+budgetPerByte*w, budgetMax))
}

// budgeted is a Target whose reads spend a budget; what the target it
// wraps offers beyond Target (a snapshot's slices, a core's registers)
// passes through.
type budgeted struct {
	target.Target
	left  int64
	spent bool
}

// ReadAt reads while the budget lasts.
func (b *budgeted) ReadAt(p []byte, addr uint64) (int, error) {
	if err := b.spend(int64(len(p))); err != nil {
		return 0, err
	}
	return b.Target.ReadAt(p, addr)
}

// spend takes n bytes from the budget, or fails with errReadBudget when
// fewer are left; a nil budget has no end.
func (b *budgeted) spend(n int64) error {
	if b == nil {
		return nil
	}
	if n > b.left {
		b.spent = true
		return errReadBudget
	}
	b.left -= n
	return nil
}

// Slice passes a snapshot's slices through (they cost nothing to read).
func (b *budgeted) Slice(addr uint64, n int) ([]byte, bool) {
	if s, ok := b.Target.(slicer); ok {
		return s.Slice(addr, n)
	}
	return nil, false
}
