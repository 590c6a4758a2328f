package target

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/rbscope/rbscope/internal/testruby"
)

// TestReadBatchCoalesced: a batched read of a Ruby process's code (which
// stands still) gives, range by range, what a read of each range alone
// gives, however its ranges lie: in one page, in pages side by side, far
// apart, overlapping, out of address order; a range that is not mapped
// fails alone, and the ranges after it are read all the same.
func TestReadBatchCoalesced(t *testing.T) {
	rb := testruby.Rubies(t)[0]
	cmd := exec.Command(rb.Bin, "-e", "$stdin.read")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	l, err := Attach(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	maps, err := l.Mappings()
	if err != nil {
		t.Fatal(err)
	}
	var code Mapping
	for _, m := range maps {
		if strings.HasPrefix(m.Perms, "r-x") && m.End-m.Start >= 64<<10 && strings.HasPrefix(m.Path, "/") {
			code = m
			break
		}
	}
	if code.End == 0 {
		t.Fatal("setup: no code mapping of 64 KiB in the Ruby process")
	}
	b := code.Start
	ranges := []struct {
		addr uint64
		n    int
	}{
		{b + 100, 8}, {b + 40, 16}, {b + 300, 64}, // one page, out of order
		{b + 4090, 12},          // across a page boundary
		{b + 4096 + 1000, 100},  // the next page
		{b + 8, 1},              // overlapping none, before all
		{b + 40, 32},            // overlapping the second
		{8, 16},                 // not mapped
		{b + 32<<10, 200},       // far away
		{b + 32<<10 + 150, 100}, // overlapping the one before
		{b + 60<<10, 4096},      // a whole page
		{b + 60<<10 - 3000, 10}, // close before it
		{code.End - 16, 16},     // the mapping's last bytes
	}
	addrs := make([]uint64, len(ranges))
	bufs := make([][]byte, len(ranges))
	ok := make([]bool, len(ranges))
	for i, r := range ranges {
		addrs[i], bufs[i] = r.addr, make([]byte, r.n)
	}
	l.ReadBatch(addrs, bufs, ok)
	for i, r := range ranges {
		want := make([]byte, r.n)
		err := ReadFull(l, want, r.addr)
		if ok[i] != (err == nil) {
			t.Errorf("range %d (%#x, %d bytes): batch ok %v, alone: %v", i, r.addr, r.n, ok[i], err)
			continue
		}
		if ok[i] && !bytes.Equal(bufs[i], want) {
			t.Errorf("range %d (%#x, %d bytes): the batch read other bytes than a read alone", i, r.addr, r.n)
		}
	}
	if ok[7] {
		t.Error("the range at address 8 was read")
	}
}
