package heapdump

// FailDecoding returns opt with a hook that makes the decoding of every
// object whose address fail answers true fail as a decoder bug would.
func FailDecoding(opt Options, fail func(addr uint64) bool) Options {
	opt.failDecode = fail
	return opt
}
