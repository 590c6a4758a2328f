package rubyvm

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

// IseqLines returns the line of every instruction position of the kept
// iseq labelled label (as the line of a frame whose pc is past it), or
// nil when the VM keeps no such iseq.
func (v *VM) IseqLines(label string) ([]int, error) {
	for _, info := range v.iseqs {
		if info.label != label {
			continue
		}
		var lines []int
		for pos := uint64(1); pos <= info.size; pos++ {
			line, err := v.line(info, info.encoded+8*pos)
			if err != nil {
				return nil, err
			}
			lines = append(lines, line)
		}
		return lines, nil
	}
	return nil, nil
}

// VMPtrAddr returns the address of ruby_current_vm_ptr, however it was
// found (for the tests outside the package).
func (v *VM) VMPtrAddr() uint64 { return v.vmPtrAddr }
