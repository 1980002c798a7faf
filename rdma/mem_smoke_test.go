package rdma

import (
	"context"
	"testing"
)

func TestMemSmoke(t *testing.T) {
	f := NewMemFabric(MemOptions{Seed: 1})
	defer f.Close()
	a, _ := f.Endpoint(1)
	b, _ := f.Endpoint(2)
	ra, rb := newRecorder(t, "a"), newRecorder(t, "b")
	qa, err := a.Open(context.Background(), 2, 7, ra)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.Open(context.Background(), 1, 7, rb)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	qb.PostRecv(buf, 1)
	qb.Signal(99)
	ra.waitCount("signal", 1)
	qa.PostSend([]byte("hello"), 5, 3)
	ev := rb.waitCount("recv", 1)
	if ev[0].n != 5 || string(buf[:5]) != "hello" || ev[0].imm != 5 {
		t.Fatal(ev)
	}
	ra.waitCount("send", 1)
	qa.Close()
	rb.waitFailed(ErrPeerClosed)
}
