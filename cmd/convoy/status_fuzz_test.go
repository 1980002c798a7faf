package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// canned is a member that answers every request with the same bytes, as
// read off the connection: a response the HTTP client must parse (or
// fail to).
type canned []byte

func (c canned) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(c)), r)
}

// FuzzMemberStatus gives a member's GET /status, which "convoy status",
// the page's GET /group and "convoy cluster" read, an arbitrary answer.
// A 200 whose body decodes must give exactly what it says, a 503
// errStarting, anything else an error; and the report that holds what
// was read must print as a table and as JSON, and the JSON must decode
// to a report that prints the same.
func FuzzMemberStatus(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		api := apiClient{hc: &http.Client{Transport: canned(raw)}}
		s, err := fetchStatus(context.Background(), api, "http://member:7101")

		status, body := 0, []byte(nil)
		if resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil); rerr == nil {
			if b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20)); rerr == nil {
				status, body = resp.StatusCode, b
			}
		}
		var want memberStatus
		switch {
		case status == http.StatusOK && json.Unmarshal(body, &want) == nil:
			if err != nil || !reflect.DeepEqual(s, want) {
				t.Fatalf("status %q read as %+v, %v", body, s, err)
			}
		case status == http.StatusServiceUnavailable:
			if !errors.Is(err, errStarting) {
				t.Fatalf("503 %q read as %v, want errStarting", body, err)
			}
		case status/100 == 3:
			// The HTTP client follows redirects.
		default:
			if err == nil {
				t.Fatalf("%d %q read as %+v", status, body, s)
			}
		}

		m := statusMember{ID: 1, InView: true, Incarnation: 7, Addr: "10.0.0.1:7000", App: appKV, HTTP: "http://member:7101", PID: 42,
			SuspectedBy: map[uint64]string{2: "silent"}}
		if err != nil {
			m.Error = shortError(err)
		} else {
			m.Status = &s
		}
		r := statusReport{Prefix: "/convoy/", Epoch: 3, Start: 10, Members: []statusMember{m, {ID: 2, Error: "no API URL recorded"}}}
		if err := r.print(io.Discard); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := printJSON(&out, r); err != nil {
			t.Fatalf("the report does not print as JSON: %v", err)
		}
		var back statusReport
		if err := json.Unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("the report's JSON %s does not decode: %v", out.Bytes(), err)
		}
		var again bytes.Buffer
		if err := printJSON(&again, back); err != nil || !bytes.Equal(again.Bytes(), out.Bytes()) {
			t.Fatalf("the report's JSON\n%s\ndecodes to one that prints as\n%s", out.Bytes(), again.Bytes())
		}
	})
}

// FuzzHTTPRecord decodes an arbitrary API record, which any process with
// access to the group's prefix in etcd can write, under an arbitrary
// key. A record it accepts must be the one of the member its key names,
// and survive its own encoding.
func FuzzHTTPRecord(f *testing.F) {
	const prefix = "/convoy/"
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		recs, problems := decodeHTTPRecords([]*mvccpb.KeyValue{{Key: []byte(httpKeys(prefix) + key), Value: value}}, prefix)
		if len(problems) != 0 {
			if len(recs) != 0 || len(problems) != 1 {
				t.Fatalf("one record decoded as %d and %d problems", len(recs), len(problems))
			}
			return
		}
		if len(recs) != 1 {
			t.Fatalf("one record decoded as %d", len(recs))
		}
		for id, rec := range recs {
			if named, err := strconv.ParseUint(key, 10, 64); err != nil || named != id || rec.ID != id {
				t.Fatalf("record %+v decoded as member %d's, from key %q", rec, id, key)
			}
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			again, problems := decodeHTTPRecords([]*mvccpb.KeyValue{{Key: []byte(httpKey(prefix, id)), Value: b}}, prefix)
			if len(problems) != 0 || again[id] != rec {
				t.Fatalf("record %+v encodes as %s, which decodes as %+v, %v", rec, b, again, problems)
			}
		}
	})
}
