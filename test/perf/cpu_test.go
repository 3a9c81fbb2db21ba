package perf

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of CPU times in /proc; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTimes is the CPU time used so far by this process and by the control
// plane it started (its child processes: kube-apiserver and etcd).
type cpuTimes struct {
	self, controlPlane time.Duration
}

// readCPU reads the CPU times from /proc. On a system without /proc both
// are zero.
func readCPU() cpuTimes {
	pid := strconv.Itoa(os.Getpid())
	var c cpuTimes
	if self, _, ok := procStat("/proc/self/stat"); ok {
		c.self = self
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		if cpu, ppid, ok := procStat(p); ok && ppid == pid {
			c.controlPlane += cpu
		}
	}
	return c
}

// procStat returns the user and system CPU time and the parent pid of a
// /proc/<pid>/stat file.
func procStat(path string) (time.Duration, string, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, "", false
	}
	// The command name is in parentheses and may hold spaces; the fields
	// after it start with state, then ppid; utime and stime are the 12th
	// and 13th after it.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, "", false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", false
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, f[1], true
}

// sub returns the CPU time used between b and c.
func (c cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{self: c.self - b.self, controlPlane: c.controlPlane - b.controlPlane}
}
