package pubsub

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/examples/pubsub/client"
	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// refusalLog is a transport that notes the 503s its requests get: of
// publishes and of event streams, and those without a Retry-After or a
// JSON error.
type refusalLog struct {
	rt                     http.RoundTripper
	publishes, streams     atomic.Int64
	withoutAfter, withJSON atomic.Int64
}

func (l *refusalLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		return resp, err
	}
	if strings.HasSuffix(req.URL.Path, "/events") {
		l.streams.Add(1)
	} else {
		l.publishes.Add(1)
	}
	if resp.Header.Get("Retry-After") == "" {
		l.withoutAfter.Add(1)
	}
	if resp.Header.Get("Content-Type") == "application/json" {
		l.withJSON.Add(1)
	}
	return resp, nil
}

// TestOverload loads two members, each serving at most 2 requests and 2
// event streams at once, with many more publishers and readers of event
// streams than that, for a few seconds. Requests and streams beyond the
// bounds are refused with 503, a Retry-After and a JSON error, and the
// clients come back later; every publish acknowledged reaches every
// reader that got a stream, in one order; once the load ends every place
// is given back and the goroutines the load started are gone.
func TestOverload(t *testing.T) {
	const (
		members    = 2
		maxStreams = 2
		publishers = 12
		readers    = 8   // twice the streams the members serve
		perClient  = 500 // more than a publisher gets through in loadFor
		loadFor    = 3 * time.Second
		// goroutines is the slack of the count of goroutines after the
		// load: the group's own come and go, by a few; a load that left
		// its clients' or streams' behind would leave dozens.
		goroutines  = 5
		streamSlots = members * maxStreams
	)
	meters := metrictest.New(t)
	c := newCluster(t, Options{MaxRequests: 2, MaxStreams: maxStreams, MeterProvider: meters.Provider,
		Retain: publishers * perClient}) // every reader reads from the first message
	ms := c.openAll(members)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setup := &http.Transport{}
	for _, m := range ms {
		if err := client.New(urls(ms), client.WithHTTPClient(&http.Client{Transport: setup})).Subscribe(ctx, m.srv.URL, "t", ""); err != nil {
			t.Fatal(err)
		}
	}
	setup.CloseIdleConnections()
	before := runtime.NumGoroutine()

	log := &refusalLog{rt: &http.Transport{MaxIdleConnsPerHost: publishers + readers}}
	hc := &http.Client{Transport: log}
	// Each client starts at another member.
	clientAt := func(i int) *client.Client {
		u := urls(ms)
		k := i % len(u)
		return client.New(append(u[k:], u[:k]...), client.WithHTTPClient(hc))
	}

	// The readers read the topic from its first message on.
	rctx, stopReading := context.WithCancel(ctx)
	var got [readers]struct {
		sync.Mutex
		events []client.Event
	}
	var rwg sync.WaitGroup
	for i := range readers {
		rwg.Go(func() {
			s := clientAt(i).Events(rctx, "t", 1)
			defer s.Close()
			for {
				ev, err := s.Next()
				if err != nil {
					return // the context ended
				}
				got[i].Lock()
				got[i].events = append(got[i].events, ev)
				got[i].Unlock()
			}
		})
	}

	// The publishers publish until the load has lasted loadFor and seen
	// refusals of both kinds.
	var stop atomic.Bool
	var mu sync.Mutex
	acked := make(map[string]bool)
	var failed []error
	var pwg sync.WaitGroup
	for i := range publishers {
		pwg.Go(func() {
			cl := clientAt(i)
			for k := 0; k < perClient && !stop.Load(); k++ {
				msg := fmt.Sprintf("p%d-%d", i, k)
				_, err := cl.Publish(ctx, "t", []byte(msg))
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					acked[msg] = true
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	waitFor(t, "the load has lasted and met refusals", func() bool {
		// The readers beyond the streams served are refused on their
		// first try, and their streams stay refused while the others
		// read.
		return time.Since(start) >= loadFor && log.publishes.Load() > 0 && log.streams.Load() >= readers-streamSlots
	})
	stop.Store(true)
	pwg.Wait()
	lasted := time.Since(start)
	if len(failed) > 0 {
		t.Fatalf("%d publishes failed, the first: %v", len(failed), failed[0])
	}

	// Every reader that got a stream reads every acknowledged publish.
	var connected []int
	for i := range readers {
		got[i].Lock()
		if len(got[i].events) > 0 {
			connected = append(connected, i)
		}
		got[i].Unlock()
	}
	if len(connected) == 0 || len(connected) > streamSlots {
		t.Fatalf("%d readers got a stream, want 1 to %d", len(connected), streamSlots)
	}
	waitFor(t, "every reader with a stream has read every acknowledged publish", func() bool {
		for _, i := range connected {
			got[i].Lock()
			n := len(got[i].events)
			got[i].Unlock()
			if n < len(acked) {
				return false
			}
		}
		return true
	})
	stopReading()
	rwg.Wait()
	var first []client.Event
	for _, i := range connected {
		evs := got[i].events
		seen := make(map[string]bool)
		for k, ev := range evs {
			if ev.Index != uint64(k+1) || seen[string(ev.Data)] {
				t.Fatalf("reader %d: event %d is index %d (%q), want %d, once", i, k, ev.Index, ev.Data, k+1)
			}
			seen[string(ev.Data)] = true
		}
		for msg := range acked {
			if !seen[msg] {
				t.Fatalf("reader %d never read the acknowledged %q", i, msg)
			}
		}
		if first == nil {
			first = evs
		}
		n := min(len(first), len(evs))
		if !slices.EqualFunc(first[:n], evs[:n], func(a, b client.Event) bool { return string(a.Data) == string(b.Data) }) {
			t.Fatalf("readers %d and %d read the topic in two orders", connected[0], i)
		}
	}

	// The refusals: 503 with Retry-After and a JSON error, counted.
	refused := map[string]int64{
		reasonCapacity: meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonCapacity),
		reasonStreams:  meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonStreams),
	}
	seen503 := log.publishes.Load() + log.streams.Load()
	if log.withoutAfter.Load() != 0 || log.withJSON.Load() != seen503 {
		t.Errorf("of %d 503s, %d without Retry-After, %d with a JSON error; want all with both", seen503, log.withoutAfter.Load(), log.withJSON.Load())
	}
	if refused[reasonCapacity] < log.publishes.Load() || refused[reasonStreams] < log.streams.Load() {
		t.Errorf("refusals counted %v, fewer than the clients met (%d publishes, %d streams)", refused, log.publishes.Load(), log.streams.Load())
	}

	// Every place is given back, and the load's goroutines are gone.
	log.rt.(*http.Transport).CloseIdleConnections()
	waitFor(t, "every place is given back", func() bool {
		for _, m := range ms {
			r, by := m.node.admit.requests.Load()
			s, _ := m.node.admit.streams.Load()
			if r != 0 || by != 0 || s != 0 {
				return false
			}
		}
		return true
	})
	var after int
	waitFor(t, "the load's goroutines are gone", func() bool {
		after = runtime.NumGoroutine()
		return after <= before+goroutines
	})
	t.Logf("%v of load: %d publishes acknowledged; refused %d publishes and %d streams (503s the clients met: %d, %d); %d of %d readers got a stream; goroutines %d before, %d after",
		lasted.Round(time.Millisecond), len(acked), refused[reasonCapacity], refused[reasonStreams], log.publishes.Load(), log.streams.Load(), len(connected), readers, before, after)
}
