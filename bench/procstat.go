package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicksPerSec is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every
// Linux architecture Go supports).
const clockTicksPerSec = 100

// procUsage is a process's CPU time so far and its peak RSS, from /proc.
type procUsage struct {
	cpuSeconds float64
	rssMaxMB   float64
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
				u.rssMaxMB = kb / 1024
			}
		}
	}
	return u, nil
}
