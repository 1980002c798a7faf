// Package testproc lets a test binary be the program of the processes its
// tests start. A test that needs a member as a separate process starts
// its own binary again with an environment variable that says so; the
// package's TestMain calls Run first, which runs the process's body
// instead of the tests and exits.
package testproc

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Run runs body and exits when the environment variable env is set, and
// returns at once otherwise (the caller then runs its tests). body gets a
// context that ends after limit; the process exits with status 0 when
// body returns nil and 1, printing the error to standard error, when it
// does not. A body that outlives its context by a minute (a hang) ends
// the process with status 2, so that a process whose test died does not
// stay behind.
func Run(env string, limit time.Duration, body func(ctx context.Context) error) {
	if os.Getenv(env) == "" {
		return
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), limit,
		fmt.Errorf("%s: ran for %v", os.Args[0], limit))
	hang := time.AfterFunc(limit+time.Minute, func() {
		fmt.Fprintf(os.Stderr, "%s: still running %v after its limit of %v\n", os.Args[0], time.Minute, limit)
		os.Exit(2)
	})
	err := body(ctx)
	hang.Stop()
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
