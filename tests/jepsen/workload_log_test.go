package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	"github.com/convoy-gcs/convoy/tests/jepsen/check"
)

// Files of a log run's report.
const (
	// logHistory is the history, as JSON lines of check.LogOp.
	logHistory = "log-history.jsonl"
	// logDumps is each member's log at the end, as JSON lines of
	// check.LogDump.
	logDumps = "log-dumps.jsonl"
)

// Bounds of the log workload.
const (
	// readWindow is how far below the highest position seen a read, a
	// range or a stream read starts, at most.
	readWindow = 40
	// keepAfterTrim is how many positions below the highest seen a trim
	// keeps.
	keepAfterTrim = 30
	// dumpTries bounds the reads of one member's log at the end, each
	// started again if the member's trim point or tail moved meanwhile.
	dumpTries = 5
)

// logWorkload is the shared-log workload a seed chooses: the streams
// appends name and the mix of operations.
type logWorkload struct {
	seed    int64
	streams []string
	// Percentages of appends, reads of one position, range reads, tails
	// and stream reads; the rest are trims.
	appendPct, readPct, rangePct, tailPct, streamPct int
	rec                                              *recorder[check.LogOp]
	// high is one more than the highest position any client has seen
	// (appended, read or as a tail): reads aim near it.
	high atomic.Uint64
	// dumps are the members' logs at the end, once check has read them.
	dumps []check.LogDump
}

func newLogWorkload(seed int64, zero time.Time) *logWorkload {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6c6f67))
	w := &logWorkload{seed: seed, rec: &recorder[check.LogOp]{zero: zero}}
	w.appendPct = 35 + r.IntN(21)
	w.readPct = 10 + r.IntN(11)
	w.rangePct = 5 + r.IntN(11)
	w.tailPct = 5 + r.IntN(11)
	w.streamPct = 5 + r.IntN(11)
	for i := range 2 + r.IntN(3) {
		w.streams = append(w.streams, fmt.Sprintf("s%d", i+1))
	}
	return w
}

func (w *logWorkload) String() string {
	return fmt.Sprintf("log: streams %v, %d%% append, %d%% read, %d%% range, %d%% tail, %d%% stream, %d%% trim",
		w.streams, w.appendPct, w.readPct, w.rangePct, w.tailPct, w.streamPct, w.trimPct())
}

func (w *logWorkload) trimPct() int {
	return 100 - w.appendPct - w.readPct - w.rangePct - w.tailPct - w.streamPct
}

// newLogClient returns a client of the log at urls whose every try at
// one member ends within attemptTimeout (a paused member accepts
// connections but answers nothing).
func newLogClient(urls []string, hc *http.Client) *logclient.Client {
	bounded := &http.Client{Transport: hc.Transport, Timeout: attemptTimeout}
	return logclient.New(urls, logclient.WithHTTPClient(bounded))
}

// saw records that position p-1 exists.
func (w *logWorkload) saw(p uint64) {
	for {
		h := w.high.Load()
		if p <= h || w.high.CompareAndSwap(h, p) {
			return
		}
	}
}

// near returns a position from readWindow below the highest seen to a
// few beyond it.
func (w *logWorkload) near(r *rand.Rand) uint64 {
	h := w.high.Load()
	lo := h - min(h, readWindow)
	return lo + r.Uint64N(h-lo+4)
}

func (w *logWorkload) runClient(stop context.Context, id int, urls []string, hc *http.Client) {
	cl := newLogClient(urls, hc)
	r := rand.New(rand.NewPCG(uint64(w.seed), uint64(id)+1))
	for n := 1; stop.Err() == nil; n++ {
		op := check.LogOp{Client: id}
		switch p := r.IntN(100); {
		case p < w.appendPct:
			op.Kind, op.Data = check.Append, []byte(fmt.Sprintf("c%d-%d", id, n))
			for _, s := range w.streams {
				if r.IntN(3) == 0 {
					op.Streams = append(op.Streams, s)
				}
			}
		case p < w.appendPct+w.readPct:
			op.Kind, op.Position = check.Read, w.near(r)
		case p < w.appendPct+w.readPct+w.rangePct:
			op.Kind, op.From = check.ReadRange, w.near(r)
			op.To = op.From + 1 + r.Uint64N(readWindow)
		case p < w.appendPct+w.readPct+w.rangePct+w.tailPct:
			op.Kind = check.Tail
		case p < w.appendPct+w.readPct+w.rangePct+w.tailPct+w.streamPct:
			op.Kind, op.Stream, op.From = check.ReadStream, w.streams[r.IntN(len(w.streams))], w.near(r)
		default:
			op.Kind, op.Before = check.Trim, w.high.Load()-min(w.high.Load(), keepAfterTrim)
		}
		w.do(cl, op, opTimeout)
		think(stop, r)
	}
}

// do runs op through cl, bounded by timeout, records it and returns it
// with its outcome: OK with its result; Fail if a member refused it as
// malformed or too large (it was not applied); Unknown otherwise (its
// context ended while no member could serve it, or a member failed it
// with a 5xx: a write may or may not have taken effect). The client
// retries a call with the same request id, so the operation spans every
// try.
func (w *logWorkload) do(cl *logclient.Client, op check.LogOp, timeout time.Duration) check.LogOp {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op.Invoke = w.rec.now()
	var err error
	switch op.Kind {
	case check.Append:
		op.Position, err = cl.Append(ctx, op.Data, op.Streams...)
		if err == nil {
			w.saw(op.Position + 1)
		}
	case check.Read:
		op.Data, err = cl.Read(ctx, op.Position)
		switch {
		case err == nil:
			op.Status = check.Found
			w.saw(op.Position + 1)
		case errors.Is(err, logclient.ErrUnwritten):
			op.Status, err = check.Unwritten, nil
		case errors.Is(err, logclient.ErrTrimmed):
			op.Status, err = check.Trimmed, nil
		}
	case check.ReadRange:
		op.Entries, err = logEntries(cl.ReadRange(ctx, op.From, op.To))
	case check.Tail:
		op.Tail, err = cl.Tail(ctx)
		if err == nil {
			w.saw(op.Tail)
		}
	case check.ReadStream:
		op.Entries, err = logEntries(cl.ReadStream(ctx, op.Stream, op.From))
	case check.Trim:
		op.TrimPoint, err = cl.Trim(ctx, op.Before)
	}
	op.Complete = w.rec.now()
	switch {
	case err == nil:
		op.Outcome = check.OK
	case errors.Is(err, logclient.ErrBadRequest), errors.Is(err, logclient.ErrTooLarge):
		op.Outcome = check.Fail
	default:
		op.Outcome = check.Unknown
	}
	if op.Outcome != check.OK {
		// Only the arguments stay.
		if op.Kind == check.Append {
			op.Position = 0
		} else {
			op.Data = nil
		}
		op.Status, op.Entries, op.Tail, op.TrimPoint = "", nil, 0, 0
	}
	w.rec.add(op)
	return op
}

// logEntries converts what the client read.
func logEntries(entries []logclient.Entry, err error) ([]check.Entry, error) {
	if err != nil {
		return nil, err
	}
	out := make([]check.Entry, 0, len(entries))
	for _, e := range entries {
		out = append(out, check.Entry{Position: e.Position, Data: e.Data})
	}
	return out, nil
}

func (w *logWorkload) serve(url string, member, first int, hc *http.Client, bound time.Duration) error {
	cl := newLogClient([]string{url}, hc)
	deadline := time.Now().Add(bound)
	tail := w.do(cl, check.LogOp{Client: first, Kind: check.Tail}, time.Until(deadline))
	app := w.do(cl, check.LogOp{Client: first + 1, Kind: check.Append, Data: []byte(fmt.Sprintf("live-%d", member))}, time.Until(deadline))
	if tail.Outcome != check.OK || app.Outcome != check.OK {
		return fmt.Errorf("tail: %s, append: %s", tail.Outcome, app.Outcome)
	}
	return nil
}

// check reads back the log of every member not lost, through that
// member alone, and checks the history against them.
func (w *logWorkload) check(c *cluster, hc *http.Client) (ops, unknown int, err error) {
	var wg sync.WaitGroup
	dumps := make([]check.LogDump, len(c.members))
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		if m.lost {
			continue
		}
		wg.Go(func() {
			dumps[i], errs[i] = dumpLog(m, hc)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("reading member %d's log: %w", m.id, errs[i])
			}
		})
	}
	wg.Wait()
	for i, m := range c.members {
		if !m.lost && errs[i] == nil {
			w.dumps = append(w.dumps, dumps[i])
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	h := w.rec.history()
	for _, op := range h {
		if op.Outcome == check.Unknown {
			unknown++
		}
	}
	c.tl.add("read back the logs of %d members", len(w.dumps))
	if r := check.CheckLog(h, w.dumps); !r.OK {
		err = errors.New(r.String())
	}
	return len(h), unknown, err
}

// dumpLog reads member m's log: after a tail through it (so that it has
// applied everything acknowledged anywhere before), its trim point and
// tail from its status, then the entries between them; again if its
// trim point or tail moved meanwhile.
func dumpLog(m *member, hc *http.Client) (check.LogDump, error) {
	ctx, cancel := context.WithTimeout(context.Background(), livenessBound)
	defer cancel()
	cl := newLogClient([]string{m.url()}, hc)
	if _, err := cl.Tail(ctx); err != nil {
		return check.LogDump{}, err
	}
	for range dumpTries {
		st, err := cl.Status(ctx, m.url())
		if err != nil {
			return check.LogDump{}, err
		}
		d := check.LogDump{Member: strconv.Itoa(m.id), Trim: st.Trim, Tail: st.Tail, Entries: []check.Entry{}}
		for from := st.Trim; from < st.Tail; {
			entries, err := logEntries(cl.ReadRange(ctx, from, st.Tail))
			if err != nil {
				return check.LogDump{}, err
			}
			if len(entries) == 0 {
				break
			}
			d.Entries = append(d.Entries, entries...)
			from = entries[len(entries)-1].Position + 1
		}
		again, err := cl.Status(ctx, m.url())
		if err != nil {
			return check.LogDump{}, err
		}
		if again.Trim == st.Trim && again.Tail == st.Tail {
			return d, nil
		}
	}
	return check.LogDump{}, fmt.Errorf("its trim point or tail moved during each of %d reads", dumpTries)
}

// report writes the history and the members' logs.
func (w *logWorkload) report(dir string) error {
	return errors.Join(
		writeHistory(filepath.Join(dir, logHistory), w.rec.history()),
		writeHistory(filepath.Join(dir, logDumps), w.dumps))
}
