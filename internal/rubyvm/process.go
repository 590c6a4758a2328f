// Package rubyvm turns the bytes of a Ruby process into Ruby threads, frames
// and objects. It finds the VM through the Ruby image's symbols, reads the
// version from the process and takes struct layouts from DWARF or from the
// built-in tables. Its reader of objects (heap pages, object headers, class
// names, IDs, id tables, shapes, what the roots hold) is exported for the
// heap dump, rubyvm/heapdump, which reads every object through it.
package rubyvm

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rbscope/rbscope/internal/arch"
	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/procfs"
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
	// ErrLayoutMismatch means the layout chosen for the process's Ruby
	// fails an invariant the VM keeps: rbscope refuses to read through it.
	ErrLayoutMismatch = errors.New("the layout does not fit this process")
)

// MinFamily is the oldest Ruby version family rbscope reads.
const MinFamily = "2.7"

// VM is a Ruby VM found in one process (or core). What is true of its Ruby
// image whichever process maps it (symbols, the layout chosen from the
// image's debug information or the built-in tables, where the globals lie)
// is its Build, shared; the VM keeps what is this process's: its target,
// its copy of the image (with its load bias), the version read from its
// memory, the layout once checked against its memory (perhaps Adjusted),
// the globals' run-time addresses, and the caches of what its memory holds
// (IDs, class names, instruction sequences, the object space).
//
// A VM is used by one goroutine at a time. How a read goes (frame budget,
// exec-loop boundaries) is said by options of the call (ReadOption).
type VM struct {
	T target.Target
	// Image is this process's copy of the Ruby image: its Bias is this
	// process's load bias. Symbols are best looked up through VM.Symbol,
	// which reads them once per Build.
	Image *binary.Image
	// Layout is the layout this process is read through: its Build's
	// choice, checked against the process's memory when it was opened.
	Layout *layout.Layout
	// Version is RUBY_VERSION ("3.1.7"); Description is RUBY_DESCRIPTION.
	Version     string
	Description string

	// VersionFrom says where Version came from when it was not the
	// process's ruby_version ("--force-version", the ruby_description
	// string, or how its heap proved it: proveRelease), or is "".
	VersionFrom string
	// LayoutNote says, in one line, that the built-in table was chosen for
	// a patch release rbscope has no facts of (and which release's layout
	// it reads with), or is "".
	LayoutNote string

	build           *Build            // what is known of the image, shared
	vmPtrAddr       uint64            // &ruby_current_vm_ptr
	located         map[string]uint64 // what locate found, by symbol, run-time (0: not found)
	locatedHow      map[string]FoundBy
	maps            []target.Mapping // the mappings when the VM was opened
	m               mem
	objspaceChecked bool           // vm->objspace held together (plausibleObjspace)
	objspaceAddr    uint64         // the objspace, once GC has read it (it lives as long as the VM)
	tidOff          uint64         // offset of the TID in the C library's struct pthread (0: none)
	tidOffMusl      bool           // tidOff is musl's (whose struct pthread starts with its address)
	tidOffLooked    bool           // pthreadTIDOffset has run
	tpTIDs          map[uint64]int // a core's threads by thread pointer (tidByThreadPointer)
	tpIsPthread     bool           // the architecture's thread pointer is the pthread_t
	// localTID turns a TID read from the process's memory (its own PID
	// namespace's) into the one its target lists; nil when they are one.
	localTID func(int) int
	live     bool // T is a running process (its threads come and go)

	// The VM's three lifetimes: the fields above are the process's, for
	// as long as the VM is open; memoCaches what its memory held when
	// read, until ForgetCaches or a change of the heap (cachegen.go); and
	// readScratch the buffers of one read, filled anew by the next.
	memoCaches
	readScratch
}

// memoCaches are what a VM learned of its process's memory: kept between
// reads, forgotten by ForgetCaches (and, for the caches of objects, when
// the heap changed under them: cachegen.go).
type memoCaches struct {
	ids        map[uint64]string
	classNames map[uint64]string
	iseqs      map[uint64]*iseqInfo
	lines      map[[2]uint64]int     // (iseq, pc) -> line
	labels     map[[2]uint64]string  // (iseq, method owner) -> label
	owners     map[uint64]uint64     // ep[me_cref] of a local environment -> its method's owner
	cfuncs     map[uint64]string     // ep[me_cref] of a C frame -> label
	names      nameCache             // thread names, by their String
	walk       walkCache             // where the last walk found the threads
	hints      map[uint64]*stackHint // what the last walk of each VM stack read (readFrames)
	gen        cacheGen              // what the caches of objects were learned under (cachegen.go)
}

// readScratch are the buffers and the state of the read under way, kept
// only so that the next read allocates nothing.
type readScratch struct {
	idScratch  idScratch  // the buffers of threads' second reads
	stackBufs  [2][]byte  // a stack's control frames and value stack, as read
	aheadBatch batch      // readBatchAhead's batched read
	framePool  [][]Frame  // the Frames of reads WithReusedFrames
	threadPool []Thread   // the first group's Threads of reads WithReusedFrames
	frameBatch batch      // readFrames's batched read
	envBufs    [][]byte   // the buffers of environments read with the frames
	envPre     []envData  // environments read with the frames of the walk under way
	envMiss    []envAt    // environments the walk under way read outside its value stack
	ra         readAhead  // what a ReadThreads call reads with its walk of the threads
	env        valueStack // the value stack of the stack being walked
	read       readConfig // the options of the stack read under way
}

// FindImage returns the path of the file that holds the Ruby VM: the Ruby
// image by rbscope's one rule (procfs.RubyImage), else the executable,
// which its symbols must then show to be Ruby's (a program that embeds a
// static Ruby under another name).
func FindImage(t target.Target, maps []target.Mapping) (string, error) {
	if path, ok := procfs.RubyImage(maps); ok {
		return path, nil
	}
	for _, m := range maps {
		if strings.HasPrefix(m.Path, "/") {
			return strings.TrimSuffix(m.Path, " (deleted)"), nil
		}
	}
	return "", fmt.Errorf("pid %d: %w (no executable mapped)", t.PID(), ErrNotRuby)
}

// Options change how Open finds the VM.
type Options struct {
	// ForceVersion, when set, is the Ruby version ("3.3.0") to assume
	// instead of the one read from the process: the escape hatch for a
	// process or core whose version cannot be read.
	ForceVersion string
	// Builds, when set, shares what is read of a Ruby image among the
	// VMs opened with it (see Build); nil reads the image for this VM
	// alone.
	Builds *BuildCache
}

// Open finds the Ruby VM in t and chooses its layout.
func Open(t target.Target) (*VM, error) { return OpenWith(t, Options{}) }

// OpenWith is Open with options.
func OpenWith(t target.Target, opts Options) (*VM, error) {
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
	key, disk := buildKey(t, maps, path, im)
	b, shared := opts.Builds.acquire(key, im, disk)
	v := &VM{T: t, Image: im, build: b, m: mem{t: t}, located: map[string]uint64{}, locatedHow: map[string]FoundBy{}, maps: maps}
	if err := v.open(t, path, maps, opts); err != nil {
		v.Close()
		return nil, err
	}
	b.save()
	if !shared && b.cache != nil && b.readDebugInfo() {
		v.shedDebugInfo(t, maps, path)
	}
	return v, nil
}

// OverMemory returns a VM that reads t through the layout L, with no
// image: its VM pointer is at vmPtrAddr and the globals located are where
// located says (run-time addresses by symbol). It is for the fuzzers that
// feed made-up memory to rubyvm's readers and to those above it (the heap
// dump's).
func OverMemory(t target.Target, L *layout.Layout, vmPtrAddr uint64, located map[string]uint64) *VM {
	v := &VM{T: t, Layout: L, m: mem{t: t}, vmPtrAddr: vmPtrAddr, located: located}
	v.ForgetCaches()
	return v
}

// shedDebugInfo gives a Build kept in a BuildCache, whose layout was read
// from the image's debug information, a fresh copy of its image: a
// binary.Image keeps what it read for its life (tens of megabytes of DWARF
// for a debug build), and the Build, which may live as long as the agent
// runs, needs none of it once the layout is chosen. This VM, whose image
// the Build's was, takes the fresh copy too.
func (v *VM) shedDebugInfo(t target.Target, maps []target.Mapping, path string) {
	im, err := binary.Open(t, maps, path)
	if err != nil {
		return
	}
	b := v.build
	b.mu.Lock()
	old := b.im
	b.skipped = b.skippedLocked()
	b.im = im
	b.mu.Unlock()
	v.Image = im
	old.Close()
}

// open finds the VM in the process, its image open.
func (v *VM) open(t target.Target, path string, maps []target.Mapping, opts Options) error {
	im, b := v.Image, v.build
	// An image read from a core's memory may have no symbols at all; it
	// is taken for Ruby's by its name, or on the user's word.
	blind := im.InMemory && im.MemoryErr != nil && !b.hasSymbol("ruby_version")
	if blind && !(procfs.IsRubyImage(path) || opts.ForceVersion != "") {
		return fmt.Errorf("pid %d: %w (it runs %s, and the core holds none of its symbols: %v)", t.PID(), ErrNotRuby, filepath.Base(path), im.MemoryErr)
	}
	if !blind && (!b.hasSymbol("ruby_version") || !(b.hasSymbol("ruby_current_vm_ptr") || b.hasSymbol("ruby_vm_at_exit"))) {
		return fmt.Errorf("pid %d: %w (it runs %s)", t.PID(), ErrNotRuby, filepath.Base(path))
	}
	if l, ok := t.(*target.Live); ok {
		v.localTID, v.live = l.LocalTID, true
	}
	v.ForgetCaches()
	unread, err := v.findVersion(maps, opts)
	if err != nil {
		return err
	}
	if unread != nil {
		return v.proveRelease(maps, unread)
	}
	return v.attach(maps, v.Version)
}

// attach reads the process through the layout of release version: it
// chooses the layout (the image's DWARF, or the release's built-in
// table), finds ruby_current_vm_ptr, and checks the layout against the
// invariants the VM keeps (sanityCheck), refusing it in one line when one
// does not hold. What an earlier attach found is forgotten first.
func (v *VM) attach(maps []target.Mapping, version string) error {
	v.detach()
	v.Version = version
	fam, err := Family(version)
	if err != nil {
		return v.withVersionSource(err)
	}
	if v.Layout, v.LayoutNote, err = v.build.layout(fam, version); err != nil {
		return v.withVersionSource(err)
	}
	if layoutHook != nil {
		v.Layout = layoutHook(v.Layout)
	}
	if v.vmPtrAddr, err = v.findVMPtr(); err != nil {
		return v.withVersionSource(err)
	}
	if err := v.sanityCheck(maps); err != nil {
		return v.withVersionSource(v.refuseLayout(err))
	}
	return nil
}

// detach forgets what was found of the process through a layout: the
// globals located with its checks, the object space, the caches.
func (v *VM) detach() {
	v.Layout, v.LayoutNote, v.vmPtrAddr = nil, "", 0
	v.located, v.locatedHow = map[string]uint64{}, map[string]FoundBy{}
	v.objspaceChecked, v.objspaceAddr = false, 0
	v.ForgetCaches()
}

// layoutHook, nil but in the tests' own binaries (testhooks.go), changes
// the layout a process is read through after it is chosen.
var layoutHook func(*layout.Layout) *layout.Layout

// Fallbacks says, in one line, how the VM was found when it was not the
// ordinary way (the image's file, its symbols, the ruby_version symbol), or
// returns "". rbscope core prints it on stderr.
func (v *VM) Fallbacks() string {
	var parts []string
	if v.Image.InMemory {
		what := "its ELF image as the core holds it"
		switch err := v.Image.MemoryErr; {
		case errors.Is(err, binary.ErrNoELFHeader):
			what = "what the core holds of it (not even its ELF header)"
		case errors.Is(err, binary.ErrNoDynamicSymbols):
			what = "what the core holds of it (its ELF headers, not its symbols)"
		case err != nil:
			what = "what the core holds of it (" + firstLine(err) + ")"
		}
		parts = append(parts, fmt.Sprintf("%s is not on this machine (or differs): read %s", v.Image.Path, what))
	}
	if v.locatedHow["ruby_current_vm_ptr"] == FoundByScan {
		parts = append(parts, "ruby_current_vm_ptr found by scanning its data for a VM that passes the layout's checks")
	}
	if v.VersionFrom != "" {
		parts = append(parts, fmt.Sprintf("Ruby %s taken from %s", v.Version, v.VersionFrom))
	}

	return strings.Join(parts, "; ")
}

// withVersionSource adds where the version came from to an error, when it
// was not the process's own ruby_version.
func (v *VM) withVersionSource(err error) error {
	if v.VersionFrom == "" {
		return err
	}
	if d, ok := err.(docError); ok {
		return docError{fmt.Errorf("%w (version taken from %s)", d.err, v.VersionFrom), d.doc}
	}
	return fmt.Errorf("%w (version taken from %s)", err, v.VersionFrom)
}

// ForgetCaches drops what was learned about instruction sequences, lines,
// methods, names and where the threads lie. A read of the threads keeps
// the caches of objects by itself (cachegen.go); this empties all, for a
// layout changed under them.
func (v *VM) ForgetCaches() {
	v.ids = map[uint64]string{}
	v.forgetObjects()
	v.gen.read = false
	v.names = nameCache{}
	v.walk = walkCache{}
	v.hints = map[uint64]*stackHint{}
	v.ra = readAhead{}
}

// Close releases the process's image and its use of the Build.
func (v *VM) Close() error {
	var err error
	if v.Image != v.build.im {
		err = v.Image.Close()
	}
	v.build.release()
	return err
}

// Build returns what is known of the VM's Ruby image, shared with the
// other VMs of that image opened with the same BuildCache.
func (v *VM) Build() *Build { return v.build }

// Symbol returns the run-time address in this process, and the size, of
// a symbol the Ruby image defines.
func (v *VM) Symbol(name string) (addr, size uint64, err error) {
	a, n, err := v.build.symbol(name)
	if err != nil {
		return 0, 0, err
	}
	return a + v.Image.Bias, n, nil
}

// code returns size bytes of the Ruby image's file at the run-time
// address addr of this process.
func (v *VM) code(addr, size uint64) ([]byte, error) {
	return v.build.code(addr-v.Image.Bias, size)
}

func (v *VM) symbolString(name string, max int) (string, error) {
	addr, size, err := v.Symbol(name)
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
		return "", unsupported("unrecognised Ruby version %q: %w", version, ErrUnsupported)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return "", unsupported("unrecognised Ruby version %q: %w", version, ErrUnsupported)
	}
	if major < 2 || (major == 2 && minor < 7) {
		return "", unsupported("Ruby %s: %w (rbscope reads Ruby %s and newer)", version, ErrUnsupported, MinFamily)
	}
	return fmt.Sprintf("%d.%d", major, minor), nil
}

// chooseLayout prefers the image's own DWARF, then the built-in table of
// the exact patch release (the family's table with the fields that release
// moved). note says when the release is not one rbscope has facts of. Its
// error says which of the two was missing or unusable, and why.
func chooseLayout(im *binary.Image, family, version string) (l *layout.Layout, note string, err error) {
	var dwarfErr error
	if d := im.DWARF(); d != nil {
		l, err := layout.FromDWARF(d, family, "dwarf:"+im.Path)
		if err == nil {
			return l, "", nil
		}
		dwarfErr = err
	}
	a, err := arch.ForMachine(im.File.Machine)
	if err != nil {
		return nil, "", unsupported("Ruby %s: %w: %s is for %w", version, ErrUnsupported, im.Path, err)
	}
	if a == arch.AMD64 {
		// The release layouts are x86_64's: the family's table with the
		// fields each release moved.
		if l, _, note := layouts.ForRelease(version); l != nil {
			return l, note, nil
		}
	}
	if l := layouts.ForArch(a, family); l != nil {
		note := ""
		if a == arch.AMD64 {
			note = fmt.Sprintf("Ruby %s names no patch release: read with the %s table", version, l.Checked)
		}
		return l, note, nil
	}
	builtin := "built-in tables: " + strings.Join(layouts.FamiliesFor(a), ", ")
	if a != arch.AMD64 {
		builtin += " (for " + a.Name + ")"
	}
	if dwarfErr != nil {
		return nil, "", unsupported("Ruby %s: %w: the debug info of %s is incomplete (%s) and rbscope has no built-in table for Ruby %s (%s)",
			version, ErrUnsupported, im.Path, firstLine(dwarfErr), family, builtin)
	}
	return nil, "", unsupported("Ruby %s: %w: %s carries no debug info and rbscope has no built-in table for Ruby %s (%s); install its debug symbols (a -dbg or -dbgsym package, found by build-id under /usr/lib/debug) or use a Ruby built with -g",
		version, ErrUnsupported, im.Path, family, builtin)
}

// LayoutName says which layout the VM is read through: "the 3.1.7 table"
// (the family's table with that release's moves), "the 3.1 table (made
// from 3.1.2)", or "the DWARF of PATH".
func (v *VM) LayoutName() string {
	return layoutName(v.Layout)
}

func layoutName(l *layout.Layout) string {
	switch {
	case strings.HasPrefix(l.Source, "dwarf:"):
		return "the DWARF of " + strings.TrimPrefix(l.Source, "dwarf:")
	case l.Release != "":
		return fmt.Sprintf("the built-in %s table (%s's, made from %s)", l.Release, l.Family, l.Checked)
	}
	return fmt.Sprintf("the built-in %s table (made from %s)", l.Family, l.Checked)
}

// refuseLayout turns a failed layout check into the one line rbscope
// refuses with: the version, the layout, what does not hold (the field),
// and what to do.
func (v *VM) refuseLayout(err error) error {
	what := "pass --force-version X.Y.Z if the version was misread, or install the Ruby's debug symbols (a -dbg or -dbgsym package) so that rbscope reads its own layout"
	if strings.HasPrefix(v.Layout.Source, "dwarf:") {
		what = "its debug information does not match the running image: install the debug file of this very build (a stale separate debug file?)"
	}
	return docError{refusal{fmt.Sprintf("Ruby %s: %v: read through %s, %s; %s", v.Version, ErrLayoutMismatch, v.LayoutName(), firstLine(err), what)}, DocRubies}
}

// refusal is a layout refused: ErrLayoutMismatch, a kind of
// ErrUnsupported, with its own message.
type refusal struct{ msg string }

func (e refusal) Error() string   { return e.msg }
func (e refusal) Unwrap() []error { return []error{ErrLayoutMismatch, ErrUnsupported} }

// DocRubies is the page of rbscope's documentation that says which Rubies
// it reads and what each command supports on each, as a path in its
// repository (and under /usr/share/doc/rbscope in its packages).
const DocRubies = "docs/rubies.md"

// unsupported makes an error that wraps ErrUnsupported, whose message ends
// with the page that explains which Rubies rbscope reads.
func unsupported(format string, args ...any) error {
	return docError{fmt.Errorf(format, args...), DocRubies}
}

// docError is an error whose message ends with a page of the
// documentation; what is added to it later goes before that page.
type docError struct {
	err error
	doc string
}

func (e docError) Error() string { return e.err.Error() + " (see " + e.doc + ")" }
func (e docError) Unwrap() error { return e.err }

func firstLine(err error) string { s, _, _ := strings.Cut(err.Error(), "\n"); return s }

// Supports says whether this Ruby's layout has what feature f needs. The
// error names the feature, the Ruby version, the missing field and what was
// looked for, and wraps ErrUnsupported.
func (v *VM) Supports(f layout.Feature) error {
	if err := v.Layout.Supports(f); err != nil {
		return unsupported("%s is not available for Ruby %s: %w (%w)", featureWhat[f], v.Version, err, ErrUnsupported)
	}
	return nil
}

// featureWhat names a feature the way a user meets it.
var featureWhat = map[layout.Feature]string{
	layout.FeatureStack:  "reading stacks",
	layout.FeatureCensus: "the heap census",
	layout.FeatureDump:   "the heap dump",
}

// VMPtr reads ruby_current_vm_ptr.
func (v *VM) VMPtr() (uint64, error) {
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
// frame is printed, by invariants the VM keeps: the main thread's VM stack
// lies in mapped memory with its control frame pointer inside; its
// execution context points back at it; its self is
// a Thread object pointing back at it; it is on a thread list (its
// ractor's), which closes; its status is one of the enum's and its name
// nil or a String; its Thread object's class and the objects its frames
// run are what the VM keeps of every class, iseq and method entry
// (classCheck, frameObjectsCheck). Each error names the field whose
// offset it doubts.
func (v *VM) sanityCheck(maps []target.Mapping) error {
	L := v.Layout
	vm, err := v.VMPtr()
	if err != nil {
		return err
	}
	th, err := v.m.u64(at(vm, L.VMRactorMainThread))
	if err != nil {
		return fmt.Errorf("the main thread (rb_vm_struct main_thread at %d) cannot be read: %w", L.VMRactorMainThread, err)
	}
	ec, err := v.m.u64(at(th, L.ThreadEC))
	if err != nil {
		return fmt.Errorf("the main thread's execution context (rb_thread_struct.ec at %d) cannot be read: %w", L.ThreadEC, err)
	}
	st, err := v.readStackBounds(ec, nil)
	if err != nil {
		return fmt.Errorf("the main thread's execution context (rb_thread_struct.ec at %d, vm_stack at %d, cfp at %d) holds no VM stack: %w", L.ThreadEC, L.ECVMStack, L.ECCFP, err)
	}
	if L.ECThreadPtr >= 0 {
		if back, err := v.m.u64(at(ec, L.ECThreadPtr)); err != nil || back != th {
			return fmt.Errorf("the main thread's execution context (rb_thread_struct.ec at %d) does not point back at it (rb_execution_context_struct.thread_ptr at %d holds %#x): %w", L.ThreadEC, L.ECThreadPtr, back, ErrGarbage)
		}
	}
	if _, ok := target.FindMapping(maps, st.vmStack); !ok {
		return fmt.Errorf("the main thread's VM stack %#x (rb_execution_context_struct.vm_stack at %d) is outside every mapping: %w", st.vmStack, L.ECVMStack, ErrGarbage)
	}
	if !v.threadObjectOf(th) {
		return fmt.Errorf("the main thread's self (rb_thread_struct.self at %d) is not a Thread object pointing back at it: %w", L.ThreadSelf, ErrGarbage)
	}
	if err := v.threadListed(vm, th); err != nil {
		list := fmt.Sprintf("rb_ractor_struct.threads.set at %d", L.RactorThreadsSet)
		if L.RactorThreadsSet < 0 {
			list = fmt.Sprintf("rb_vm_struct.living_threads at %d", L.VMLivingThreads)
		}
		return fmt.Errorf("the thread list (%s, rb_thread_struct's node at %d) does not hold the main thread: %w", list, L.ThreadListNode, err)
	}
	t, _ := v.thread(th)
	if t.Error != "" || t.Status == "unknown" {
		return fmt.Errorf("the main thread's status (rb_thread_struct.status at bit %d) is none of the enum's: %w", L.ThreadStatusBit, ErrGarbage)
	}
	if name, err := v.m.u64(at(th, L.ThreadName)); err != nil || (name != uint64(L.Qnil) && !v.isString(name)) {
		return fmt.Errorf("the main thread's name (rb_thread_struct.name at %d) is %#x, neither nil nor a String: %w", L.ThreadName, name, ErrGarbage)
	}
	if err := v.classCheck(th); err != nil {
		return err
	}
	return v.frameObjectsCheck(ec)
}

// isString reports whether val is a String object.
func (v *VM) isString(val uint64) bool {
	if !v.IsHeapObject(val) {
		return false
	}
	typ, _, err := v.objType(val)
	return err == nil && typ == v.Layout.TString
}

// threadListed checks that thread th is on one of the VM's thread lists
// (a ractor's, or the VM's before ractors), and that the lists close.
func (v *VM) threadListed(vm, th uint64) error {
	groups, _, err := v.threadGroups(vm)
	if err != nil {
		return err
	}
	for _, g := range groups {
		ths, _, err := v.threadBlocks(g)
		if err != nil {
			return fmt.Errorf("a thread list: %w", err)
		}
		if slices.Contains(ths, th) {
			return nil
		}
	}
	return fmt.Errorf("the main thread %#x is on no thread list: %w", th, ErrGarbage)
}

// checkFrames is how many of the main thread's innermost control frames
// the layout check looks through for a method entry, and how many of its
// outermost for a Ruby frame.
const checkFrames = 32

// checkIseqs is how many of the main thread's outermost Ruby frames the
// layout check checks the iseq of: the VM's own top-level frame (a
// two-instruction iseq of one line) and the script's <main> at least.
const checkIseqs = 4

// checkTries is how often the checks of the main thread's frames read
// them again on a live process, whose main thread runs on while it is
// read: a frame it left between two reads is no layout's fault. A core
// stands still and is read once.
const checkTries = 3

// frameObjectsCheck checks the layout against what the VM keeps of the
// objects the main thread's frames run: the outermost Ruby frame's iseq
// (iseqCheck) and the innermost method entry (methodEntryCheck). A frame
// that holds neither checks nothing.
func (v *VM) frameObjectsCheck(ec uint64) error {
	var err error
	for try := 0; try < checkTries; try++ {
		if err = v.frameObjectsCheckOnce(ec); err == nil || !v.live {
			return err
		}
	}
	return err
}

func (v *VM) frameObjectsCheckOnce(ec uint64) error {
	L := v.Layout
	st, err := v.readStackBounds(ec, nil)
	if err != nil {
		return fmt.Errorf("the main thread's execution context: %w", err)
	}
	sz := uint64(L.CFPSize)
	n := (st.end - st.cfp) / sz
	// The outermost frames, innermost first: the first Ruby frames from
	// the end are the VM's top-level frame and the script's <main> (or a
	// Fiber's block), whose iseqs stay while the thread runs.
	out := min(n, checkFrames)
	raw, err := v.m.read(st.end-out*sz, int(out*sz))
	if err != nil {
		return fmt.Errorf("the main thread's control frames: %w", err)
	}
	checked := 0
	for i := int(out) - 1; i >= 0 && checked < checkIseqs; i-- {
		cf := raw[uint64(i)*sz:]
		iseq, pc := le64(cf, L.CFPIseq), le64(cf, L.CFPPC)
		if iseq == 0 || pc == 0 || v.MayBeHalfPushed(int(n-out)+i) {
			continue
		}
		if err := v.iseqCheck(iseq, pc); err != nil {
			return err
		}
		checked++
	}
	in := min(n, checkFrames)
	if raw, err = v.m.read(st.cfp, int(in*sz)); err != nil {
		return fmt.Errorf("the main thread's control frames: %w", err)
	}
	for i := 0; i < int(in); i++ {
		ep := le64(raw[uint64(i)*sz:], L.CFPEP)
		if ep == 0 || v.MayBeHalfPushed(i) {
			continue
		}
		me, ok := v.frameMethodEntry(ep)
		if !ok {
			continue
		}
		return v.methodEntryCheck(me)
	}
	return nil
}

// frameMethodEntry returns the method entry of a method's or a C
// function's frame (its local environment's ep[VM_ENV_DATA_INDEX_ME_CREF],
// through a svar), or false for other frames.
func (v *VM) frameMethodEntry(ep uint64) (uint64, bool) {
	L := v.Layout
	lo := min(L.EnvIndexMECref, L.EnvIndexFlags)
	env, err := v.m.read(uint64(int64(ep)+lo*8), int(max(L.EnvIndexMECref, L.EnvIndexFlags)-lo+1)*8)
	if err != nil {
		return 0, false
	}
	flags := int64(le64(env, (L.EnvIndexFlags-lo)*8))
	if magic := flags & L.FrameMagicMask; flags&L.EnvFlagLocal == 0 || (magic != L.FrameMagicMethod && magic != L.FrameMagicCFunc) {
		return 0, false
	}
	return v.methodEntryOf(le64(env, (L.EnvIndexMECref-lo)*8), true)
}

// iseqCheck checks a Ruby frame's iseq against what the VM keeps of every
// instruction sequence: it is an imemo_iseq whose body's label and
// base_label are Strings, whose pathobj is a String or an Array ([path,
// realpath]), other than them in the script's <main>, whose instructions hold the frame's pc, and
// whose line table ends at its last instruction (the succinct table's
// rank of position iseq_size-1 is insns_info.size, or the last of
// insns_info.positions lies before iseq_size).
func (v *VM) iseqCheck(iseq, pc uint64) error {
	L := v.Layout
	typ, flags, err := v.objType(iseq)
	if err != nil || typ != L.TImemo || int64(flags>>uint64(L.FlUShift))&L.ImemoMask != L.ImemoIseq {
		return fmt.Errorf("one of the main thread's outermost Ruby frames (rb_control_frame_struct.iseq at %d) holds %#x, not an instruction sequence: %w", L.CFPIseq, iseq, ErrGarbage)
	}
	body, err := v.m.u64(at(iseq, L.IseqBody))
	if err != nil || body == 0 {
		return fmt.Errorf("an instruction sequence's body (rb_iseq_struct.body at %d) is %#x: %w", L.IseqBody, body, ErrGarbage)
	}
	end := int64(0)
	for _, o := range []int64{L.BodyType, L.BodyPathObj, L.BodyLabel, L.BodyBaseLabel, L.BodyIseqEncoded, L.BodyIseqSize, L.BodyInsnsInfoPos, L.BodyInsnsInfoSize, L.BodyInsnsInfoSuccTbl} {
		end = max(end, o+8)
	}
	b, err := v.m.read(body, int(end))
	if err != nil {
		return fmt.Errorf("an instruction sequence's body (rb_iseq_struct.body at %d) %#x: %w", L.IseqBody, body, err)
	}
	label, base, path := le64(b, L.BodyLabel), le64(b, L.BodyBaseLabel), le64(b, L.BodyPathObj)
	for _, s := range []struct {
		field string
		off   int64
		val   uint64
	}{{"location.label", L.BodyLabel, label}, {"location.base_label", L.BodyBaseLabel, base}} {
		if t, _, err := v.objType(s.val); err != nil || t != L.TString {
			return fmt.Errorf("an instruction sequence's %s (rb_iseq_constant_body.%s at %d) is %#x, not a String: %w", s.field, s.field, s.off, s.val, ErrGarbage)
		}
	}
	// The script's <main> is named "<main>" and has the script's path; the
	// VM's own top-level iseqs (rb_vm_call_cfunc's) are named by their
	// path, one String.
	main := int64(int32(le32(b, L.BodyType))) == L.IseqTypeMain
	if t, _, err := v.objType(path); err != nil || (t != L.TString && t != L.TArray) || (main && (path == label || path == base)) {
		return fmt.Errorf("an instruction sequence's path (rb_iseq_constant_body.location.pathobj at %d) is %#x, not a String or an Array of its own: %w", L.BodyPathObj, path, ErrGarbage)
	}
	encoded, size := le64(b, L.BodyIseqEncoded), uint64(le32(b, L.BodyIseqSize))
	if pc < encoded || pc > encoded+size*8 || (pc-encoded)%8 != 0 {
		return fmt.Errorf("a Ruby frame's pc %#x (rb_control_frame_struct.pc at %d) is outside its instructions, %#x (rb_iseq_constant_body.iseq_encoded at %d) and %d words (iseq_size at %d): %w",
			pc, L.CFPPC, encoded, L.BodyIseqEncoded, size, L.BodyIseqSize, ErrGarbage)
	}
	infoSize, infoPos, succ := uint64(le32(b, L.BodyInsnsInfoSize)), le64(b, L.BodyInsnsInfoPos), le64(b, L.BodyInsnsInfoSuccTbl)
	lineTableEnd := func() bool {
		switch {
		case size == 0 || infoSize > size:
			return false
		case infoSize <= 1:
			return true
		case infoPos != 0:
			last, err := v.m.u32(infoPos + (infoSize-1)*4)
			return err == nil && uint64(last) < size
		case succ != 0:
			rank, err := v.succIndexLookup(succ, size-1)
			return err == nil && rank == infoSize
		}
		return true
	}
	if !lineTableEnd() {
		return fmt.Errorf("an instruction sequence's size (rb_iseq_constant_body.iseq_size at %d) is %d words, where its line table (insns_info.size at %d) does not end: %w", L.BodyIseqSize, size, L.BodyInsnsInfoSize, ErrGarbage)
	}
	return nil
}

// methodEntryCheck checks that a frame's method entry is owned by a
// class, a module or an iclass, as every method entry is.
func (v *VM) methodEntryCheck(me uint64) error {
	L := v.Layout
	owner, err := v.m.u64(at(me, L.MEOwner))
	if err != nil {
		return fmt.Errorf("a method entry's owner (rb_callable_method_entry_struct.owner at %d): %w", L.MEOwner, err)
	}
	if t, _, err := v.objType(owner); err != nil || (t != L.TClass && t != L.TModule && t != L.TIClass) {
		return fmt.Errorf("a method entry's owner (rb_callable_method_entry_struct.owner at %d) is %#x, not a class or module: %w", L.MEOwner, owner, ErrGarbage)
	}
	return nil
}

// classCheck checks the layout against what the VM keeps of every class,
// on the main thread's Thread object: its class (Thread) has a singleton
// class attached to it (every class has one, its metaclass), and its
// classext's origin is the class itself or an iclass (where its prepended
// modules' methods moved). A Thread object with a singleton class of its
// own is that class's attached object.
func (v *VM) classCheck(th uint64) error {
	L := v.Layout
	self, err := v.m.u64(at(th, L.ThreadSelf))
	if err != nil {
		return err
	}
	klassOf := func(obj uint64) (uint64, int64, uint64) {
		k, err := v.m.u64(at(obj, L.RBasicKlass))
		if err != nil {
			return 0, 0, 0
		}
		t, flags, err := v.objType(k)
		if err != nil {
			return 0, 0, 0
		}
		return k, t, flags
	}
	attachedWhere := fmt.Sprintf("rb_classext_struct.as.singleton_class.attached_object at %d", L.ClassExtAttached)
	if L.ClassExtAttached < 0 {
		attachedWhere = fmt.Sprintf("its __attached__ in rb_classext_struct.iv_tbl at %d", L.ClassExtIVTbl)
	}
	if L.RClassExtPtr >= 0 {
		attachedWhere += fmt.Sprintf(", RClass.ptr at %d", L.RClassExtPtr)
	}
	klass, t, flags := klassOf(self)
	if t != L.TClass {
		return fmt.Errorf("the main thread's Thread object's class (RBasic.klass at %d) is %#x, not a class: %w", L.RBasicKlass, klass, ErrGarbage)
	}
	if flags&uint64(L.FlSingleton) != 0 {
		if a, ok := v.attached(klass); !ok || a != self {
			return fmt.Errorf("the main thread's singleton class is not attached to it (%s): %w", attachedWhere, ErrGarbage)
		}
		return nil
	}
	meta, t, flags := klassOf(klass)
	if t != L.TClass || flags&uint64(L.FlSingleton) == 0 {
		return fmt.Errorf("class Thread's class (RBasic.klass at %d) is %#x, not its singleton class: %w", L.RBasicKlass, meta, ErrGarbage)
	}
	if a, ok := v.attached(meta); !ok || a != klass {
		return fmt.Errorf("class Thread's singleton class is not attached to it (%s): %w", attachedWhere, ErrGarbage)
	}
	if L.ClassExtOrigin < 0 {
		return nil
	}
	where := fmt.Sprintf("rb_classext_struct.origin_ at %d", L.ClassExtOrigin)
	if L.RClassExtPtr >= 0 {
		where += fmt.Sprintf(", RClass.ptr at %d", L.RClassExtPtr)
	}
	ext, err := v.ClassExt(klass)
	if err != nil {
		return fmt.Errorf("class Thread's classext (%s): %w", where, err)
	}
	origin, err := v.m.u64(at(ext, L.ClassExtOrigin))
	if err != nil {
		return fmt.Errorf("class Thread's origin (%s): %w", where, err)
	}
	if origin != klass {
		if t, _, err := v.objType(origin); err != nil || t != L.TIClass {
			return fmt.Errorf("class Thread's classext does not point back at it (%s holds %#x, neither the class nor an iclass): %w", where, origin, ErrGarbage)
		}
	}
	return nil
}

// WithTarget returns a VM that reads the same process through t (a
// snapshot of it, or a budgeted reader): it keeps what v found (the
// Build, the layout, the globals it located), not what it cached of
// memory, nor the mappings it was opened with. It is never closed: v owns the image and the Build.
func (v *VM) WithTarget(t target.Target) *VM {
	w := *v
	w.T = t
	w.m = mem{t: t}
	w.tpTIDs = nil
	w.live = false
	// The mappings are t's: a snapshot's are those of its pause, which
	// may hold heap pages the process mapped after v was opened (read
	// against v's, a benign process mapping a page in between was
	// refused as a layout that does not fit).
	if maps, err := t.Mappings(); err == nil && len(maps) > 0 {
		w.maps = maps
	}
	w.ForgetCaches()
	return &w
}
