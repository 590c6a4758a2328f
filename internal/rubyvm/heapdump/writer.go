package heapdump

import (
	"encoding/binary"
	"fmt"

	"github.com/rbscope/rbscope/internal/heap"
)

// flush writes the collected JSON once there is enough of it (or all of
// it when final).
func (d *dumper) flush(final bool) error {
	if len(d.buf) == 0 || (!final && len(d.buf) < dumpFlush) {
		return nil
	}
	n, err := d.w.Write(d.buf)
	d.stats.Bytes += int64(n)
	d.buf = d.buf[:0]
	if err != nil {
		return fmt.Errorf("writing the dump: %w", err)
	}
	return nil
}

// ref adds a reference if val is a heap object other than the class.
//
// In a heap that holds together every VALUE an object holds is a live
// object; a word that is not (memory torn by a running process, or a
// corrupt or hostile one) is left out, so that garbage costs no output.
func (d *dumper) ref(val uint64) {
	if val != d.klass && d.live(val) {
		d.refs = append(d.refs, val)
	}
}

// refWords adds the references among n VALUEs at addr, read in chunks.
func (d *dumper) refWords(addr uint64, n uint64) error {
	if n > maxDumpElems {
		return errTorn
	}
	for n > 0 {
		k := min(n, dumpChunk)
		b, err := d.read(addr, int(k*8))
		if err != nil {
			return err
		}
		for i := 0; i < len(b); i += 8 {
			d.ref(binary.LittleEndian.Uint64(b[i:]))
		}
		addr += k * 8
		n -= k
	}
	return nil
}

// refSlotWords adds the references among n VALUEs at off in the slot.
func (d *dumper) refSlotWords(slot []byte, off int64, n uint64) error {
	if off < 0 || n > uint64(len(slot)) || off+int64(n)*8 > int64(len(slot)) {
		return errTorn
	}
	for i := uint64(0); i < n; i++ {
		d.ref(le64(slot, off+int64(i)*8))
	}
	return nil
}

// key appends `, "name":`, the start of a field.
func (d *dumper) key(name string) { d.buf = heap.AppendKey(d.buf, name) }

func (d *dumper) field(name string, n uint64) { d.buf = heap.AppendUintField(d.buf, name, n) }

func (d *dumper) flag(name string) { d.buf = heap.AppendFlag(d.buf, name) }

func (d *dumper) strField(name, val string) { d.buf = heap.AppendStringField(d.buf, name, val) }

func (d *dumper) addrField(name string, a uint64) { d.buf = heap.AppendAddrField(d.buf, name, a) }

// dumpRoot is one ROOT line.
type dumpRoot struct {
	name string
	refs []uint64
}

func (d *dumper) rootLine(name string, refs []uint64) {
	d.buf = heap.AppendRootLine(d.buf, name, refs, d.stats.Roots == 0)
	d.stats.Roots++
}
