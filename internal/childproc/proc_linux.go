package childproc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SysProcAttr returns the attributes Start gives a child: a process group
// of its own, so that Ctrl-C reaches only the parent, which stops its
// children in order; and the kernel's SIGKILL if the parent dies first
// (Pdeathsig: a safety net for the paths where the parent cannot stop
// them, such as SIGKILL). The kernel sends it when the thread that started
// the child exits; Go keeps its threads for the life of the process,
// unless a goroutine locked to one exits without unlocking it.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 for user space on every architecture Go runs
// on.
const clockTicks = 100

// processCPU returns the user and system CPU time process pid has used,
// all its threads together, or 0 if /proc cannot tell.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted in proc(5) resume after its closing parenthesis, with the
	// state (field 3) first, so utime (14) and stime (15) are the 12th and
	// 13th.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}
