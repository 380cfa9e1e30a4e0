// Package procstat reads what the benchmarks measure of processes on
// Linux: CPU seconds and resident memory from /proc, and the pid of a
// daemon by name. Shared by the benchmarks that run Ferry's processes.
package procstat

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

var clockTicks = 100.0 // USER_HZ on Linux

// CPUSeconds reads utime+stime of pid from /proc; with children, also
// cutime+cstime (its reaped children) and its live children's own, so a
// process's zfs commands count whether or not they have exited.
func CPUSeconds(pid int, children bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	sum := 0.0
	idx := []int{11, 12} // utime, stime (fields 14, 15)
	if children {
		idx = append(idx, 13, 14) // cutime, cstime
	}
	for _, i := range idx {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return 0, err
		}
		sum += v / clockTicks
	}
	if children {
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, k := range strings.Fields(string(kids)) {
			if c, err := strconv.Atoi(k); err == nil {
				if s, err := CPUSeconds(c, true); err == nil {
					sum += s
				}
			}
		}
	}
	return sum, nil
}

// KiB reads a field of /proc/<pid>/status in KiB: RssAnon is what counts
// as a process's own memory (heap, stacks); VmRSS adds the pages of the
// binary it touched, which every process of the same binary shares.
func KiB(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// PidOf is the oldest process named name.
func PidOf(name string) (int, error) {
	out, err := exec.Command("pgrep", "-xo", name).Output()
	if err != nil {
		return 0, fmt.Errorf("%s is not running: %w", name, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// MachineBusy is the CPU seconds the whole machine has spent busy so far
// (every state of /proc/stat's cpu line but idle and iowait), over all
// cores: the cost of everything, kernel included, however short-lived.
func MachineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	sum := 0.0
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest and guest_nice are counted in user already
			break
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		sum += n / clockTicks
	}
	return sum, nil
}

// TotalAnonKiB sums RssAnon over every process: the memory processes hold
// of their own, without the shared pages of their binaries.
func TotalAnonKiB() (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	sum := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if kib, err := KiB(pid, "RssAnon"); err == nil {
			sum += kib
		}
	}
	return sum, nil
}
