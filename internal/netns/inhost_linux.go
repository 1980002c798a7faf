package netns

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsDir is where ip netns keeps the namespaces it names.
const netnsDir = "/run/netns"

// InHost calls f on an OS thread that has entered host i's network
// namespace, then returns the thread to this process's namespace. The
// sockets f opens belong to host i for their whole life: a connection
// dialled or a listener opened inside f reaches host i's network,
// whatever goroutine uses it afterwards. f must open its sockets in its
// own goroutine: a goroutine it starts runs in this process's namespace.
func (s *Switch) InHost(i int, f func() error) error {
	if i < 0 || i >= len(s.hosts) {
		return fmt.Errorf("netns: no host %d", i)
	}
	if len(s.created) == 0 {
		return fmt.Errorf("netns: the switch is closed")
	}
	target, err := os.Open(filepath.Join(netnsDir, s.hosts[i].Namespace))
	if err != nil {
		return fmt.Errorf("netns: host %d: %w", i, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	// The thread's own namespace, to return to: read after locking, so
	// that it is this thread's.
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: this thread's namespace: %w", err)
	}
	defer home.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: enter host %d: %w", i, err)
	}
	ferr := f()
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so the runtime ends it with this
		// goroutine instead of running others in host i's namespace.
		return fmt.Errorf("netns: leave host %d: %w", i, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
