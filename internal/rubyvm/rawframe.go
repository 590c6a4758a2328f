package rubyvm

// DecodeControlFrame decodes one control frame whose iseq, pc and ep
// words another reader copied out of the target (a BPF program's frame
// walk), as a stack read decodes the frames it reads itself. ok is false
// for frames Ruby's own backtraces skip. The frame's environment (its
// method entry, for the label) is read from the target now, not as it
// was when the words were copied.
func (v *VM) DecodeControlFrame(iseq, pc, ep uint64) (f Frame, ok bool, err error) {
	L := v.Layout
	cf := make([]byte, L.CFPSize)
	put := func(off int64, val uint64) {
		for i := int64(0); i < 8; i++ {
			cf[off+i] = byte(val >> (8 * i))
		}
	}
	put(L.CFPIseq, iseq)
	put(L.CFPPC, pc)
	put(L.CFPEP, ep)
	return v.frame(cf)
}
