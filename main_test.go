package convoy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/rdma"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// freeAddrsTB returns n loopback addresses free a moment ago.
func freeAddrsTB(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// memConfigs returns the configs of a group of n members with fixed
// membership over an in-memory fabric seeded with seed (closed, with the
// endpoints, at the end of the test); each member's is the one tweak
// makes of {Self, Members, Endpoint}.
func memConfigs(tb testing.TB, n int, seed int64, tweak func(*Config)) []Config {
	tb.Helper()
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: seed})
	tb.Cleanup(func() { fab.Close() })
	members := make([]Member, n)
	for i := range members {
		members[i] = Member{ID: NodeID(i + 1), Addr: fmt.Sprintf("m%d", i+1)}
	}
	cfgs := make([]Config, n)
	for i := range cfgs {
		ep, err := fab.Endpoint(members[i].ID)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { ep.Close() })
		cfgs[i] = Config{Self: members[i].ID, Members: members, Endpoint: ep}
		tweak(&cfgs[i])
	}
	return cfgs
}

// openAll opens one group per config concurrently (members wait for each
// other's connections) and returns them with a function closing them all.
// It fails the test if any Open fails.
func openAll(tb testing.TB, cfgs []Config, h func(i int) Handler) ([]*Group, func()) {
	tb.Helper()
	groups := make([]*Group, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() {
			groups[i], errs[i] = Open(context.Background(), cfgs[i], h(i))
		})
	}
	wg.Wait()
	closeAll := func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			closeAll()
			tb.Fatal(err)
		}
	}
	return groups, closeAll
}
