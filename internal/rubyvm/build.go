package rubyvm

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/rbscope/rbscope/internal/binary"
	"github.com/rbscope/rbscope/internal/rubyvm/layout"
	"github.com/rbscope/rbscope/internal/target"
)

// Build is what is true of one Ruby image (the libruby or ruby executable
// that holds the VM) whichever process maps it: its symbols, the layouts
// chosen for it, and where the VM's globals lie. Everything a Build keeps
// is link-time: an address in it is the image's own (before the load
// bias), and each VM adds its process's bias (VM.Image.Bias). What depends
// on one process's memory stays in its VM: the version read from it, the
// object space, IDs and class names, instruction
// sequences, the C library's TID offset.
//
// A Build is safe for use by several goroutines. It is made by Open and
// shared through a BuildCache (Options.Builds): the agent profiling fifty
// workers of one Ruby parses the image once.
type Build struct {
	// Key identifies the image: its GNU build ID (or path and
	// modification time when it has none), file size, device and inode
	// (the same file, not merely a file that claims the same build ID);
	// "" for a Build that is not shared.
	Key string

	mu sync.Mutex
	// im is the image as the first process mapped it, parsed (symbols,
	// debug information) once; only link-time values are taken from it
	// (an address less im.Bias).
	im      *binary.Image
	syms    map[string]buildSymbol
	has     map[string]bool         // HasSymbol's answers
	layouts map[string]layoutChoice // by Ruby version (a table is chosen by patch release)
	located map[string]locatedHint  // the globals found, by symbol
	refs    int
	cache   *BuildCache
	// disk, when set, is where what the Build learns is kept between runs
	// (see imagerecord.go); dirty says it learned something since.
	disk    *diskRecord
	dirty   bool
	skipped []string // what the record said was not read of the image
}

// buildSymbol is a symbol's link-time address and size, or why there is
// none.
type buildSymbol struct {
	addr, size uint64
	err        error
}

// layoutChoice is the layout chosen for a family, or why there is none;
// recorded says it was read from the Build's record, not chosen anew.
type layoutChoice struct {
	l        *layout.Layout
	err      error
	recorded bool
	note     string // what to say of a table chosen for a release rbscope has no facts of
}

// locatedHint is where a VM global was found in one process, link-time,
// and how: a hint for the next process, whose own checks must accept it.
type locatedHint struct {
	addr uint64
	how  FoundBy
}

// BuildCache shares Builds among the VMs opened with it, by Build.Key. A
// Build stays in the cache while a VM uses it. The zero value is not
// usable; make one with NewBuildCache.
type BuildCache struct {
	mu     sync.Mutex
	builds map[string]*Build
}

// NewBuildCache returns an empty cache.
func NewBuildCache() *BuildCache { return &BuildCache{builds: map[string]*Build{}} }

// Len returns how many Builds the cache holds.
func (c *BuildCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.builds)
}

// acquire returns the Build of key, made from im when the cache has none
// (or c is nil, or key is ""), with what disk kept of it. shared says an
// existing Build was taken, im then being the process's own copy of its
// image.
func (c *BuildCache) acquire(key string, im *binary.Image, disk *diskRecord) (b *Build, shared bool) {
	if c == nil || key == "" {
		return newBuild("", im, nil, disk), false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.builds[key]; b != nil {
		b.mu.Lock()
		b.refs++
		b.mu.Unlock()
		return b, true
	}
	b = newBuild(key, im, c, disk)
	c.builds[key] = b
	return b, false
}

func newBuild(key string, im *binary.Image, c *BuildCache, disk *diskRecord) *Build {
	b := &Build{Key: key, im: im, refs: 1, cache: c, disk: disk,
		syms: map[string]buildSymbol{}, has: map[string]bool{}, layouts: map[string]layoutChoice{}, located: map[string]locatedHint{}}
	b.loadRecord()
	return b
}

// release drops one VM's use of the Build; the last closes the image and
// leaves the cache.
func (b *Build) release() {
	if c := b.cache; c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	b.mu.Lock()
	b.refs--
	last := b.refs == 0
	b.mu.Unlock()
	if !last {
		return
	}
	if b.cache != nil && b.cache.builds[b.Key] == b {
		delete(b.cache.builds, b.Key)
	}
	b.save()
	b.im.Close()
}

// Skipped says what was not read of the image for being over a budget
// (binary.Image.Skipped), in this run or in the run that recorded it.
func (b *Build) Skipped() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.skippedLocked()
}

// symbol returns the link-time address and size of a defined symbol.
func (b *Build) symbol(name string) (addr, size uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.syms[name]
	if !ok {
		a, n, err := b.im.Symbol(name)
		s = buildSymbol{a - b.im.Bias, n, err}
		b.syms[name] = s
		b.dirty = true
	}
	return s.addr, s.size, s.err
}

// hasSymbol reports whether the image defines name.
func (b *Build) hasSymbol(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	has, ok := b.has[name]
	if !ok {
		has = b.im.HasSymbol(name)
		b.has[name] = has
		b.dirty = true
	}
	return has
}

// code returns size bytes of the image's file at the link-time address
// addr.
func (b *Build) code(addr, size uint64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.im.Code(addr+b.im.Bias, size)
}

// layout returns the layout chosen for the image and a Ruby family
// (chooseLayout), choosing it once.
func (b *Build) layout(family, version string) (*layout.Layout, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.layouts[version]
	if !ok {
		c.l, c.note, c.err = chooseLayout(b.im, family, version)
		b.layouts[version] = c
		b.dirty = true
	}
	return c.l, c.note, c.err
}

// readDebugInfo says whether the Build's image has read its debug
// information (choosing a layout).
func (b *Build) readDebugInfo() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.layouts {
		if c.l != nil && strings.HasPrefix(c.l.Source, "dwarf:") && !c.recorded {
			return true
		}
	}
	return false
}

// hint returns where a process found the global name, link-time.
func (b *Build) hint(name string) (locatedHint, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.located[name]
	return h, ok
}

// found records where a process found the global name, link-time.
func (b *Build) found(name string, addr uint64, how FoundBy) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.located[name]; !ok || h != (locatedHint{addr, how}) {
		b.located[name] = locatedHint{addr, how}
		b.dirty = true
	}
}

// buildKey is the Build.Key of the image im of path in t: its build ID
// (or, for an image without one, its path and modification time) with the
// size, device and inode of the file the process maps, so that only
// processes mapping the very same file share what was read of it; "" for
// an image not to be shared: one read from a core's memory, or one not in
// a live process. disk is where what is read of it may be kept between
// runs: only for an image with a build ID, in a file that its owner (root
// or the user running rbscope) alone may write.
func buildKey(t target.Target, maps []target.Mapping, path string, im *binary.Image) (key string, disk *diskRecord) {
	if _, live := t.(*target.Live); !live || im.InMemory {
		return "", nil
	}
	st, ok := mappedFile(t.PID(), maps, path)
	if !ok {
		return "", nil
	}
	id := im.BuildID()
	if id != "" && (st.Uid == 0 || int(st.Uid) == os.Geteuid()) && st.Mode&0o022 == 0 {
		disk = openDiskRecord(id, st.Size)
	}
	if id == "" {
		id = fmt.Sprintf("%q@%d.%09d", path, st.Mtim.Sec, st.Mtim.Nsec)
	}
	return fmt.Sprintf("%s/%d/%d/%d", id, st.Size, st.Dev, st.Ino), disk
}

// mappedFile stats the file a live process maps at path, through
// /proc/PID/map_files (the mapped inode, whatever the path names now).
func mappedFile(pid int, maps []target.Mapping, path string) (*syscall.Stat_t, bool) {
	for _, m := range maps {
		if m.Path != path && m.Path != path+" (deleted)" {
			continue
		}
		fi, err := os.Stat(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End))
		if err != nil {
			return nil, false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return st, ok
	}
	return nil, false
}
