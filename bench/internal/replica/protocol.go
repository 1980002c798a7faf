package replica

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// The replicas of systems that have no client protocol of their own (the
// raw Convoy library, Raft libraries) serve this one: a TCP connection
// carries many requests at once, each answered when it is done, in any
// order.
//
//	request:  u32 length of the rest | u64 id | u16 key length | key | value
//	response: u64 id | u16 error length | error (empty: done)
//
// A request is a write of value to key.
const (
	requestHeader  = 4 + 8 + 2
	responseHeader = 8 + 2
	// maxRequest bounds one request, so that a corrupt length cannot make
	// a replica allocate without limit.
	maxRequest = 64 << 20
)

// ApplyFunc carries out one write and returns once it is acknowledged.
// Serve calls it on a goroutine of its own for each request; ctx ends
// when the client's connection does.
type ApplyFunc func(ctx context.Context, key, value []byte) error

// Serve accepts connections on l and serves each until ctx ends or the
// listener fails. It logs, at debug level, why a connection ended.
func Serve(ctx context.Context, l net.Listener, apply ApplyFunc, log *slog.Logger) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			if err := serveConn(ctx, c, apply); err != nil && ctx.Err() == nil {
				log.Debug("client connection ended", "err", err)
			}
		})
	}
}

type kvResponse struct {
	id  uint64
	err error
}

func serveConn(ctx context.Context, c net.Conn, apply ApplyFunc) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	responses := make(chan kvResponse, 1024)
	writeErr := make(chan error, 1)
	go func() { writeErr <- writeResponses(ctx, c, responses) }()

	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [requestHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr[0:])
		id := binary.BigEndian.Uint64(hdr[4:])
		klen := binary.BigEndian.Uint16(hdr[12:])
		if n > maxRequest || int(n) < 8+2+int(klen) {
			return fmt.Errorf("bad request length %d", n)
		}
		body := make([]byte, int(n)-8-2)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		go func() {
			err := apply(ctx, body[:klen], body[klen:])
			select {
			case responses <- kvResponse{id: id, err: err}:
			case <-ctx.Done():
			}
		}()
		select {
		case err := <-writeErr:
			return err
		default:
		}
	}
}

// writeResponses writes responses as they come, flushing whenever none is
// waiting.
func writeResponses(ctx context.Context, c net.Conn, responses <-chan kvResponse) error {
	w := bufio.NewWriterSize(c, 64<<10)
	var hdr [responseHeader]byte
	for {
		var resp kvResponse
		select {
		case resp = <-responses:
		case <-ctx.Done():
			return ctx.Err()
		}
		msg := ""
		if resp.err != nil {
			msg = resp.err.Error()
			if len(msg) > 1<<15 {
				msg = msg[:1<<15]
			}
		}
		binary.BigEndian.PutUint64(hdr[0:], resp.id)
		binary.BigEndian.PutUint16(hdr[8:], uint16(len(msg)))
		w.Write(hdr[:])
		w.WriteString(msg)
		if len(responses) == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// Conn is a client connection of the protocol above, safe for concurrent
// use.
type Conn struct {
	c net.Conn

	wmu sync.Mutex // serializes writes of whole requests
	w   *bufio.Writer

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan error
	err     error // set once the connection failed; then pending is nil
}

// Dial connects to a replica's client address.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	k := &Conn{c: c, w: bufio.NewWriterSize(c, 64<<10), pending: make(map[uint64]chan error)}
	go k.readLoop()
	return k, nil
}

// ErrConnClosed is wrapped by the errors of the calls still waiting when
// the connection ends, and of every later call.
var ErrConnClosed = errors.New("connection closed")

func (k *Conn) readLoop() {
	r := bufio.NewReaderSize(k.c, 64<<10)
	var hdr [responseHeader]byte
	var err error
	for {
		if _, err = io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		id := binary.BigEndian.Uint64(hdr[0:])
		msg := make([]byte, binary.BigEndian.Uint16(hdr[8:]))
		if _, err = io.ReadFull(r, msg); err != nil {
			break
		}
		k.mu.Lock()
		done := k.pending[id]
		delete(k.pending, id)
		k.mu.Unlock()
		if done == nil {
			continue // the caller gave up
		}
		if len(msg) > 0 {
			done <- errors.New(string(msg))
		} else {
			done <- nil
		}
	}
	k.mu.Lock()
	k.err = fmt.Errorf("%w: %w", ErrConnClosed, err)
	for _, done := range k.pending {
		done <- k.err
	}
	k.pending = nil
	k.mu.Unlock()
}

// Put writes value to key and waits for the replica's answer or the end
// of ctx.
func (k *Conn) Put(ctx context.Context, key, value []byte) error {
	done := make(chan error, 1)
	k.mu.Lock()
	if k.err != nil {
		k.mu.Unlock()
		return k.err
	}
	k.nextID++
	id := k.nextID
	k.pending[id] = done
	k.mu.Unlock()

	var hdr [requestHeader]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(8+2+len(key)+len(value)))
	binary.BigEndian.PutUint64(hdr[4:], id)
	binary.BigEndian.PutUint16(hdr[12:], uint16(len(key)))
	k.wmu.Lock()
	k.w.Write(hdr[:])
	k.w.Write(key)
	k.w.Write(value)
	err := k.w.Flush()
	k.wmu.Unlock()
	if err != nil {
		k.c.Close() // ends readLoop, which fails every pending call
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		k.mu.Lock()
		if k.pending != nil {
			delete(k.pending, id)
		}
		k.mu.Unlock()
		return ctx.Err()
	}
}

// Close closes the connection; the calls still waiting fail with
// ErrConnClosed.
func (k *Conn) Close() error { return k.c.Close() }
