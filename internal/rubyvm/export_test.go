package rubyvm

// FailDecoding returns opt with a hook that makes the decoding of every
// object whose address fail answers true fail as a decoder bug would.
func FailDecoding(opt DumpOptions, fail func(addr uint64) bool) DumpOptions {
	opt.failDecode = fail
	return opt
}
