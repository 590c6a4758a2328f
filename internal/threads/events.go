package threads

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbscope/rbscope/internal/procfs"
)

// TaskKind says what happened to a native thread.
type TaskKind int

// Event kinds.
const (
	Born TaskKind = iota
	Exited
)

func (k TaskKind) String() string {
	if k == Born {
		return "born"
	}
	return "exited"
}

// TaskEvent is one native thread's birth or death, as the kernel tells it.
type TaskEvent struct {
	Kind TaskKind
	TID  int
	Time time.Time
}

// Source names how events are learned.
type Source string

// Event sources.
const (
	Netlink Source = "netlink process-events connector"
	Polling Source = "polling /proc/PID/task"
)

// PollInterval is how often the polling source lists the threads: fast
// enough to see a thread that lives 20 ms.
const PollInterval = 2 * time.Millisecond

// Watch sends the births and deaths of pid's native threads on the
// returned channel as they happen, without ptrace (from the kernel's
// process-events connector over netlink), until ctx is done or the process
// exits; then it closes the channel. With forcePoll, or when netlink is
// not permitted, it polls /proc/PID/task; fallback says why netlink was not
// used.
func Watch(ctx context.Context, pid int, forcePoll bool) (events <-chan TaskEvent, src Source, fallback error) {
	ch := make(chan TaskEvent, 256)
	if !forcePoll {
		sock, err := openConnector()
		if err == nil {
			go runNetlink(ctx, sock, pid, ch)
			return ch, Netlink, nil
		}
		fallback = err
	} else {
		fallback = fmt.Errorf("polling was asked for")
	}
	go runPolling(ctx, pid, ch)
	return ch, Polling, fallback
}

// Process-events connector constants (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc          = 1
	cnValProc          = 1
	procCnMcastListen  = 1
	procCnMcastIgnore  = 2
	procEventFork      = 0x00000001
	procEventExit      = 0x80000000
	nlmsgHdrLen        = 16
	cnMsgLen           = 20
	procEventHeaderLen = 16 // what, cpu, timestamp_ns
)

func openConnector() (int, error) {
	sock, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return -1, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc, Pid: uint32(os.Getpid())}); err != nil {
		unix.Close(sock)
		return -1, fmt.Errorf("netlink bind: %w", err)
	}
	if err := sendControl(sock, procCnMcastListen); err != nil {
		unix.Close(sock)
		return -1, fmt.Errorf("netlink subscribe: %w", err)
	}
	// A receive timeout lets the reader notice ctx being done.
	tv := unix.Timeval{Usec: 100000}
	unix.SetsockoptTimeval(sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	// Kernels that refuse the subscription do so silently; an event-less
	// socket would look like a quiet process. Check we can read: a process
	// started now must show up.
	if err := probe(sock); err != nil {
		sendControl(sock, procCnMcastIgnore)
		unix.Close(sock)
		return -1, err
	}
	return sock, nil
}

func sendControl(sock int, op uint32) error {
	msg := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	le := binary.LittleEndian
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], unix.NLMSG_DONE)
	le.PutUint32(msg[12:], uint32(os.Getpid()))
	le.PutUint32(msg[16:], cnIdxProc)
	le.PutUint32(msg[20:], cnValProc)
	le.PutUint16(msg[32:], 4)
	le.PutUint32(msg[36:], op)
	return unix.Sendto(sock, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// probe checks that fork events arrive by starting a short thread of our
// own process: a Go runtime thread will not do, so it runs /bin/true.
func probe(sock int) error {
	pid, err := forkTrue()
	if err != nil {
		return nil // cannot probe; trust the subscription
	}
	deadline := time.Now().Add(time.Second)
	buf := make([]byte, 4096)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		if err != nil {
			continue
		}
		for _, ev := range parse(buf[:n]) {
			if ev.pid == pid || ev.tgid == pid {
				return nil
			}
		}
	}
	return fmt.Errorf("netlink process events did not arrive (another network namespace?)")
}

func forkTrue() (int, error) {
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	go p.Wait()
	return pid, nil
}

type rawEvent struct {
	what      uint32
	pid, tgid int // the thread born or exiting, and its process
}

// parse decodes the proc events in one netlink datagram.
func parse(b []byte) []rawEvent {
	le := binary.LittleEndian
	var out []rawEvent
	for len(b) >= nlmsgHdrLen {
		n := int(le.Uint32(b))
		if n < nlmsgHdrLen || n > len(b) {
			break
		}
		msg := b[nlmsgHdrLen:n]
		b = b[(n+3)&^3:]
		if len(msg) < cnMsgLen+procEventHeaderLen+16 {
			continue
		}
		if le.Uint32(msg) != cnIdxProc || le.Uint32(msg[4:]) != cnValProc {
			continue
		}
		ev := msg[cnMsgLen:]
		what := le.Uint32(ev)
		data := ev[procEventHeaderLen:]
		switch what {
		case procEventFork: // parent_pid, parent_tgid, child_pid, child_tgid
			out = append(out, rawEvent{what: what, pid: int(le.Uint32(data[8:])), tgid: int(le.Uint32(data[12:]))})
		case procEventExit: // process_pid, process_tgid, exit_code, exit_signal
			out = append(out, rawEvent{what: what, pid: int(le.Uint32(data[0:])), tgid: int(le.Uint32(data[4:]))})
		}
	}
	return out
}

func runNetlink(ctx context.Context, sock, pid int, ch chan<- TaskEvent) {
	defer close(ch)
	defer unix.Close(sock)
	defer sendControl(sock, procCnMcastIgnore)
	buf := make([]byte, 64<<10)
	lastCheck := time.Now()
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		now := time.Now()
		if err == nil {
			for _, ev := range parse(buf[:n]) {
				if ev.tgid != pid {
					continue
				}
				switch {
				case ev.what == procEventFork && ev.pid != ev.tgid:
					send(ctx, ch, TaskEvent{Kind: Born, TID: ev.pid, Time: now})
				case ev.what == procEventExit:
					send(ctx, ch, TaskEvent{Kind: Exited, TID: ev.pid, Time: now})
					if ev.pid == pid && procfs.Exited(pid) {
						return
					}
				}
			}
		}
		if now.Sub(lastCheck) > 200*time.Millisecond {
			lastCheck = now
			if procfs.Exited(pid) {
				return
			}
		}
	}
}

func send(ctx context.Context, ch chan<- TaskEvent, ev TaskEvent) {
	select {
	case ch <- ev:
	case <-ctx.Done():
	}
}

func runPolling(ctx context.Context, pid int, ch chan<- TaskEvent) {
	defer close(ch)
	known := listTasks(pid)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		cur := listTasks(pid)
		if cur == nil {
			for tid := range known {
				send(ctx, ch, TaskEvent{Kind: Exited, TID: tid, Time: now})
			}
			return
		}
		for tid := range cur {
			if !known[tid] {
				send(ctx, ch, TaskEvent{Kind: Born, TID: tid, Time: now})
			}
		}
		for tid := range known {
			if !cur[tid] {
				send(ctx, ch, TaskEvent{Kind: Exited, TID: tid, Time: now})
			}
		}
		known = cur
	}
}

// listTasks returns the process's TIDs, or nil once it is gone.
func listTasks(pid int) map[int]bool {
	tids, err := procfs.Tasks(pid)
	if err != nil || len(tids) == 0 || procfs.Exited(pid) {
		return nil
	}
	out := make(map[int]bool, len(tids))
	for _, tid := range tids {
		out[tid] = true
	}
	return out
}
