package rubyvm

// DecodeControlFrame decodes one control frame whose iseq, pc and ep
// words another reader copied out of the target (a BPF program's frame
// walk), as a stack read decodes the frames it reads itself. stack, when
// not empty, is a copy of the thread's value stack from stackBase taken
// with the frame: the environments that lie in it are read from it, as a
// stack read does with its own copy; what lies outside (an environment
// moved to the heap, method entries, iseqs) is read from the target now.
// ok is false for frames Ruby's own backtraces skip.
func (v *VM) DecodeControlFrame(iseq, pc, ep, stackBase uint64, stack []byte) (f Frame, ok bool, err error) {
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
	if len(stack) > 0 {
		v.env = valueStack{base: stackBase, b: stack}
		defer func() { v.env = valueStack{} }()
	}
	return v.frame(cf)
}

// EnvWords returns the environment data words of the frame whose ep is ep
// (from VM_ENV_DATA_INDEX_ME_CREF to VM_ENV_DATA_INDEX_FLAGS) when they lie
// in stack, a copy of the value stack from stackBase: what, with the
// frame's iseq and pc, decides how DecodeControlFrame decodes it.
func (v *VM) EnvWords(ep, stackBase uint64, stack []byte) (words [3]uint64, ok bool) {
	L := v.Layout
	for i, idx := range [3]int64{L.EnvIndexMECref, L.EnvIndexSpecval, L.EnvIndexFlags} {
		addr := uint64(int64(ep) + idx*8)
		if addr < stackBase || addr-stackBase+8 > uint64(len(stack)) {
			return words, false
		}
		words[i] = le64(stack, int64(addr-stackBase))
	}
	return words, true
}
