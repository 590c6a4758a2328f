package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	prom "github.com/prometheus/procfs"
)

// Status is what rbscope reads of a status file (proc_pid_status(5)).
type Status struct {
	// UIDs are the real, effective, saved and filesystem user IDs.
	UIDs [4]uint64
	// NSpid is the task's ID in each PID namespace, from the namespace of
	// the /proc mount read down to the task's own.
	NSpid []int
	// CapEff is the effective capability set.
	CapEff uint64
	// RSS is the process's resident memory, in bytes.
	RSS uint64
}

// ReadStatus reads the status file of thread tid of process pid, or of
// the process when tid is 0, through github.com/prometheus/procfs.
func ReadStatus(pid, tid int) (Status, error) {
	fs, err := prom.NewFS(Root)
	if err != nil {
		return Status{}, err
	}
	var p prom.Proc
	if tid == 0 {
		p, err = fs.Proc(pid)
	} else {
		p, err = fs.Thread(pid, tid)
	}
	if err != nil {
		return Status{}, err
	}
	ps, err := p.NewStatus()
	if err != nil {
		return Status{}, err
	}
	s := Status{UIDs: ps.UIDs, CapEff: ps.CapEff, RSS: ps.VmRSS}
	for _, id := range ps.NSpids {
		if id == 0 || id > 1<<31 {
			return Status{}, fmt.Errorf("pid %d status: NSpid %d", pid, id)
		}
		s.NSpid = append(s.NSpid, int(id))
	}
	return s, nil
}

// SignalMasks reads which signals thread tid of process pid blocks and
// ignores right now (SigBlk and SigIgn of its status file, which
// github.com/prometheus/procfs does not read): bit n-1 stands for signal n.
func SignalMasks(pid, tid int) (blocked, ignored uint64, err error) {
	b, err := os.ReadFile(filepath.Join(taskDir(pid, tid), "status"))
	if err != nil {
		return 0, 0, err
	}
	var haveBlk, haveIgn bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "SigBlk":
			dst, haveBlk = &blocked, true
		case "SigIgn":
			dst, haveIgn = &ignored, true
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(string(bytes.TrimSpace(val)), 16, 64); err != nil {
			return 0, 0, fmt.Errorf("tid %d status %s: %w", tid, key, err)
		}
	}
	if !haveBlk || !haveIgn {
		return 0, 0, fmt.Errorf("tid %d status: no SigBlk or SigIgn", tid)
	}
	return blocked, ignored, nil
}
