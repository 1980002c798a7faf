// Package childproc starts and stops the helper processes of Convoy's
// benchmarks: usually the benchmark's own program re-executed with other
// arguments, which prints lines on standard output (one of them saying it
// is ready, if it has such a line), logs on standard error, and exits once
// its standard input closes.
//
//	p, err := childproc.Start(exec.Command(exe, "replica", "-id", "1"), childproc.Options{
//		Name:  "replica 1",
//		Ready: func(line []byte) bool { return string(line) == "ready" },
//	})
//	if err != nil {
//		return err
//	}
//	defer p.Stop(10 * time.Second)
//	if err := p.WaitReady(ctx); err != nil {
//		return err
//	}
//
// A child runs in a process group of its own (see SysProcAttr), so that
// Ctrl-C reaches only the parent, which stops its children in order by
// closing their standard input, and kills those that do not exit within a
// grace period. A Proc keeps the tail of the child's standard error to
// show in the errors that report how the child ended.
package childproc
