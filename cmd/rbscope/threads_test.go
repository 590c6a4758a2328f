package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbscope/rbscope/internal/threads"

	"github.com/rbscope/rbscope/internal/testruby"
	"github.com/rbscope/rbscope/internal/wire"
)

type churnReport struct {
	PID     int `json:"pid"`
	Threads []struct {
		Name   *string `json:"name"`
		Main   bool    `json:"main"`
		TID    int     `json:"tid"`
		Status string  `json:"status"`
	} `json:"threads"`
}

// TestThreadsTable joins native threads with Ruby threads and checks each
// against what the program reports of itself (Thread#native_thread_id,
// Thread#name, Thread#status).
func TestThreadsTable(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		t.Run(rb.Name, func(t *testing.T) {
			p := testruby.Start(t, rb, "thread_churn.rb", nil)
			var rep churnReport
			p.WaitReport(t, &rep, 30*time.Second)
			out, stderr, code := rbscope(t, "threads", "-p", fmt.Sprint(p.PID()), "--json", "--interval", "300ms")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var doc struct {
				SchemaVersion int              `json:"schema_version"`
				Threads       []wire.ThreadRow `json:"threads"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.SchemaVersion != wire.SchemaVersion {
				t.Fatalf("schema %d: %v\n%s", doc.SchemaVersion, err, out)
			}
			rows := doc.Threads
			byTID := map[int]wire.ThreadRow{}
			for _, r := range rows {
				byTID[r.TID] = r
				if r.StackBytes == nil || *r.StackBytes == 0 || *r.StackBytes > 64<<20 {
					t.Errorf("tid %d: stack in use %v", r.TID, r.StackBytes)
				}
			}
			for _, want := range rep.Threads {
				r, ok := byTID[want.TID]
				if !ok || r.Kind != "ruby" || r.Ruby == nil {
					t.Errorf("Ruby thread %v (tid %d) not joined: %+v", want.Name, want.TID, r)
					continue
				}
				if want.Name != nil && r.Ruby.Name != *want.Name {
					t.Errorf("tid %d: name %q, Ruby says %q", want.TID, r.Ruby.Name, *want.Name)
				}
				if r.Ruby.Main != want.Main {
					t.Errorf("tid %d: main=%v", want.TID, r.Ruby.Main)
				}
				if !want.Main && r.Ruby.Status != want.Status {
					t.Errorf("tid %d: status %q, Thread#status %q", want.TID, r.Ruby.Status, want.Status)
				}
				// On a loaded 2-core machine a spinning thread may get only a
				// share of a CPU; it must still stand out from a sleeper.
				if want.Name != nil && *want.Name == "cpu" && r.CPUPercent < 5 {
					t.Errorf("the spinning thread used %.0f%% CPU", r.CPUPercent)
				}
				if want.Name != nil && *want.Name == "napper" && r.CPUPercent > 2 {
					t.Errorf("the sleeping thread used %.0f%% CPU", r.CPUPercent)
				}
				if want.Name != nil && *want.Name == "napper" && (r.Ruby.Frame == nil || !strings.HasSuffix(r.Ruby.Frame.Label, "sleep")) {
					t.Errorf("napper's innermost frame is %+v", r.Ruby.Frame)
				}
			}
			for _, r := range rows {
				if r.Kind == "native" {
					t.Errorf("tid %d (%s) is not joined to any Ruby thread", r.TID, r.Comm)
				}
			}
		})
	}
}

// TestThreadsFollow: a thread born and dying every 50 ms must produce
// matching birth and death events, with its name and TID, from both event
// sources.
func TestThreadsFollow(t *testing.T) {
	for _, rb := range testruby.Rubies(t) {
		for _, mode := range []string{"netlink", "poll"} {
			t.Run(rb.Name+"/"+mode, func(t *testing.T) {
				p := testruby.Start(t, rb, "thread_churn.rb", []string{"BLIP_MS=50"})
				var rep churnReport
				p.WaitReport(t, &rep, 30*time.Second)
				args := []string{"threads", "-p", fmt.Sprint(p.PID()), "--follow", "--json"}
				if mode == "poll" {
					args = append(args, "--poll")
				}
				cmd := exec.Command(rbscopeBin, args...)
				var stdout, stderr strings.Builder
				cmd.Stdout = &stdout
				errPipe, err := cmd.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer cmd.Process.Kill()
				// Follow for 2.5 s from when rbscope says it follows: finding
				// the VM may take a while on a loaded machine.
				following := make(chan struct{})
				stderrDone := make(chan struct{})
				go func() {
					defer close(stderrDone)
					sc := bufio.NewScanner(errPipe)
					for sc.Scan() {
						stderr.WriteString(sc.Text() + "\n")
						if strings.Contains(sc.Text(), "following threads") {
							close(following)
						}
					}
				}()
				select {
				case <-following:
				case <-stderrDone:
				case <-time.After(30 * time.Second):
				}
				time.Sleep(2500 * time.Millisecond)
				cmd.Process.Signal(syscall.SIGINT)
				<-stderrDone
				if err := cmd.Wait(); err != nil {
					t.Fatalf("%v: %s", err, stderr.String())
				}
				if mode == "poll" && !strings.Contains(stderr.String(), "polling") {
					t.Errorf("stderr does not say the source is polling: %q", stderr.String())
				}
				born, exited := map[string]int{}, map[string]int{}
				bornUnnamed := map[int]bool{}
				sc := bufio.NewScanner(strings.NewReader(stdout.String()))
				for sc.Scan() {
					var ev threads.Event
					if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
						t.Fatalf("bad event line %q: %v", sc.Text(), err)
					}
					if ev.Event == "born" && ev.Name == "" {
						// A thread is announced without its name when the
						// name comes later than Follow waits for it (a busy
						// machine): such a birth counts for its TID.
						bornUnnamed[ev.TID] = true
					}
					if !strings.HasPrefix(ev.Name, "blip-") {
						continue
					}
					switch ev.Event {
					case "born":
						born[ev.Name] = ev.TID
					case "exited":
						exited[ev.Name] = ev.TID
					}
				}
				// What the program logged: each blip's name and TID.
				f, err := os.Open(p.Report + ".blips")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				logged := map[string]int{}
				lsc := bufio.NewScanner(f)
				for lsc.Scan() {
					var b struct {
						Name string `json:"name"`
						TID  int    `json:"tid"`
					}
					json.Unmarshal(lsc.Bytes(), &b)
					logged[b.Name] = b.TID
				}
				first, last := 1<<30, 0
				for name := range exited {
					n, _ := strconv.Atoi(strings.TrimPrefix(name, "blip-"))
					first, last = min(first, n), max(last, n)
				}
				if last-first < 5 {
					t.Fatalf("only blips %d..%d seen exiting:\n%s", first, last, stdout.String())
				}
				// Every blip seen must have both events with the TID the
				// program logged; of the blips from the second seen to the
				// last, a 20 ms life read every 2 ms on a busy machine may
				// rarely be missed whole, but not more than one in ten.
				missed, total := 0, 0
				for n := first + 1; n <= last; n++ {
					name := fmt.Sprintf("blip-%d", n)
					tid, ok := logged[name]
					if !ok {
						continue // logged after the program's log was read
					}
					total++
					_, b := born[name]
					_, e := exited[name]
					if !b && !e {
						missed++
						continue
					}
					if !b && bornUnnamed[tid] {
						born[name] = tid
					}
					if born[name] != tid || exited[name] != tid {
						t.Errorf("%s (tid %d): born tid %d, exited tid %d", name, tid, born[name], exited[name])
					}
				}
				t.Logf("%d of %d blips seen", total-missed, total)
				if missed*10 > total {
					t.Errorf("missed %d of %d blips", missed, total)
				}
			})
		}
	}
}
