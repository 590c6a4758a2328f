// Package rubyvm turns the bytes of a Ruby process into Ruby threads, frames
// and objects. It finds the VM through the Ruby image's symbols, reads the
// version from the process and takes struct layouts from DWARF or from the
// built-in tables.
package rubyvm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/rubyvm/layouts"
	"github.com/rbscope/rbscope/internal/target"
)

// Errors callers tell apart.
var (
	// ErrNotRuby means the process has no Ruby VM in it.
	ErrNotRuby = errors.New("not a Ruby process")
	// ErrUnsupported means rbscope has no layout for the process's Ruby.
	ErrUnsupported = errors.New("Ruby version not supported")
)

// MinFamily is the oldest Ruby version family rbscope reads.
const MinFamily = "3.1"

// VM is a Ruby VM found in a target.
type VM struct {
	T      target.Target
	Image  *binary.Image
	Layout *layout.Layout
	// Version is RUBY_VERSION ("3.1.7"); Description is RUBY_DESCRIPTION.
	Version     string
	Description string

	vmPtrAddr       uint64 // &ruby_current_vm_ptr
	symbolsAddr     uint64 // &ruby_global_symbols (0 when not found)
	symbolsLooked   bool   // findGlobalSymbols has run
	globalTbl       uint64 // &rb_global_tbl (0 when not found)
	globalTblLooked bool   // findGlobalTbl has run
	m               mem
	ids             map[uint64]string
	classNames      map[uint64]string
	iseqs           map[uint64]*iseqInfo
	lines           map[[2]uint64]int // (iseq, pc) -> line
	cfuncs          map[uint64]string // ep[me_cref] of a C frame -> label
	objspaceOff     int64             // offset of rb_vm_t.objspace, once checked (0: not yet)
}

var rubyLib = regexp.MustCompile(`(^|/)libruby[-.0-9a-z_]*\.so`)

// FindImage returns the path of the file that holds the Ruby VM: libruby
// for a shared build, else the executable if it defines ruby_version.
func FindImage(t target.Target, maps []target.Mapping) (string, error) {
	var exe string
	for _, m := range maps {
		if rubyLib.MatchString(m.Path) {
			return strings.TrimSuffix(m.Path, " (deleted)"), nil
		}
		if exe == "" && strings.HasPrefix(m.Path, "/") {
			exe = strings.TrimSuffix(m.Path, " (deleted)")
		}
	}
	if exe == "" {
		return "", fmt.Errorf("pid %d: %w (no executable mapped)", t.PID(), ErrNotRuby)
	}
	return exe, nil
}

// Open finds the Ruby VM in t and chooses its layout.
func Open(t target.Target) (*VM, error) {
	maps, err := t.Mappings()
	if err != nil {
		return nil, err
	}
	path, err := FindImage(t, maps)
	if err != nil {
		return nil, err
	}
	im, err := binary.Open(t, maps, path)
	if err != nil {
		return nil, err
	}
	if !im.HasSymbol("ruby_version") || !(im.HasSymbol("ruby_current_vm_ptr") || im.HasSymbol("ruby_vm_at_exit")) {
		im.Close()
		return nil, fmt.Errorf("pid %d: %w (it runs %s)", t.PID(), ErrNotRuby, filepath.Base(path))
	}
	v := &VM{T: t, Image: im, m: mem{t: t}}
	v.ForgetCaches()
	if v.Version, err = v.symbolString("ruby_version", 32); err != nil {
		return nil, err
	}
	v.Description, _ = v.symbolString("ruby_description", 256)
	fam, err := Family(v.Version)
	if err != nil {
		return nil, err
	}
	if v.Layout, err = chooseLayout(im, fam, v.Version); err != nil {
		return nil, err
	}
	if v.vmPtrAddr, err = v.findVMPtr(maps); err != nil {
		return nil, err
	}
	if err := v.sanityCheck(maps); err != nil {
		return nil, err
	}
	return v, nil
}

// ForgetCaches drops what was learned about instruction sequences, lines,
// methods and names. Long-running readers (the sampler) call it now and then
// so that memory the GC freed and reused is read afresh.
func (v *VM) ForgetCaches() {
	v.ids = map[uint64]string{}
	v.classNames = map[uint64]string{}
	v.iseqs = map[uint64]*iseqInfo{}
	v.lines = map[[2]uint64]int{}
	v.cfuncs = map[uint64]string{}
}

// Close releases the image.
func (v *VM) Close() error { return v.Image.Close() }

func (v *VM) symbolString(name string, max int) (string, error) {
	addr, size, err := v.Image.Symbol(name)
	if err != nil {
		return "", err
	}
	if size > 0 && int(size) < max {
		max = int(size)
	}
	b, err := v.m.read(addr, max)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

// Family returns "MAJOR.MINOR" of a Ruby version string, refusing versions
// older than MinFamily.
func Family(version string) (string, error) {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("unrecognised Ruby version %q: %w", version, ErrUnsupported)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("unrecognised Ruby version %q: %w", version, ErrUnsupported)
	}
	if major < 3 || (major == 3 && minor < 1) {
		return "", fmt.Errorf("Ruby %s: %w (rbscope reads Ruby %s and newer)", version, ErrUnsupported, MinFamily)
	}
	return fmt.Sprintf("%d.%d", major, minor), nil
}

// chooseLayout prefers the image's own DWARF, then the built-in table.
func chooseLayout(im *binary.Image, family, version string) (*layout.Layout, error) {
	var dwarfErr error
	if d := im.DWARF(); d != nil {
		l, err := layout.FromDWARF(d, family, "dwarf:"+im.Path)
		if err == nil {
			return l, nil
		}
		dwarfErr = err
	}
	if l := layouts.For(family); l != nil {
		return l, nil
	}
	note := ""
	if dwarfErr != nil {
		note = "; its DWARF was unusable: " + strings.SplitN(dwarfErr.Error(), "\n", 2)[0]
	}
	return nil, fmt.Errorf("Ruby %s: %w: %s has no debug info and rbscope has no built-in layout for %s (built-in: %s; any Ruby >= %s built with -g works)%s",
		version, ErrUnsupported, im.Path, family, strings.Join(layouts.Families(), ", "), MinFamily, note)
}

// vmPtr reads ruby_current_vm_ptr.
func (v *VM) vmPtr() (uint64, error) {
	p, err := v.m.u64(v.vmPtrAddr)
	if err != nil {
		return 0, fmt.Errorf("reading ruby_current_vm_ptr: %w", err)
	}
	if p == 0 {
		return 0, fmt.Errorf("the Ruby VM is not running yet (ruby_current_vm_ptr is NULL): %w", ErrGarbage)
	}
	return p, nil
}

// sanityCheck catches a layout that does not fit the process before any
// frame is printed: the main thread's VM stack must lie in mapped memory
// and its control frame pointer inside that stack.
func (v *VM) sanityCheck(maps []target.Mapping) error {
	L := v.Layout
	vm, err := v.vmPtr()
	if err != nil {
		return err
	}
	th, err := v.m.u64(at(vm, L.VMRactorMainThread))
	if err != nil {
		return fmt.Errorf("layout check (Ruby %s, %s): reading the main thread: %w", v.Version, L.Source, err)
	}
	ec, err := v.m.u64(at(th, L.ThreadEC))
	if err != nil {
		return fmt.Errorf("layout check (Ruby %s, %s): reading the main thread's execution context: %w", v.Version, L.Source, err)
	}
	st, err := v.readStackBounds(ec)
	if err != nil {
		return fmt.Errorf("layout check (Ruby %s, %s) failed: %w", v.Version, L.Source, err)
	}
	if _, ok := target.FindMapping(maps, st.vmStack); !ok {
		return fmt.Errorf("layout check (Ruby %s, %s) failed: main thread's VM stack %#x is outside every mapping", v.Version, L.Source, st.vmStack)
	}
	return nil
}
