package rubyvm

// FailDecoding returns opt with a hook that makes the decoding of every
// object whose address fail answers true fail as a decoder bug would.
func FailDecoding(opt DumpOptions, fail func(addr uint64) bool) DumpOptions {
	opt.failDecode = fail
	return opt
}

// CachedIseq finds, among the iseqs the VM keeps, the one labelled label:
// its address, and whether the VM took it for young.
func (v *VM) CachedIseq(label string) (addr uint64, young, ok bool) {
	for a, info := range v.iseqs {
		if info.label == label {
			return a, info.young, true
		}
	}
	return 0, false, false
}

// CacheCounts returns the collector's counts as the VM's caches last saw
// them, and whether it has read them.
func (v *VM) CacheCounts() (count, major uint64, read bool) {
	return v.gen.count, v.gen.major, v.gen.read
}
