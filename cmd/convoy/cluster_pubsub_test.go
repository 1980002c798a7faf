package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	psclient "github.com/convoy-gcs/convoy/examples/pubsub/client"
)

// TestClusterPubSub: "convoy cluster -app pubsub" runs the pub/sub
// service on durable members. A client reads a topic from member 3,
// which is stopped and restarted on its data directory: it resumes there
// from an index before the restart and reads every message once, in
// order, at consecutive indexes, those published after the restart
// included. Then member 3, the only subscriber of another topic, is
// killed (SIGKILL) right after it served that topic's messages: restarted,
// it serves them all again, and the topic's later messages after them.
func TestClusterPubSub(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and member processes")
	}
	dir := t.TempDir()
	base := freeBase(t, 3)
	p := startCluster(t, "-app", "pubsub", "-nodes", "3", "-data", dir, "-http", hostPort("127.0.0.1", base), "-restart")
	var ready clusterReady
	p.next(t, &ready, time.Minute)
	if !ready.Ready || len(ready.Members) != 3 {
		t.Fatalf("ready line %+v", ready)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	var urls []string
	for _, m := range ready.Members {
		urls = append(urls, m.HTTP)
	}
	cl := psclient.New(urls, psclient.WithHTTPClient(hc))
	for _, u := range urls {
		if err := cl.Subscribe(ctx, u, "orders", ""); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	published := 0
	publish := func(k int) {
		t.Helper()
		for range k {
			published++
			if _, err := cl.Publish(ctx, "orders", fmt.Appendf(nil, "order-%d", published)); err != nil {
				t.Fatal(err)
			}
		}
	}
	at3 := psclient.New(urls[2:], psclient.WithHTTPClient(hc))
	read := func(s *psclient.Stream, next, to int) {
		t.Helper()
		for ; next <= to; next++ {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("order-%d", next)
			if ev.Index != uint64(next) || string(ev.Data) != want {
				t.Fatalf("event %d (%q) where %d (%q) was due", ev.Index, ev.Data, next, want)
			}
			if next > len(got) {
				got = append(got, want)
			}
		}
	}
	publish(10)
	s := at3.Events(ctx, "orders", 1)
	read(s, 1, published)
	s.Close()

	if err := syscall.Kill(ready.Members[2].PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var restart clusterExit
	p.next(t, &restart, 30*time.Second)
	if !restart.Restart || restart.ID != 3 {
		t.Fatalf("restart line %+v, want member 3 restarted", restart)
	}
	// Member 3 serves again once it is back in the group, subscribed.
	const from = 4
	for {
		s = at3.Events(ctx, "orders", from)
		ev, err := s.Next()
		if err == nil {
			if ev.Index != from || string(ev.Data) != got[from-1] {
				t.Fatalf("after the restart, event %d (%q) where %d (%q) was due", ev.Index, ev.Data, from, got[from-1])
			}
			break
		}
		s.Close()
		if ctx.Err() != nil {
			t.Fatalf("events from the restarted member 3: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer s.Close()
	read(s, from+1, published)
	before := published
	publish(5)
	read(s, before+1, published)
	if len(got) != 15 {
		t.Fatalf("read %d messages, want 15", len(got))
	}
	s.Close()

	// Member 3 alone subscribes to "audit", published through member 1.
	// Killed (SIGKILL) right after it served the messages, it replays
	// them all on restart: a durable topic's message is handed out once
	// every subscriber has it on disk, and stays there.
	if err := cl.Subscribe(ctx, urls[2], "audit", ""); err != nil {
		t.Fatal(err)
	}
	at1 := psclient.New(urls[:1], psclient.WithHTTPClient(hc))
	// Member 1 knows the topic once it installed the view member 3's
	// subscription made.
	for {
		ts, err := at1.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ts, func(ti psclient.TopicInfo) bool { return ti.Name == "audit" }) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	audit := 0
	publishAudit := func(k int) {
		t.Helper()
		for range k {
			audit++
			if _, err := at1.Publish(ctx, "audit", fmt.Appendf(nil, "audit-%d", audit)); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAudit := func(s *psclient.Stream, from, to int) {
		t.Helper()
		for next := from; next <= to; next++ {
			ev, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("audit-%d", next); ev.Index != uint64(next) || string(ev.Data) != want {
				t.Fatalf("audit event %d (%q) where %d (%q) was due", ev.Index, ev.Data, next, want)
			}
		}
	}
	publishAudit(20)
	s = at3.Events(ctx, "audit", 1)
	readAudit(s, 1, audit)
	s.Close()
	if err := syscall.Kill(restart.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.next(t, &restart, 30*time.Second)
	if !restart.Restart || restart.ID != 3 {
		t.Fatalf("restart line %+v, want member 3 restarted", restart)
	}
	for {
		s = at3.Events(ctx, "audit", 1)
		ev, err := s.Next()
		if err == nil {
			if ev.Index != 1 || string(ev.Data) != "audit-1" {
				t.Fatalf("after the kill, audit event %d (%q) where 1 (\"audit-1\") was due", ev.Index, ev.Data)
			}
			break
		}
		s.Close()
		if ctx.Err() != nil {
			t.Fatalf("audit events from the restarted member 3: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer s.Close()
	readAudit(s, 2, audit)
	// Its subscription is back, and the topic's indexes go on.
	before = audit
	publishAudit(5)
	readAudit(s, before+1, audit)
}
