package rdma

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func TestFrameHeaderRoundTrip(t *testing.T) {
	for _, h := range []frameHeader{
		{typ: frameData, length: 0, stream: 1, imm: 2},
		{typ: frameData, length: 1 << 20, stream: 1<<64 - 1, imm: 1<<64 - 1},
		{typ: frameSignal, stream: 9, imm: 77},
		{typ: frameClose, stream: 3},
	} {
		b := make([]byte, frameHeaderLen)
		encodeFrameHeader(b, h)
		got, err := decodeFrameHeader(b, 1<<20)
		if err != nil || got != h {
			t.Errorf("decode(encode(%+v)) = %+v, %v", h, got, err)
		}
	}
}

func TestHelloRoundTrip(t *testing.T) {
	b := make([]byte, helloLen)
	encodeHello(b, 12345)
	if id, err := decodeHello(b); err != nil || id != 12345 {
		t.Fatalf("decodeHello = %d, %v", id, err)
	}
}

func FuzzDecodeFrameHeader(f *testing.F) {
	f.Add(header(frameData, 5, 1, 2))
	f.Add(header(frameSignal, 0, 7, 1<<63))
	f.Add(header(frameClose, 0, 3, 0))
	f.Add(header(frameData, 1<<31, 1, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxPayload = 1 << 20
		h, err := decodeFrameHeader(b, maxPayload)
		if err != nil {
			return
		}
		if h.typ != frameData && h.length != 0 || int(h.length) > maxPayload {
			t.Fatalf("accepted an invalid header %+v", h)
		}
		// A valid header is re-encoded exactly.
		out := make([]byte, frameHeaderLen)
		encodeFrameHeader(out, h)
		if !bytes.Equal(out, b[:frameHeaderLen]) {
			t.Fatalf("encode(decode(%x)) = %x", b[:frameHeaderLen], out)
		}
	})
}

// FuzzTCPConnInput feeds arbitrary bytes, after a valid hello, into a live
// endpoint that has a queue pair with posted receives open to the sender.
// The endpoint must neither panic nor hang, and must close cleanly.
func FuzzTCPConnInput(f *testing.F) {
	f.Add(header(frameSignal, 0, 1, 5))
	f.Add(append(header(frameData, 4, 1, 9), 1, 2, 3, 4))
	f.Add(append(header(frameData, 100, 1, 9), 1, 2, 3, 4))
	f.Add(header(frameClose, 0, 1, 0))
	f.Add(append(header(frameData, 2, 2, 0), 1, 2))
	f.Add(header(7, 0, 1, 0))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, input []byte) {
		ep, err := ListenTCP(TCPConfig{ID: 10, MaxFrameBytes: 4096 + frameHeaderLen, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		q, err := ep.Open(context.Background(), 5, 1, nopHandler{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			q.PostRecv(make([]byte, 64), uint64(i))
		}
		nc, err := net.Dial("tcp", ep.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		var hello [helloLen]byte
		encodeHello(hello[:], 5)
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(hello[:])
		io.ReadFull(nc, hello[:])
		nc.Write(input)
		// Wait until the endpoint has read everything: it sees end of input
		// and closes its side, or it closes earlier on bad input.
		nc.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, nc)

		done := make(chan struct{})
		go func() {
			defer close(done)
			ep.Close()
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("endpoint Close hung")
		}
	})
}

// nopHandler ignores every call.
type nopHandler struct{}

func (nopHandler) RecvComplete(uint64, int, uint64) {}
func (nopHandler) SendComplete(uint64)              {}
func (nopHandler) Signal(uint64)                    {}
func (nopHandler) Failed(error)                     {}
