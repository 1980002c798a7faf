package convoy_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/etcddev"
	"github.com/convoy-gcs/convoy/rdma"
)

// openAll opens one member per config, concurrently: each waits for the
// others as it needs them.
func openAll(ctx context.Context, cfgs []convoy.Config, h func(i int) convoy.Handler) []*convoy.Group {
	groups := make([]*convoy.Group, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Go(func() { groups[i], errs[i] = convoy.Open(ctx, cfgs[i], h(i)) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
	return groups
}

// A group of three with fixed membership, here in one process over the
// in-memory transport (a deployment gives each member its Addr and lets
// Open listen on TCP). Every member delivers the same messages in the same
// order; Sync makes a member catch up with what any member delivered.
func Example() {
	ctx := context.Background()
	fab := rdma.NewMemFabric(rdma.MemOptions{})
	defer fab.Close()
	members := []convoy.Member{{ID: 1}, {ID: 2}, {ID: 3}}
	cfgs := make([]convoy.Config, len(members))
	for i, m := range members {
		ep, err := fab.Endpoint(m.ID)
		if err != nil {
			log.Fatal(err)
		}
		defer ep.Close()
		cfgs[i] = convoy.Config{Self: m.ID, Members: members, Mode: convoy.Atomic, Endpoint: ep}
	}
	var mu sync.Mutex
	var third []string // what member 3 delivered
	groups := openAll(ctx, cfgs, func(i int) convoy.Handler {
		return func(d convoy.Delivery) {
			if i == 2 {
				mu.Lock()
				third = append(third, fmt.Sprintf("%d: %s from %d", d.Index, d.Payload, d.Sender))
				mu.Unlock()
			}
		}
	})
	for _, g := range groups {
		defer g.Close()
	}

	for _, p := range []string{"x=1", "y=2", "x=3"} {
		r, err := groups[0].Send(ctx, []byte(p), convoy.WaitDelivered())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s delivered at index %d\n", p, r.Index)
	}
	// Member 3 has delivered everything member 1 had, once Sync returns.
	if _, err := groups[2].Sync(ctx); err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	for _, d := range third {
		fmt.Println("member 3:", d)
	}
	mu.Unlock()
	// Output:
	// x=1 delivered at index 1
	// y=2 delivered at index 2
	// x=3 delivered at index 3
	// member 3: 1: x=1 from 1
	// member 3: 2: y=2 from 1
	// member 3: 3: x=3 from 1
}

// A view-managed group: its views live in etcd (here a development etcd
// in this process, from package etcddev), members join and leave, and a
// failed member is detected and excluded.
func Example_viewManaged() {
	ctx := context.Background()
	etcd, err := etcddev.Start(ctx, etcddev.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()

	cfgs := make([]convoy.Config, 3)
	for i := range cfgs {
		cfgs[i] = convoy.Config{
			Self:           convoy.NodeID(i + 1),
			Addr:           "127.0.0.1:0", // Open listens on a free port and registers it
			Etcd:           &convoy.EtcdConfig{Endpoints: etcd.Endpoints()},
			InitialMembers: 3, // the first view holds all three
		}
	}
	views := make(chan convoy.View, 8) // the views member 1 takes part in
	cfgs[0].OnView = func(v convoy.View) { views <- v }
	groups := openAll(ctx, cfgs, func(int) convoy.Handler { return nil })
	v := <-views
	fmt.Printf("view %d: %d members\n", v.Epoch, len(v.Members))

	// Member 3 leaves; the others go on in the next view.
	if err := groups[2].Leave(ctx); err != nil {
		log.Fatal(err)
	}
	v = <-views
	fmt.Printf("view %d: %d members, %v left\n", v.Epoch, len(v.Members), v.Left)
	st := groups[0].Status()
	fmt.Println("member 1:", st.Phase, "in view", st.Epoch, "lease", st.Lease)
	for _, g := range groups[:2] {
		g.Close()
	}
	// Output:
	// view 1: 3 members
	// view 2: 2 members, [3] left
	// member 1: active in view 2 lease held
}

// Durable delivery: a message reaches the application only once every
// member has it in its log on disk, and WaitDurable says when a message
// survives the crash of every member.
func Example_durable() {
	ctx := context.Background()
	fab := rdma.NewMemFabric(rdma.MemOptions{})
	defer fab.Close()
	members := []convoy.Member{{ID: 1}, {ID: 2}, {ID: 3}}
	cfgs := make([]convoy.Config, len(members))
	for i, m := range members {
		ep, err := fab.Endpoint(m.ID)
		if err != nil {
			log.Fatal(err)
		}
		defer ep.Close()
		dir, err := os.MkdirTemp("", "convoy-example")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cfgs[i] = convoy.Config{Self: m.ID, Members: members, Endpoint: ep, Durable: &convoy.DurableConfig{Dir: dir}}
	}
	groups := openAll(ctx, cfgs, func(int) convoy.Handler { return nil })
	for _, g := range groups {
		defer g.Close()
	}
	r, err := groups[1].Send(ctx, []byte("balance=100"), convoy.WaitDelivered())
	if err != nil {
		log.Fatal(err)
	}
	if err := groups[1].WaitDurable(ctx, r.Index); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("index %d is on every member's disk\n", r.Index)
	// Output:
	// index 1 is on every member's disk
}
