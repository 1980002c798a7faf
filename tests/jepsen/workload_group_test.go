package jepsen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/tests/jepsen/check"
	"github.com/convoy-gcs/convoy/tests/jepsen/internal/grouprec"
)

// groupHistory is the file of a group run's report that holds the
// history checked, as one check.GroupHistory in JSON; the members'
// records are among the logs.
const groupHistory = "group-history.json"

// Bounds of the group workload's end.
const (
	// stopTimeout bounds stopping one member's sender: the Send under
	// way returns within the member's own bound (5s).
	stopTimeout = 10 * time.Second
	// finishRetry is the pause before asking a member to finish again
	// after it could not be reached.
	finishRetry = 100 * time.Millisecond
)

// groupWorkload is the raw group's workload: the members
// (internal/groupmember) send messages of their own, as the seed
// chooses (grouprec.Mix), and record what they install, deliver and
// send; there are no clients.
type groupWorkload struct {
	seed int64
	// hist is the history, once check has read the members' records.
	hist *check.GroupHistory
}

func newGroupWorkload(seed int64) *groupWorkload { return &groupWorkload{seed: seed} }

func (w *groupWorkload) String() string {
	wait, pause := grouprec.Mix(w.seed)
	return fmt.Sprintf("group: every member sends, %d%% of the sends waiting until the message is durable, %v after each", wait, pause)
}

// runClient does nothing: the members send of their own accord.
func (w *groupWorkload) runClient(context.Context, int, []string, *http.Client) {}

// stop makes every member that runs stop sending, and waits until each
// has: from then on, nothing more is reported durable, and a member
// that finishes (serve) has delivered everything that was.
func (w *groupWorkload) stop(c *cluster, hc *http.Client) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.members))
	for i, m := range c.members {
		if m.lost || !m.up() {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			if err := post(ctx, hc, m.url()+"/stop"); err != nil {
				errs[i] = fmt.Errorf("stopping member %d's sender: %w", m.id, err)
			}
		})
	}
	wg.Wait()
	c.tl.add("every member stopped sending")
	return errors.Join(errs...)
}

// serve asks the member at url to finish: to send a message and deliver
// it, within bound. member and first are unused: the member records its
// message itself.
func (w *groupWorkload) serve(url string, member, first int, hc *http.Client, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for {
		err := post(ctx, hc, url+"/finish")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("it delivered no message of its own: %w", err)
		case <-time.After(finishRetry):
		}
	}
}

// post posts an empty request to url, and returns an error unless the
// answer is 200.
func post(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// check reads the records of every run of every member and checks the
// history they make. It counts the sends as the operations, those
// without an answer as unknown.
func (w *groupWorkload) check(c *cluster, _ *http.Client) (ops, unknown int, err error) {
	runs, err := readGroupRuns(c.members)
	if err != nil {
		return 0, 0, err
	}
	h := grouprec.History(runs)
	w.hist = &h
	for _, s := range h.Sends {
		if s.Status == check.Unanswered {
			unknown++
		}
	}
	c.tl.add("read the records of %d runs: %d incarnations", len(runs), len(h.Incarnations))
	if r := check.CheckGroup(h); !r.OK {
		err = errors.New(r.String())
	}
	return len(h.Sends), unknown, err
}

// readGroupRuns reads the records of every run of members; a run's last
// line, torn by a kill or still being written, is dropped.
func readGroupRuns(members []*member) ([]grouprec.Run, error) {
	var runs []grouprec.Run
	for _, m := range members {
		for i, path := range m.outs {
			f, err := os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				continue // killed before it opened its file
			}
			if err != nil {
				return nil, err
			}
			recs, _, err := check.ReadLines[grouprec.Record](f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("member %d's records (%s): %w", m.id, filepath.Base(path), err)
			}
			runs = append(runs, grouprec.Run{Member: uint64(m.id), Run: uint64(i + 1), Records: recs})
		}
	}
	return runs, nil
}

// report writes the history checked, if check got as far as reading it.
func (w *groupWorkload) report(dir string) error {
	if w.hist == nil {
		return nil
	}
	b, err := json.Marshal(w.hist)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, groupHistory), b, 0o644)
}
