// Package alloctrace answers memprof's question for a live Ruby process:
// which file:line:Type created objects during a window of time that are
// still alive at its end. It turns Ruby's own allocation tracing
// (ObjectSpace.trace_object_allocations) on and off inside the process
// through rubyexec, and walks the survivors there.
package alloctrace

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbscope/rbscope/internal/rubyexec"
	"github.com/rbscope/rbscope/internal/rubyvm"
	"github.com/rbscope/rbscope/internal/target"
)

// Site is the live objects one allocation site made in the window.
type Site struct {
	File  string
	Line  int
	Class string
	Count uint64
	// Bytes is ObjectSpace.memsize_of summed: slots plus what the objects
	// hold outside them.
	Bytes uint64
}

// Report is what Stop found.
type Report struct {
	// Sites are largest (count, then bytes) first.
	Sites   []Site
	Objects uint64 // objects in all sites
	Bytes   uint64
	// Window is the time tracing was on.
	Window time.Duration
}

// WatchdogGrace is how long after the planned end of the window the
// process turns tracing off by itself if rbscope never came back.
const WatchdogGrace = 60 * time.Second

// Session is allocation tracing turned on in one process.
type Session struct {
	t       *target.Live
	vm      *rubyvm.VM
	token   string
	started time.Time
	timeout time.Duration
	// stopper is the address of an object in the process whose inspect
	// method ends the window; answer is where it writes its report.
	stopper uint64
	answer  *rubyexec.Exchange
}

// Start turns allocation tracing on in the process. The process also gets
// a sleeping watchdog thread that turns it off again if the window has not
// been closed by its planned end plus WatchdogGrace. On Ruby 3.1 and later
// a child the process forks during the window turns tracing off at once
// (a Process._fork hook that stays installed, inert, after the window);
// on Ruby 2.7 such a child keeps tracing.
//
// The window is closed by an object made here, whose inspect method
// rbscope later runs directly as a postponed job (rubyexec.Invoke): no code
// is compiled and nothing allocated before tracing stops, so rbscope's own
// objects never show in the report. With gc set, it first runs a full GC
// (while tracing is still on, so the records of what it frees are
// dropped).
func Start(t *target.Live, vm *rubyvm.VM, window, timeout time.Duration, gc bool) (*Session, error) {
	if err := rubyexec.Runnable(vm); err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random token: %w", err)
	}
	s := &Session{t: t, vm: vm, token: hex.EncodeToString(b[:]), timeout: timeout}
	answer, err := rubyexec.NewExchange(t)
	if err != nil {
		return nil, err
	}
	s.answer = answer
	guard := window + WatchdogGrace
	stop := rubyexec.AnswerProgram(answer, fmt.Sprintf(`begin
    GC.start if %t
    ObjectSpace.trace_object_allocations_stop
    $__rbscope_alloc = $__rbscope_alloc_stopper = nil
    wd.kill
    out = "".b
    agg, cls = {}, Kernel.instance_method(:class)
    ObjectSpace.each_object do |o|
      f = ObjectSpace.allocation_sourcefile(o) or next
      next if pre && (ObjectSpace.allocation_generation(o) || -1) < gen
      c = (cls.bind_call(o) rescue nil)
      a = (agg[[f, ObjectSpace.allocation_sourceline(o), c]] ||= [0, 0])
      a[0] += 1
      a[1] += ObjectSpace.memsize_of(o)
    end
    agg.each do |(f, l, c), (n, b)|
      out << f.to_s.b << "\0" << l.to_s << "\0" << (c ? (c.name || c.inspect) : "?").b << "\0" << n.to_s << "\0" << b.to_s << "\0"
    end
    out
  ensure
    ObjectSpace.trace_object_allocations_clear unless pre
  end`, gc))
	code := fmt.Sprintf(`require "objspace"
if (s = $__rbscope_alloc) && s[:watchdog].alive?
  raise "another rbscope alloc is tracing allocations in this process (it ends by itself within %d s)"
end
token, pre, gen = %q, !ObjectSpace.allocation_sourcefile(Object.new).nil?, GC.count
wd = Thread.new do
  sleep(%f)
  if (s = $__rbscope_alloc) && s[:token] == token
    $__rbscope_alloc = $__rbscope_alloc_stopper = nil
    ObjectSpace.trace_object_allocations_stop
    ObjectSpace.trace_object_allocations_clear unless pre
    %s # the stopper's answer pipe
  end
end
stopper = Object.new
stopper.define_singleton_method(:inspect) do
  next "" unless $__rbscope_alloc_stopper.equal?(self)
  %s
  ""
end
# A child forked during the window has no watchdog (threads do not survive
# fork): a Process._fork hook (Ruby 3.1 and later), installed once and
# inert outside a window, turns tracing off in the child.
if Process.respond_to?(:_fork) && !$__rbscope_fork_hook
  $__rbscope_fork_hook = Module.new do
    def _fork
      pid = super
      if pid == 0 && (s = $__rbscope_alloc)
        $__rbscope_alloc = $__rbscope_alloc_stopper = nil
        ObjectSpace.trace_object_allocations_stop
        ObjectSpace.trace_object_allocations_clear unless s[:pre]
        s[:close_answer].call
      end
      pid
    end
  end
  Process.singleton_class.prepend($__rbscope_fork_hook)
end
wd.name = "rbscope-alloc-watchdog"
addr = Kernel.instance_method(:to_s).bind_call(stopper)[/0x\h+/]
$__rbscope_alloc = { token: token, pre: pre, watchdog: wd, close_answer: -> { %s } }
$__rbscope_alloc_stopper = stopper # a global variable's value is pinned: compaction will not move it
ObjectSpace.trace_object_allocations_start
addr`, int(guard.Seconds()), s.token, guard.Seconds(), answer.CloseProgram(), stop, answer.CloseProgram())
	res, err := rubyexec.Run(t, vm, code, rubyexec.Options{Timeout: timeout, Name: "(rbscope alloc)", Raw: true})
	if err == nil && res.Raised != nil {
		err = res.Raised
	}
	if err == nil {
		s.stopper, err = strconv.ParseUint(strings.TrimPrefix(res.Value, "0x"), 16, 64)
	}
	if err != nil {
		// The stopper may exist (an answer that did not parse), and would
		// write to the pipe: it is closed in the process only when Ruby
		// refused before making it.
		if res != nil && res.Raised != nil {
			answer.Discard()
		} else {
			answer.Close()
		}
		return nil, fmt.Errorf("turn allocation tracing on: %w", err)
	}
	s.started = time.Now()
	return s, nil
}

// Stop closes the window: it runs the GC chosen at Start and walks the heap
// for the objects allocated in the window that are still alive. Tracing is
// off afterwards, its records cleared (unless the program traced
// allocations itself before Start), and the watchdog thread gone.
func (s *Session) Stop() (*Report, error) {
	defer s.answer.Close()
	window := time.Since(s.started)
	res, err := rubyexec.Invoke(s.t, s.vm, s.stopper, s.answer, s.timeout)
	if err != nil {
		if errors.Is(err, target.ErrExited) {
			return nil, fmt.Errorf("pid %d exited during the allocation window; nothing to report: %w", s.t.PID(), err)
		}
		return nil, fmt.Errorf("turn allocation tracing off: %w (its watchdog turns it off %v after the window's planned end)", err, WatchdogGrace)
	}
	if res.Raised != nil {
		return nil, fmt.Errorf("turn allocation tracing off: %w", res.Raised)
	}
	rep, err := parseSites([]byte(res.Value))
	if err != nil {
		return nil, err
	}
	rep.Window = window
	return rep, nil
}

// Abort closes the window without a report, for an interrupted run: it
// turns tracing off, clears its records and ends the watchdog.
func (s *Session) Abort() error {
	defer s.answer.Close()
	code := fmt.Sprintf(`s = $__rbscope_alloc
if s && s[:token] == %q
  ObjectSpace.trace_object_allocations_stop
  ObjectSpace.trace_object_allocations_clear unless s[:pre]
  s[:watchdog].kill
  $__rbscope_alloc = $__rbscope_alloc_stopper = nil
  %s # the stopper's answer pipe
end
nil`, s.token, s.answer.CloseProgram())
	res, err := rubyexec.Run(s.t, s.vm, code, rubyexec.Options{Timeout: s.timeout, Name: "(rbscope alloc)"})
	if err == nil && res.Raised != nil {
		err = res.Raised
	}
	if err != nil {
		return fmt.Errorf("turn allocation tracing off: %w (its watchdog turns it off %v after the window's planned end)", err, WatchdogGrace)
	}
	return nil
}

// parseSites reads the NUL-separated rows the Stop program writes: file,
// line, class, count, bytes.
func parseSites(b []byte) (*Report, error) {
	fields := bytes.Split(b, []byte{0})
	if len(fields) > 0 && len(fields[len(fields)-1]) == 0 {
		fields = fields[:len(fields)-1]
	}
	if len(fields)%5 != 0 {
		return nil, fmt.Errorf("malformed allocation report from the process (%d fields)", len(fields))
	}
	rep := &Report{}
	for i := 0; i < len(fields); i += 5 {
		line, err1 := strconv.Atoi(string(fields[i+1]))
		count, err2 := strconv.ParseUint(string(fields[i+3]), 10, 64)
		size, err3 := strconv.ParseUint(string(fields[i+4]), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("malformed allocation report from the process: %w", err)
		}
		rep.Sites = append(rep.Sites, Site{File: string(fields[i]), Line: line, Class: string(fields[i+2]), Count: count, Bytes: size})
		rep.Objects += count
		rep.Bytes += size
	}
	sortSites(rep.Sites)
	return rep, nil
}

// Group merges sites by "file", "line" (file and line), "class", or, for
// "" or "site", keeps file:line:class; fields not grouped on are cleared.
func Group(sites []Site, by string) ([]Site, error) {
	var key func(s Site) Site
	switch by {
	case "", "site":
		return sites, nil
	case "file":
		key = func(s Site) Site { return Site{File: s.File} }
	case "line":
		key = func(s Site) Site { return Site{File: s.File, Line: s.Line} }
	case "class":
		key = func(s Site) Site { return Site{Class: s.Class} }
	default:
		return nil, fmt.Errorf("unknown grouping %q: use file, line, class or site", by)
	}
	idx := map[Site]int{}
	var out []Site
	for _, s := range sites {
		k := key(s)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, k)
		}
		out[i].Count += s.Count
		out[i].Bytes += s.Bytes
	}
	sortSites(out)
	return out, nil
}

func sortSites(s []Site) {
	sort.Slice(s, func(i, j int) bool {
		if s[i].Count != s[j].Count {
			return s[i].Count > s[j].Count
		}
		if s[i].Bytes != s[j].Bytes {
			return s[i].Bytes > s[j].Bytes
		}
		if s[i].File != s[j].File {
			return s[i].File < s[j].File
		}
		if s[i].Line != s[j].Line {
			return s[i].Line < s[j].Line
		}
		return s[i].Class < s[j].Class
	})
}

// Label is memprof's name of a site: file:line:Class, or the grouped
// fields only.
func (s Site) Label() string {
	var b []byte
	if s.File != "" {
		b = append(b, s.File...)
	}
	if s.Line != 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(s.Line), 10)
	}
	if s.Class != "" {
		if len(b) > 0 {
			b = append(b, ':')
		}
		b = append(b, s.Class...)
	}
	return string(b)
}
