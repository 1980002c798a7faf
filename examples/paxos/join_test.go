package paxos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/examples/paxos/client"
)

// fill writes keys key-0..key-(n-1) through cl, deletes every tenth and
// swaps every seventh, and returns what the store should hold.
func fill(t *testing.T, cl *client.Client, n int, tag string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := make(map[string]string)
	for i := range n {
		k, v := fmt.Sprintf("key-%d", i), fmt.Sprintf("%s-%d", tag, i)
		if _, err := cl.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
		switch {
		case i%10 == 0:
			if _, err := cl.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		case i%7 == 0:
			old := []byte(v)
			if ok, _, err := cl.CAS(ctx, k, &old, []byte(v+"-swapped")); err != nil || !ok {
				t.Fatalf("cas %s: %v %v", k, ok, err)
			}
			want[k] = v + "-swapped"
		}
	}
	return want
}

// checkStale reads every key of want, and n more that do not exist, from
// each member on its own with stale reads: each must answer exactly want.
func (c *cluster) checkStale(t *testing.T, want map[string]string, keys int, ids ...convoy.NodeID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range ids {
		cl := c.client(c.urls(id))
		for i := range keys {
			k := fmt.Sprintf("key-%d", i)
			v, _, err := cl.GetStale(ctx, k)
			w, exists := want[k]
			switch {
			case !exists && !errors.Is(err, client.ErrNotFound):
				t.Fatalf("member %d: %s = %q, %v; want not found", id, k, v, err)
			case exists && (err != nil || string(v) != w):
				t.Fatalf("member %d: %s = %q, %v; want %q", id, k, v, err, w)
			}
		}
	}
}

// putWithKey sends PUT /kv/key to the member at url with an
// Idempotency-Key, and returns the status and body.
func (c *cluster) putWithKey(t *testing.T, url, key, id, value string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url+"/kv/"+key, strings.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(IdempotencyHeader, id)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestJoin: a fourth member joins a running store; it receives the state
// by transfer — data, applied index and kept results — and answers stale
// reads of every key as the others do, and a retry of a write applied
// before it joined with the original result.
func TestJoin(t *testing.T) {
	c := newCluster(t)
	c.start(3)
	cl := c.client(c.urls(1, 2, 3))
	want := fill(t, cl, 300, "v")
	code, first := c.putWithKey(t, c.urls(1)[0], "dedupe", "join-test-write", "first")
	if code != http.StatusOK {
		t.Fatalf("put: %d %s", code, first)
	}
	want["dedupe"] = "first"

	if _, err := c.open(4, 3, ""); err != nil {
		t.Fatal(err)
	}
	all := idsUpTo(4)
	c.waitServing(4, all...)
	c.waitSameState(all...)
	c.checkStale(t, want, 310, all...)

	// The kept result came along: the retry is not applied again.
	code, again := c.putWithKey(t, c.urls(4)[0], "dedupe", "join-test-write", "second")
	if code != http.StatusOK || again != first {
		t.Fatalf("retry at the joiner: %d %s, want 200 %s", code, again, first)
	}
	// And the joiner serves writes and linearizable reads.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c4 := c.client(c.urls(4))
	if _, err := c4.Put(ctx, "from-4", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, _, err := c.client(c.urls(1)).Get(ctx, "from-4"); err != nil || string(v) != "x" {
		t.Fatalf("get from member 1: %q %v", v, err)
	}
	if v, _, err := c4.Get(ctx, "dedupe"); err != nil || string(v) != "first" {
		t.Fatalf("get dedupe from member 4: %q %v", v, err)
	}
	c.waitSameState(all...)
}

// TestRestart: a member crashes and starts again on its durable
// directory while the others go on writing; it rebuilds its state from
// its log, catches up on what it missed, and ends with the same state as
// the others.
func TestRestart(t *testing.T) {
	c := newCluster(t)
	c.start(3)
	cl := c.client(c.urls(1, 2))
	fill(t, cl, 100, "before")
	gone := c.crash(3)
	c.waitServing(2, 1, 2)
	want := fill(t, cl, 150, "after")
	if _, err := c.open(3, 3, gone.dir); err != nil {
		t.Fatal(err)
	}
	all := idsUpTo(3)
	c.waitServing(3, all...)
	c.waitSameState(all...)
	c.checkStale(t, want, 160, all...)
}

// TestRestartAll: every member crashes, then all start again on their
// durable directories: the group restarts from their logs (one member's
// from a snapshot it kept plus the entries after it) with every
// acknowledged write, and the kept results that make retries safe.
func TestRestartAll(t *testing.T) {
	c := newCluster(t)
	c.start(3)
	cl := c.client(c.urls(1, 2, 3))
	fill(t, cl, 100, "before")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.member(1).node.Group().Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	want := fill(t, cl, 150, "after")
	code, first := c.putWithKey(t, c.urls(2)[0], "dedupe", "restart-all-write", "first")
	if code != http.StatusOK {
		t.Fatalf("put: %d %s", code, first)
	}
	want["dedupe"] = "first"
	before := c.waitSameState(idsUpTo(3)...)

	var dirs []string
	for _, id := range idsUpTo(3) {
		dirs = append(dirs, c.crash(id).dir)
	}
	c.startOn(dirs)
	all := idsUpTo(3)
	c.waitServing(3, all...)
	if after := c.waitSameState(all...); after != before {
		t.Fatalf("the state after the restart differs: %s", firstDiff(before, after))
	}
	c.checkStale(t, want, 160, all...)
	code, again := c.putWithKey(t, c.urls(3)[0], "dedupe", "restart-all-write", "second")
	if code != http.StatusOK || again != first {
		t.Fatalf("retry after the restart: %d %s, want 200 %s", code, again, first)
	}
	cl = c.client(c.urls(1, 2, 3))
	if _, err := cl.Put(ctx, "new", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if v, _, err := cl.Get(ctx, "dedupe"); err != nil || string(v) != "first" {
		t.Fatalf("get: %q %v", v, err)
	}
}
