package convoy

import (
	"context"
	"time"

	"github.com/convoy-gcs/convoy/membership"
)

// host runs a member without goroutines of its own: set (Group.host)
// only by the package's deterministic whole-group simulation
// (stepsim_test.go), which drives every member's runner — handle, settle,
// deadline — on its one goroutine and virtual clock. What production
// hands to goroutines of the member, the host schedules instead.
type host interface {
	// post queues ev for g's loop (Group.post); it never blocks.
	post(g *Group, ev event)
	// etcdWrite makes fn, an etcd write for g's loop, after wait, with
	// the retries runner.async makes (asyncRetry), and calls done once
	// it is made (nil) or given up (its last error).
	etcdWrite(g *Group, wait time.Duration, what string, fn func(ctx context.Context, s *membership.Store) error, done func(error))
}
