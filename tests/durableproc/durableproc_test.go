package durableproc

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/internal/testproc"
)

// TestMain runs the tests, or, in a process started as a member (see
// cluster.start), the member.
func TestMain(m *testing.M) {
	testproc.Run(envID, memberLimit, func(context.Context) error {
		s, err := memberSpecFromEnv()
		if err != nil {
			return err
		}
		if err := runMember(s); err != nil {
			return fmt.Errorf("member %d: %w", s.id, err)
		}
		return nil
	})
	goleak.VerifyTestMain(m)
}

// memberLimit bounds a member process's run: it only catches a hang.
const memberLimit = 5 * time.Minute

// Scenario sizes.
const (
	// killRounds is how many times TestKillAll kills the whole group.
	killRounds = 8
	// progressAcks is how many more acknowledgements a scenario waits for
	// before its next step.
	progressAcks = 200
)

// startEtcd starts an etcd in this process for one test.
func startEtcd(t *testing.T) []string {
	t.Helper()
	srv, err := etcddev.Start(t.Context(), etcddev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv.Endpoints()
}

// TestKillAll: three members of a durable group, each sending under
// load, are killed with SIGKILL, all of them, round after round (see
// killAll for the ways), and started again on their data directories;
// every third round they are killed once more while the group restarts.
// Every payload reported durable survives every round on every member, at
// the index it had, and the group goes on after each restart.
func TestKillAll(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes; skipped with -short")
	}
	c := newCluster(t, startEtcd(t))
	c.startAll()
	c.waitInView()
	for round := 1; round <= killRounds; round++ {
		began := time.Now()
		c.waitAcks(c.live(), progressAcks)
		loaded := time.Now()
		c.killAll(round)
		c.startAll()
		if round%3 == 0 {
			// The members replay their logs, claim them or have just
			// restarted the group, depending on the delay.
			delay := time.Duration(50+30*round) * time.Millisecond
			time.Sleep(delay)
			t.Logf("round %d: killing every member again %v into the restart", round, delay)
			c.killTogether()
			c.startAll()
		}
		c.waitInView()
		restarted := time.Now()
		h := c.checkRecords()
		if t.Failed() {
			t.FailNow()
		}
		v := c.live()[0].summary().lastView
		t.Logf("round %d: restarted in view %d at index %d; %d payloads reported durable so far (load %v, restart %v, checks %v)",
			round, v.Epoch, v.Start, len(h.acks), loaded.Sub(began).Round(time.Millisecond),
			restarted.Sub(loaded).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	}
	c.waitAcks(c.live(), progressAcks)
	c.finish()
}

// startAll starts a new run of every member, at once.
func (c *cluster) startAll() {
	c.t.Helper()
	for id := uint64(1); id <= groupSize; id++ {
		c.start(id)
	}
}

// killAll kills every live member with SIGKILL and waits until they are
// gone, in one of three ways by round:
//
//   - all at once, as a power failure would (odd rounds);
//   - one of them 20 to 50 ms before the others, so that the logs end at
//     different places in the same view (rounds 2, 6, 10, ...);
//   - one of them first, and the others once they went on without it in
//     a view of their own and made progress: the group restarts from a
//     view the first is not a member of, and the first's log is behind
//     (rounds 4, 8, ...).
//
// The member killed first changes from round to round.
func (c *cluster) killAll(round int) {
	c.t.Helper()
	if round%2 == 1 {
		c.killTogether()
		return
	}
	ps := c.live()
	first := ps[round/2%len(ps)]
	var rest []*proc
	var ids []uint64
	for _, p := range ps {
		if p != first {
			rest = append(rest, p)
			ids = append(ids, p.id)
		}
	}
	if round%4 == 0 {
		// The others must go on without it: they do if the group was
		// whole. A member late with its heartbeats on a loaded machine
		// may have been excluded meanwhile (it then rejoins), and
		// killing another member of the smaller view would leave a view
		// without a majority, which rightly waits.
		c.waitInView()
	}
	c.kill(first)
	if round%4 == 0 {
		c.waitExited(first)
		c.waitMembers(rest, ids...)
		c.waitAcks(rest, progressAcks/2)
		c.t.Logf("round %d: killed %v; the others went on in view %d", round, first, rest[0].summary().lastView.Epoch)
		c.killTogether()
		return
	}
	gap := time.Duration(20+(round*7)%31) * time.Millisecond
	time.Sleep(gap)
	for _, p := range rest {
		c.kill(p)
	}
	c.waitExited(ps...)
	c.t.Logf("round %d: killed %v, the others %v later", round, first, gap)
}

// killTogether kills every member still running with SIGKILL at once
// and waits until they are gone.
func (c *cluster) killTogether() {
	c.t.Helper()
	var ps []*proc
	for _, p := range c.live() {
		if !p.expectExit {
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		c.kill(p)
	}
	c.waitExited(ps...)
	c.t.Logf("killed every running member at once:\n%s", c.status())
}

// TestWipedDisk: one of three members of a durable group is killed, its
// data directory deleted, and it is started again on the empty
// directory. The others go on without it meanwhile; it rejoins through
// state transfer and ends with the same state as they.
func TestWipedDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts member processes; skipped with -short")
	}
	c := newCluster(t, startEtcd(t))
	c.startAll()
	c.waitInView()
	c.waitAcks(c.live(), progressAcks)

	wiped := c.current[3]
	c.kill(wiped)
	c.waitExited(wiped)
	// The group goes on without it.
	survivors := []*proc{c.current[1], c.current[2]}
	c.waitMembers(survivors, 1, 2)
	c.waitAcks(survivors, progressAcks)
	if err := os.RemoveAll(c.data[3]); err != nil {
		t.Fatal(err)
	}
	again := c.start(3)
	c.waitInView()
	c.waitAcks(c.live(), progressAcks)
	c.finish()

	var restored, replayed int
	for _, r := range again.records() {
		switch {
		case r.Restored != nil:
			restored++
		case r.Delivery != nil && r.Delivery.Replayed:
			replayed++
		}
	}
	if restored == 0 || replayed > 0 {
		t.Errorf("the member restarted on an empty directory restored %d states and replayed %d deliveries; want a state transfer and no replay", restored, replayed)
	}
}
