package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicksPerSec is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every
// Linux architecture Go supports).
const clockTicksPerSec = 100

// procUsage is a process's CPU time so far and its peak RSS, from /proc.
type procUsage struct {
	cpuSeconds float64
	rssMaxMiB  float64
}

// readProcUsage reads /proc/<pid>/stat (utime, stime) and /proc/<pid>/status (VmHWM).
func readProcUsage(pid int) (procUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("bench: %w", err)
	}
	// The command name (field 2) may hold spaces: count fields after its closing parenthesis.
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return procUsage{}, fmt.Errorf("bench: /proc/%d/stat: no command field", pid)
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return procUsage{}, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(fields[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return procUsage{}, fmt.Errorf("bench: /proc/%d/stat: cpu times %q %q", pid, fields[11], fields[12])
	}
	u := procUsage{cpuSeconds: float64(utime+stime) / clockTicksPerSec}
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("bench: %w", err)
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				u.rssMaxMiB = kb / 1024
			}
		}
	}
	return u, nil
}

// cpuSample is the CPU time so far of each local node's process and of the bench's own process,
// taken at the start and at the end of the load.
type cpuSample struct {
	nodes map[uint16]nodeCPU // by node id; a node not running is absent; nil with --cluster
	self  float64            // the bench process (its client, consumers and fault driver), seconds
}

// nodeCPU is one node's process and its CPU seconds so far.
type nodeCPU struct {
	pid     int
	seconds float64
}

// sampleCPU reads each running local node's CPU time from /proc and the bench's own from getrusage.
func (r *run) sampleCPU() cpuSample {
	s := cpuSample{self: selfCPUSeconds()}
	if r.lc == nil {
		return s
	}
	s.nodes = map[uint16]nodeCPU{}
	for _, n := range r.lc.Nodes() {
		if pid := n.PID(); pid != 0 && n.Running() {
			if pu, err := readProcUsage(pid); err == nil {
				s.nodes[n.ID] = nodeCPU{pid: pid, seconds: pu.cpuSeconds}
			}
		}
	}
	return s
}

// selfCPUSeconds is this process's user + system CPU time so far (0 if getrusage fails, which it does
// not for RUSAGE_SELF).
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// cpuPerRecord is the CPU time spent between two samples per confirmed record, in microseconds, split
// between the nodes and the bench. It is not measured (why says so) unless every node's process was
// the same one from the first sample to the last: the CPU time of a process killed in between cannot
// be read any more, and leaving it out would flatter the figure.
func cpuPerRecord(before, after cpuSample, records int64) (parts CPUParts, why string) {
	switch {
	case records <= 0:
		return CPUParts{}, "no record confirmed"
	case before.nodes == nil:
		return CPUParts{}, "the nodes are not local processes"
	case len(before.nodes) == 0:
		return CPUParts{}, "no node was running at the start of the load"
	}
	var nodes float64
	for id, b := range before.nodes {
		a, ok := after.nodes[id]
		if !ok || a.pid != b.pid {
			return CPUParts{}, fmt.Sprintf("node %d was killed or restarted during the load", id)
		}
		nodes += a.seconds - b.seconds
	}
	for id := range after.nodes {
		if _, ok := before.nodes[id]; !ok {
			return CPUParts{}, fmt.Sprintf("node %d started during the load", id)
		}
	}
	perRecordUs := func(s float64) float64 { return s * 1e6 / float64(records) }
	parts = CPUParts{NodesUs: perRecordUs(nodes), BenchUs: perRecordUs(after.self - before.self)}
	parts.TotalUs = parts.NodesUs + parts.BenchUs
	return parts, ""
}
