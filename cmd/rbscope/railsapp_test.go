package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/heap"
	"github.com/rbscope/rbscope/internal/heap/heaptest"
	"github.com/rbscope/rbscope/internal/testruby"
)

// railsBoot is what testdata/railsapp/config.ru writes at boot.
type railsBoot struct {
	PID      int    `json:"pid"`
	File     string `json:"file"`
	Rails    string `json:"rails"`
	LeakLine int    `json:"leak_line"`
	Jemalloc bool   `json:"jemalloc"`
}

// railsStats is the application's own account (/stats).
type railsStats struct {
	CrunchCPU     float64 `json:"crunch_cpu"`
	ProcessCPU    float64 `json:"process_cpu"`
	Leaked        int     `json:"leaked"`
	CachedRenders int     `json:"cached_renders"`
}

// startRails starts testdata/railsapp under Debian's Puma (single mode,
// four threads), with jemalloc preloaded or not, and waits until it has
// booted, reported and answers.
func startRails(t *testing.T, jemalloc bool) (*server, railsBoot) {
	t.Helper()
	needCommand(t, "puma", "ab")
	if jemalloc {
		if _, err := os.Stat(testruby.JemallocLib); err != nil {
			testruby.Missing(t, "%s is missing (make deps installs libjemalloc2)", testruby.JemallocLib)
		}
	}
	dir := t.TempDir()
	s := &server{kind: "rails", dir: dir, port: freePort(t)}
	s.cmd = exec.Command("puma", "-e", "production", "-t", "4:4", "-b", fmt.Sprintf("tcp://127.0.0.1:%d", s.port), testruby.Testdata("railsapp/config.ru"))
	s.cmd.Dir = dir
	s.cmd.Env = append(os.Environ(), "RBSCOPE_REPORT_DIR="+dir)
	if jemalloc {
		s.cmd.Env = append(s.cmd.Env, "LD_PRELOAD="+testruby.JemallocLib)
	}
	s.log = startGroup(t, s.cmd)
	var boot railsBoot
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "app.json")); err == nil {
			if err := json.Unmarshal(b, &boot); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) || processZombie(s.master()) {
			t.Fatalf("setup: the Rails application did not boot; output:\n%s", s.log.String())
		}
	}
	if boot.PID != s.master() || boot.Jemalloc != jemalloc {
		t.Fatalf("setup: the application says pid %d jemalloc %v; started pid %d jemalloc %v", boot.PID, boot.Jemalloc, s.master(), jemalloc)
	}
	s.waitReport(t, s.master())
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := s.fetch("/widgets"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("setup: the application does not answer; output:\n%s", s.log.String())
		}
	}
	return s, boot
}

// fetch returns the body of a path of the application.
func (s *server) fetch(path string) ([]byte, error) {
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("%s: %s", path, resp.Status)
	}
	return b, err
}

func (s *server) stats(t *testing.T) railsStats {
	t.Helper()
	b, err := s.fetch("/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st railsStats
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("/stats: %v: %s", err, b)
	}
	return st
}

// abLoad runs ab on path with n clients until the test ends.
func (s *server) abLoad(t *testing.T, n int, path string) {
	t.Helper()
	cmd := exec.Command("ab", "-q", "-r", "-t", "3600", "-n", "100000000", "-c", strconv.Itoa(n), fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path))
	testruby.DieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// TestRailsApp runs a small Rails application (ActiveRecord on SQLite)
// under Debian's Puma, with glibc's malloc and with jemalloc preloaded,
// under ab's load on a CPU-heavy action, a database action and a leaking
// one, and checks each command against the application's own account:
// stack and threads name Puma's threads as Thread.list does and catch the
// controller's frame; record finds the hot method, with the share of CPU
// time the application measured in it; heap census counts the leaked
// objects the application counts; heap dump reaches what the
// application's own ObjectSpace.dump_all reaches; alloc names the leaking
// line first; exec evaluates Rails.env inside.
func TestRailsApp(t *testing.T) {
	if os.Geteuid() != 0 {
		testruby.Missing(t, "needs root to trace the application's process")
	}
	for _, c := range []struct {
		name     string
		jemalloc bool
	}{{"glibc", false}, {"jemalloc", true}} {
		t.Run(c.name, func(t *testing.T) {
			s, boot := startRails(t, c.jemalloc)
			pid := strconv.Itoa(s.master())
			s.abLoad(t, 1, "/hot?ms=5")
			s.abLoad(t, 1, "/widgets")
			s.abLoad(t, 2, "/leak")
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if st := s.stats(t); st.CrunchCPU > 0 && st.Leaked > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("setup: ab's requests do not reach the application")
				}
			}
			t.Logf("Rails %s on pid %s, jemalloc %v", boot.Rails, pid, boot.Jemalloc)

			t.Run("stack+threads", func(t *testing.T) {
				s.checkSelf(t, s.master(), "block in Puma::ThreadPool#spawn_thread")
				// Under load a Puma thread is in the controller most of the
				// time: some read within a few catches it there.
				catchPumaFrame(t, pid, "WidgetsController", func(f stackFrame) bool {
					return strings.HasPrefix(f.Label, "WidgetsController#") && f.Path == boot.File
				})
			})

			t.Run("record", func(t *testing.T) {
				// Windows of 3 s until there are 30 samples (at most 4): a
				// busy machine may give the application little CPU in one.
				before := s.stats(t)
				var out string
				for try := 0; try < 4; try++ {
					o, stderr, code := rbscope(t, "record", "-p", pid, "--duration", "3s", "-f", "collapsed", "-o", "-")
					if code != 0 {
						t.Fatalf("exit %d: %s", code, stderr)
					}
					out += strings.TrimSuffix(o, "\n") + "\n"
					if _, total := samplesWith(out, ""); total >= 30 {
						break
					}
				}
				after := s.stats(t)
				leaves := map[string]int{}
				eachCollapsed(out, func(stack string, n int) {
					frames := strings.Split(stack, ";")
					leaf, _, _ := strings.Cut(frames[len(frames)-1], " (")
					leaves[leaf] += n
				})
				top, topN := "", 0
				for f, n := range leaves {
					if n > topN {
						top, topN = f, n
					}
				}
				hot, total := samplesWith(out, "WidgetsController#hot (")
				share := float64(hot) / float64(max(total, 1))
				own := (after.CrunchCPU - before.CrunchCPU) / (after.ProcessCPU - before.ProcessCPU)
				t.Logf("hottest leaf %s (%d of %d samples); WidgetsController#hot in %.0f%% of samples, %.0f%% of the process's CPU time by its own clocks", top, topN, total, 100*share, 100*own)
				if top != "WidgetsController#crunch" {
					t.Errorf("hottest leaf %s, want WidgetsController#crunch", top)
				}
				if total < 30 || share < own-0.2 || share > own+0.2 {
					t.Errorf("WidgetsController#hot in %d of %d samples (%.0f%%), the application spent %.0f%% of its CPU time there", hot, total, 100*share, 100*own)
				}
			})

			t.Run("heap-census", func(t *testing.T) {
				before := s.stats(t)
				out, stderr, code := rbscope(t, "heap", "census", "-p", pid, "--json", "--all")
				after := s.stats(t)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				got := censusCount(censusJSON(t, out), "", "CachedRender")
				t.Logf("census: %d CachedRender; the application counted %d before and %d after", got, before.CachedRenders, after.CachedRenders)
				if got < before.CachedRenders || got > after.CachedRenders {
					t.Errorf("census counts %d CachedRender, the application %d before and %d after", got, before.CachedRenders, after.CachedRenders)
				}
			})

			t.Run("heap-dump", func(t *testing.T) {
				// The application dumps its own heap right before and right
				// after rbscope does, under the same load: the objects both
				// its dumps reach lived through rbscope's, which must reach
				// them too.
				dumpAll := func(n int) *heap.Graph {
					path, err := s.fetch(fmt.Sprintf("/dump_all?n=%d", n))
					if err != nil {
						t.Fatalf("the application's dump_all: %v; the server said:\n%s", err, s.log.String())
					}
					g, err := heap.LoadFile(strings.TrimSpace(string(path)))
					if err != nil {
						t.Fatal(err)
					}
					return g
				}
				before := dumpAll(1)
				mine := filepath.Join(t.TempDir(), "rbscope.json")
				_, stderr, code := rbscope(t, "heap", "dump", "-p", pid, "-o", mine)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				after := dumpAll(2)
				t.Log(strings.TrimSpace(stderr))
				g, err := heap.LoadFile(mine)
				if err != nil {
					t.Fatal(err)
				}
				reach := heaptest.Compare(g, before, after)
				t.Logf("%s: %v", c.name, reach)
				if reach.Share() < heaptest.Share {
					t.Errorf("reached %.2f%% of what dump_all reaches, want >= %.0f%%", 100*reach.Share(), 100*heaptest.Share)
				}
			})

			t.Run("alloc", func(t *testing.T) {
				out, stderr, code := rbscope(t, "alloc", "-p", pid, "--duration", "2s", "--json", "--timeout", "60s")
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				_, sites := allocJSON(t, out)
				if len(sites) == 0 {
					t.Fatalf("alloc --json found nothing:\n%.1000s", out)
				}
				// The site holding the most bytes: the leak keeps a 1 kB
				// String a request. By count, the short-lived Strings every
				// request makes can outnumber it when no GC ran in the
				// window (seen beside two CPU spinners).
				top := sites[0]
				for _, s := range sites {
					if s.Bytes > top.Bytes {
						top = s
					}
				}
				t.Logf("site with the most bytes %s:%d %s x%d %d B", top.File, top.Line, top.Class, top.Count, top.Bytes)
				if top.File != boot.File || top.Line != boot.LeakLine {
					t.Errorf("site with the most bytes %s:%d, want the leak at %s:%d; sites %+v", top.File, top.Line, boot.File, boot.LeakLine, sites[:min(5, len(sites))])
				}
			})

			t.Run("exec", func(t *testing.T) {
				out, stderr, code := rbscope(t, "exec", "-p", pid, "--timeout", "60s", "Rails.env")
				if code != 0 || strings.TrimSpace(out) != `"production"` {
					t.Errorf("exec Rails.env: exit %d, %q, stderr %s", code, out, stderr)
				}
			})
		})
	}
}
